#include "daemon/config/toml_text.h"

#include <algorithm>
#include <sstream>

#include "daemon/config/rules.h"

namespace elastic::config {

std::string describe(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::boolean:
      return std::string("a boolean (") + (v.as_boolean() ? "true" : "false") + ")";
    case toml::value_t::integer:
      return "an integer (" + std::to_string(v.as_integer()) + ")";
    case toml::value_t::floating: {
      std::ostringstream out;
      out << v.as_floating();
      return "a float (" + out.str() + ")";
    }
    case toml::value_t::string:
      return "a string (" + quote(v.as_string().str) + ")";
    case toml::value_t::array:
      return "an array";
    case toml::value_t::table:
      return "a table";
    case toml::value_t::offset_datetime:
    case toml::value_t::local_datetime:
    case toml::value_t::local_date:
    case toml::value_t::local_time:
      return "a date/time";
    default:
      return "an empty value";
  }
}

// Optimal string alignment distance: edits, with a swap of neighbours counting as one ("bnid").
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// How different a misspelling may be and still be suggested: short names must be close.
std::size_t typo_budget(std::string_view name) {
  if (name.size() <= 4) return 1;
  if (name.size() <= 9) return 2;
  return 3;
}

// toml11 formats a syntax error as a multi-line picture; keep the reason and the hint under the
// caret, on one line.
std::string syntax_reason(const std::string& what) {
  std::istringstream lines(what);
  std::string line;
  std::string reason;
  std::string hint;
  while (std::getline(lines, line)) {
    if (reason.empty()) {
      reason = line;
      if (reason.rfind("[error] ", 0) == 0) reason.erase(0, 8);
      if (reason.rfind("toml::", 0) == 0) {
        const auto colon = reason.find(": ");
        if (colon != std::string::npos) reason.erase(0, colon + 2);
      }
      continue;
    }
    // Marker lines look like "   |    ^--- hint" or "   |    ~~~ hint" (no line number).
    const auto bar = line.find_first_not_of(' ');
    if (bar == std::string::npos || line[bar] != '|') continue;
    const auto marker = line.find_first_not_of(' ', bar + 1);
    if (marker == std::string::npos || (line[marker] != '^' && line[marker] != '~')) continue;
    const auto text = line.find_first_not_of("^~- ", marker);
    if (text != std::string::npos) hint = line.substr(text);
  }
  if (!hint.empty() && hint != "here") reason += " (" + hint + ")";
  return reason;
}

// Entries of a TOML table in file order, so errors come out in the order a reader meets them.
std::vector<std::pair<std::string, const toml::value*>> in_file_order(const toml::table& table) {
  std::vector<std::pair<std::string, const toml::value*>> entries;
  for (const auto& [key, value] : table) entries.emplace_back(key, &value);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto line_a = a.second->location().line();
    const auto line_b = b.second->location().line();
    return line_a != line_b ? line_a < line_b : a.first < b.first;
  });
  return entries;
}

// One pass over the text with TOML's lexical rules for what does not count: comments and the
// four kinds of strings. A string that toml11 would reject (a newline in a one-line string)
// ends at the newline here too, so the scan stays in step with the parser it protects.
std::optional<NestingProblem> find_deep_nesting(std::string_view text) {
  const std::string limit = " (the limit is " + std::to_string(kMaxTomlNesting) + ")";
  std::size_t line = 1;
  std::size_t depth = 0;  // open arrays and inline tables
  std::size_t dots = 0;   // dots since the last character that cannot be inside a dotted key
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (c == '#') {
      while (i < n && text[i] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      // A quoted part of a dotted key (a."b".c) leaves the count of dots as it is.
      const std::string_view triple = c == '"' ? "\"\"\"" : "'''";
      const bool multi_line = text.substr(i, 3) == triple;
      const bool escapes = c == '"';
      i += multi_line ? 3 : 1;
      while (i < n) {
        const char s = text[i];
        if (escapes && s == '\\') {
          if (i + 1 < n && text[i + 1] == '\n') ++line;
          i += 2;
        } else if (s == '\n') {
          if (!multi_line) break;
          ++line;
          ++i;
        } else if (s == c && !multi_line) {
          ++i;
          break;
        } else if (s == c && text.substr(i, 3) == triple) {
          i += 3;
          // """a"""" is a string ending in a quote: up to two more quotes belong to it.
          for (int extra = 0; extra < 2 && i < n && text[i] == c; ++extra) ++i;
          break;
        } else {
          ++i;
        }
      }
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxTomlNesting) {
        return NestingProblem{line, "TOML nested too deeply: more than " +
                                        std::to_string(kMaxTomlNesting) +
                                        " levels of arrays and inline tables" + limit};
      }
      dots = 0;
      ++i;
    } else if (c == '.') {
      if (++dots >= kMaxTomlNesting) {
        return NestingProblem{line, "TOML nested too deeply: a dotted key of more than " +
                                        std::to_string(kMaxTomlNesting) + " parts" + limit};
      }
      ++i;
    } else {
      // Bare-key characters and blanks may sit between the parts of a dotted key; anything
      // else (=, a comma, a closing bracket) ends it. Floats and times have at most one dot.
      const bool in_key = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                          (c >= '0' && c <= '9') || c == '_' || c == '-' || c == ' ' || c == '\t';
      if (!in_key) dots = 0;
      if ((c == ']' || c == '}') && depth > 0) --depth;
      ++i;
    }
  }
  return std::nullopt;
}

}  // namespace elastic::config
