// Text helpers of the two TOML readers -- elasticd's configuration loader (config.cc) and
// elasticctl's job files (ctl/job_file.cc) -- so both describe wrong values, suggest a key for a
// misspelled one and report syntax errors in the same words.
//
// Pure functions on values; thread safe. <toml.hpp> is included here because these take toml11
// values: include this header only where toml11 is linked.
#pragma once

#include <cstddef>
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

}  // namespace elastic::config
