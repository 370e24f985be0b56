// Test support: the metric names a PromQL expression selects, and the PromQL expressions of a
// Grafana dashboard, so tests can hold conf/grafana-dashboard.json to the names the metrics
// endpoint really exports.
//
// promql_metric_names() is a small lexer, not a PromQL parser: it drops string literals,
// label matchers ({...}), range and subquery brackets ([...]) and the label lists of by,
// without, on, ignoring, group_left and group_right, then keeps every identifier that is not
// a keyword, an aggregation operator or a function (a name followed by '('). That is every
// metric name of the expressions a dashboard uses; a name inside {__name__="..."} is not seen
// (the dashboard test refuses __name__ for that reason). Header-only; pure.
#pragma once

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace elastic::testing {

inline std::set<std::string> promql_metric_names(std::string_view expr) {
  static const std::set<std::string, std::less<>> kNotMetrics = {
      // Binary and set operators, modifiers, literals.
      "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
      "group_right", "inf", "nan", "Inf", "NaN",
      // Aggregation operators (they may be followed by `by (...)` before their parenthesis).
      "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
      "topk", "quantile", "limitk", "limit_ratio"};
  const auto is_start = [](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  };
  const auto is_part = [&](char c) {
    return is_start(c) || std::isdigit(static_cast<unsigned char>(c));
  };

  // Strings, {...} and [...] out (Grafana variables such as $__rate_interval live in them).
  std::string text;
  int braces = 0, brackets = 0;
  for (std::size_t i = 0; i < expr.size(); ++i) {
    const char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {
      for (++i; i < expr.size() && expr[i] != c; ++i) {
        if (expr[i] == '\\' && c != '`') ++i;
      }
      continue;
    }
    if (c == '{') ++braces;
    if (c == '[') ++brackets;
    const bool inside = braces > 0 || brackets > 0;
    if (c == '}' && braces > 0) --braces;
    if (c == ']' && brackets > 0) --brackets;
    text += inside ? ' ' : c;
  }

  std::set<std::string> names;
  std::string previous;
  for (std::size_t i = 0; i < text.size();) {
    if (!is_start(text[i]) ||
        (i > 0 && (is_part(text[i - 1]) || text[i - 1] == '$' || text[i - 1] == '.'))) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && is_part(text[end])) ++end;
    const std::string word = text.substr(i, end - i);
    std::size_t next = end;
    while (next < text.size() && std::isspace(static_cast<unsigned char>(text[next]))) ++next;
    const bool call = next < text.size() && text[next] == '(';
    const bool grouping = word == "by" || word == "without" || word == "on" || word == "ignoring" ||
                          word == "group_left" || word == "group_right";
    if (grouping && call) {
      // Its label list: skip to the closing parenthesis.
      end = text.find(')', next);
      end = end == std::string::npos ? text.size() : end + 1;
    } else if (!call && !kNotMetrics.contains(word)) {
      names.insert(word);
    }
    i = end;
  }
  return names;
}

// Every "expr" of every target of every panel (rows' nested panels included), in order.
inline std::vector<std::string> dashboard_exprs(const nlohmann::json& dashboard) {
  std::vector<std::string> exprs;
  std::vector<const nlohmann::json*> panels;
  const auto array_at = [](const nlohmann::json& j, const char* key) -> const nlohmann::json* {
    return j.is_object() && j.contains(key) && j[key].is_array() ? &j[key] : nullptr;
  };
  if (const nlohmann::json* top = array_at(dashboard, "panels")) {
    for (const auto& panel : *top) {
      panels.push_back(&panel);
      if (const nlohmann::json* nested = array_at(panel, "panels")) {
        for (const auto& inner : *nested) panels.push_back(&inner);
      }
    }
  }
  for (const nlohmann::json* panel : panels) {
    const nlohmann::json* targets = array_at(*panel, "targets");
    if (targets == nullptr) continue;
    for (const auto& target : *targets) {
      if (target.is_object() && target.contains("expr") && target["expr"].is_string()) {
        exprs.push_back(target["expr"]);
      }
    }
  }
  return exprs;
}

inline nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace elastic::testing
