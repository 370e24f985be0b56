// Prometheus text exposition (format 0.0.4) for the metrics endpoint, and a small histogram.
//
// MetricsText renders one scrape: each family is declared once with family() (its # HELP and
// # TYPE lines), then its samples follow at once, so a family's lines are always contiguous as
// the format requires. Sample lines are `name{label="value",...} value`; label values escape
// backslash, double quote and newline (\\, \", \n), HELP text escapes backslash and newline.
// Values print as integers when they are whole numbers of magnitude below 2^53 and otherwise
// in the shortest form that reads back the same double; NaN and infinities as NaN, +Inf, -Inf.
// Histograms take per-bucket (not cumulative) counts and print the cumulative `_bucket{le=...}`
// series ending in le="+Inf", then `_sum` and `_count`.
//
// Names come from the daemon's code, not from users: an invalid metric or label name, a family
// declared twice, a sample before any family, or a sample of the wrong kind for its family is a
// programming error and aborts (STYLE.md rule 6). Label values may hold anything (job names,
// node names) and are escaped.
//
// Thread safety: none; a MetricsText is a value built by one thread.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace elastic::node {

enum class MetricType { kCounter, kGauge, kHistogram };

// Label name -> value, rendered in the given order.
using Labels = std::vector<std::pair<std::string, std::string>>;

// Buckets with fixed upper bounds; counts are per bucket, the last one above every bound.
struct Histogram {
  std::vector<double> bounds;         // ascending upper bounds (le), +Inf implied
  std::vector<std::uint64_t> counts;  // bounds.size() + 1 entries, NOT cumulative
  double sum = 0;
  std::uint64_t count = 0;

  explicit Histogram(std::vector<double> upper_bounds);
  // Adds one observation to the first bucket whose bound is >= value (Prometheus' `le`).
  void observe(double value);
};

class MetricsText {
 public:
  // Starts a family: writes its # HELP and # TYPE lines. Its samples must follow.
  void family(std::string_view name, MetricType type, std::string_view help);
  // One sample of the current counter or gauge family.
  void sample(double value, const Labels& labels = {});
  // The series of the current histogram family: bounds ascending, counts per bucket (not
  // cumulative) with bounds.size() + 1 entries, the last one above every bound.
  void histogram(std::span<const double> bounds, std::span<const std::uint64_t> counts, double sum,
                 const Labels& labels = {});
  void histogram(const Histogram& h, const Labels& labels = {}) {
    histogram(h.bounds, h.counts, h.sum, labels);
  }

  const std::string& text() const { return text_; }
  std::string take() { return std::move(text_); }

 private:
  void sample_line(std::string_view suffix, const Labels& labels, const char* extra_name,
                   std::string_view extra_value, std::string_view value);

  std::string text_;
  std::string current_;
  MetricType type_ = MetricType::kGauge;
  std::set<std::string, std::less<>> declared_;
};

// The value as the exposition format writes it (see the header comment).
std::string format_metric_value(double value);
// `value` with backslash, double quote and newline escaped for a label value.
std::string escape_label_value(std::string_view value);
// [a-zA-Z_:][a-zA-Z0-9_:]* ; label names additionally may not contain ':' or start with "__".
bool is_metric_name(std::string_view name);
bool is_label_name(std::string_view name);

}  // namespace elastic::node
