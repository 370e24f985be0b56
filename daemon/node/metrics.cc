#include "daemon/node/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace elastic::node {

namespace {

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "elasticd: metrics: %s\n", what.c_str());
  std::abort();
}

const char* type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

bool name_char(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (c == ':') return colon;
  return !first && c >= '0' && c <= '9';
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {
  if (!std::is_sorted(bounds.begin(), bounds.end())) broken("histogram bounds are not ascending");
}

void Histogram::observe(double value) {
  const auto at = std::lower_bound(bounds.begin(), bounds.end(), value);
  ++counts[static_cast<std::size_t>(at - bounds.begin())];
  sum += value;
  ++count;
}

bool is_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0, true)) return false;
  }
  return true;
}

bool is_label_name(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0, false)) return false;
  }
  return true;
}

std::string format_metric_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Counters and counts are whole numbers: print them as such (to_chars would write 1e+06).
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (value == std::trunc(value) && std::fabs(value) < kExact) {
    return std::to_string(static_cast<std::int64_t>(value));
  }
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

void MetricsText::family(std::string_view name, MetricType type, std::string_view help) {
  if (!is_metric_name(name)) broken("\"" + std::string(name) + "\" is not a metric name");
  // A histogram owns its _bucket/_sum/_count series names too; they must not be families.
  if (!declared_.insert(std::string(name)).second) {
    broken("the metric family " + std::string(name) + " is declared twice");
  }
  current_ = name;
  type_ = type;
  text_ += "# HELP ";
  text_ += name;
  text_ += ' ';
  text_ += escape_help(help);
  text_ += "\n# TYPE ";
  text_ += name;
  text_ += ' ';
  text_ += type_name(type);
  text_ += '\n';
}

void MetricsText::sample_line(std::string_view suffix, const Labels& labels, const char* extra_name,
                              std::string_view extra_value, std::string_view value) {
  text_ += current_;
  text_ += suffix;
  if (!labels.empty() || extra_name != nullptr) {
    text_ += '{';
    bool first = true;
    for (const auto& [label, label_value] : labels) {
      if (!is_label_name(label) || label == "le") {
        broken("\"" + label + "\" is not a label name for " + current_);
      }
      if (!first) text_ += ',';
      first = false;
      text_ += label;
      text_ += "=\"";
      text_ += escape_label_value(label_value);
      text_ += '"';
    }
    if (extra_name != nullptr) {
      if (!first) text_ += ',';
      text_ += extra_name;
      text_ += "=\"";
      text_ += extra_value;
      text_ += '"';
    }
    text_ += '}';
  }
  text_ += ' ';
  text_ += value;
  text_ += '\n';
}

void MetricsText::sample(double value, const Labels& labels) {
  if (current_.empty()) broken("a sample before any metric family");
  if (type_ == MetricType::kHistogram) broken(current_ + " is a histogram; use histogram()");
  sample_line("", labels, nullptr, "", format_metric_value(value));
}

void MetricsText::histogram(std::span<const double> bounds, std::span<const std::uint64_t> counts,
                            double sum, const Labels& labels) {
  if (current_.empty()) broken("a histogram before any metric family");
  if (type_ != MetricType::kHistogram) broken(current_ + " is not a histogram family");
  if (counts.size() != bounds.size() + 1) {
    broken(current_ + ": a histogram needs one count per bound plus one above them");
  }
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    sample_line("_bucket", labels, "le", format_metric_value(bounds[i]),
                std::to_string(cumulative));
  }
  cumulative += counts.back();
  sample_line("_bucket", labels, "le", "+Inf", std::to_string(cumulative));
  sample_line("_sum", labels, nullptr, "", format_metric_value(sum));
  sample_line("_count", labels, nullptr, "", std::to_string(cumulative));
}

}  // namespace elastic::node
