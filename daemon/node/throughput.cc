#include "daemon/node/throughput.h"

#include <chrono>

namespace elastic::node {
namespace {

// Below this a rate is mostly the reports' own jitter.
constexpr Duration kMinSpan = std::chrono::milliseconds(100);

double per_second(std::int64_t samples, Duration span) {
  return static_cast<double>(samples) / std::chrono::duration<double>(span).count();
}

}  // namespace

void ThroughputWindow::observe(TimePoint now, std::uint64_t round, std::int64_t samples) {
  if (round < round_) return;  // a late report of an older round
  if (round != round_ || samples < last_samples_ || now < last_at_) {
    last_full_.reset();
    round_ = round;
    start_at_ = last_at_ = now;
    start_samples_ = last_samples_ = samples;
    return;
  }
  last_at_ = now;
  last_samples_ = samples;
}

std::optional<double> ThroughputWindow::take(std::uint64_t round, Duration window) {
  if (round != round_ || round_ == 0) return std::nullopt;
  const Duration span = last_at_ - start_at_;
  if (span < window || span < kMinSpan) return std::nullopt;
  const double rate = per_second(last_samples_ - start_samples_, span);
  start_at_ = last_at_;
  start_samples_ = last_samples_;
  last_full_ = rate;
  return rate;
}

std::optional<double> ThroughputWindow::rate(std::uint64_t round) const {
  if (round != round_ || round_ == 0) return std::nullopt;
  if (last_full_) return last_full_;
  const Duration span = last_at_ - start_at_;
  if (span < kMinSpan) return std::nullopt;
  return per_second(last_samples_ - start_samples_, span);
}

void SeriesSampler::observe(TimePoint now, std::uint64_t round,
                            std::optional<std::int64_t> samples, std::optional<double> loss) {
  reported_ = true;
  if (loss) loss_ = loss;
  if (samples) window_.observe(now, round, *samples);
}

std::optional<rendezvous::SeriesPoint> SeriesSampler::take(TimePoint now,
                                                           rendezvous::WallTime wall,
                                                           Duration interval) {
  if (last_point_ && now - *last_point_ < interval) return std::nullopt;
  if (!reported_) return std::nullopt;
  rendezvous::SeriesPoint point;
  point.at = wall;
  point.loss = loss_;
  // The window since the previous point (at least kMinSpan of reports), restarted at the newest.
  point.samples_per_s = window_.take(window_.round(), Duration::zero());
  reported_ = false;
  loss_.reset();
  last_point_ = now;
  if (!point.samples_per_s && !point.loss) return std::nullopt;
  return point;
}

}  // namespace elastic::node
