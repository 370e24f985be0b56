// Text helpers of the two TOML readers -- elasticd's configuration loader (config.cc) and
// elasticctl's job files (ctl/job_file.cc) -- so both describe wrong values, suggest a key for a
// misspelled one and report syntax errors in the same words.
//
// Pure functions on values; thread safe. <toml.hpp> is included here because these take toml11
// values: include this header only where toml11 is linked.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <toml.hpp>
#include <utility>
#include <vector>

namespace elastic::config {

// A value as an error message names it: "a string (\"x\")", "an integer (3)", "a table".
std::string describe(const toml::value& v);

// Optimal string alignment distance (a swap of neighbours counts as one edit: "bnid").
std::size_t edit_distance(std::string_view a, std::string_view b);

// How far a misspelling of `name` may be from it and still be suggested (short names: close).
std::size_t typo_budget(std::string_view name);

// toml11's multi-line syntax error picture as one line: the reason and the hint under the caret.
std::string syntax_reason(const std::string& what);

// A table's entries in file order (then by key), so errors come out in the order a reader meets
// them.
std::vector<std::pair<std::string, const toml::value*>> in_file_order(const toml::table& table);

// How deep a TOML text may nest before toml11 sees it: arrays and inline tables inside each
// other, and the parts of one dotted key (a.b.c = 1, [a.b.c]). A config or job file needs 2 or
// 3. toml11 parses nesting by recursion, so 10,000 nested arrays overflow the stack (SIGSEGV, no
// error to report) and a dotted key of 40,000 parts takes minutes; both readers call
// find_deep_nesting() first, so such a text is refused with a sentence instead.
inline constexpr std::size_t kMaxTomlNesting = 32;

// Where `text` first nests deeper than kMaxTomlNesting, and how, e.g. {3, "TOML nested too
// deeply: more than 32 levels of arrays and inline tables (the limit is 32)"} or {1, "TOML
// nested too deeply: a dotted key of more than 32 parts (the limit is 32)"}; nullopt when it
// does not. Brackets and dots inside strings and comments do not count. A linear scan without
// recursion; never throws. Callers report "<file>:<line>: <reason>".
struct NestingProblem {
  std::size_t line = 0;  // 1-based
  std::string reason;
};
std::optional<NestingProblem> find_deep_nesting(std::string_view text);

}  // namespace elastic::config
