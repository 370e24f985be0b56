// The validation rules of DaemonConfig: single-field ranges and formats, and cross-field
// constraints. Internal to daemon/config: the loader attaches sources to the violations and
// validate() (config.h) prints them bare.
//
// Every rule is evaluated on every call, so all violations are reported at once. Pure
// functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config.h"

namespace elastic::config {

struct Violation {
  // Full keys the rule reads; keys[0] is the key the message names. The loader blames the one
  // the user set with the highest precedence, and skips the rule if any of them was unreadable.
  std::vector<std::string_view> keys;  // string literals
  std::string reason;
};

std::vector<Violation> check_rules(const DaemonConfig& config);

// `text` as a TOML basic string ("a\"b"). Control characters are escaped, so a value quoted in
// an error message keeps the message on one line; the loader's TOML writer uses it too.
std::string quote(std::string_view text);

}  // namespace elastic::config
