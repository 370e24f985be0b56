// ThroughputWindow: a job's samples per second as the Raft leader measures it, from the
// "samples" of rank 0's progress reports (round_report.h), for throughput scaling
// (rendezvous/scheduler.h scale_step()) and the metrics. Pure: every call takes its time.
//
// A window belongs to one round. It opens at the first report of that round with a sample
// count (its first step is done: start-up and the re-formation are behind it) and is full once
// `window` has passed since; its rate is the samples between the opening report and the newest
// one over the time between them (the leader's receive times: the daemons forward a report
// within 0.1 s, a small error over a window of 10 s or more). take() hands out a full window's
// rate once and opens the next window at the newest report. A report of another round, or a
// count that went back (another process counts now), opens a new window.
//
// Thread safety: none; a value owned by the leader's loop.
#pragma once

#include <cstdint>
#include <optional>

#include "daemon/core/time.h"
#include "daemon/rendezvous/history.h"

namespace elastic::node {

class ThroughputWindow {
 public:
  // A progress report of `round` with `samples` trained on so far, received at `now`.
  void observe(TimePoint now, std::uint64_t round, std::int64_t samples);
  // The rate of a full window of `round` (at least `window` long), once; nullopt while it is not
  // full, or for another round.
  std::optional<double> take(std::uint64_t round, Duration window);
  // For the metrics: the last full window's rate of `round`, before the first one the rate from
  // the opening report to the newest (nullopt until two reports 100 ms apart).
  std::optional<double> rate(std::uint64_t round) const;
  // The round of the open window (0: none).
  std::uint64_t round() const { return round_; }

 private:
  std::uint64_t round_ = 0;
  TimePoint start_at_{};
  std::int64_t start_samples_ = 0;
  TimePoint last_at_{};
  std::int64_t last_samples_ = 0;
  std::optional<double> last_full_;
};

// SeriesSampler: one point of a job's training series (rendezvous/history.h SeriesPoint) per
// interval from rank 0's progress reports: the samples/s over the interval (a ThroughputWindow
// taken at each point, so a round change or a count that went back starts over) and the newest
// loss reported in it. take() gives nothing for an interval without a report.
class SeriesSampler {
 public:
  void observe(TimePoint now, std::uint64_t round, std::optional<std::int64_t> samples,
               std::optional<double> loss);
  // The point for the interval that ends at `now` (stamped `wall`), once at least `interval`
  // after the previous one; nullopt when not due or nothing was reported since.
  std::optional<rendezvous::SeriesPoint> take(TimePoint now, rendezvous::WallTime wall,
                                             Duration interval);

 private:
  ThroughputWindow window_;
  std::optional<double> loss_;
  bool reported_ = false;  // anything since the last point
  std::optional<TimePoint> last_point_;
};

}  // namespace elastic::node
