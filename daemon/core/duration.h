// Durations as people write them in config files and on the command line: "500ms", "30s",
// "1m30s", "1.5h".
//
// Grammar: one or more components, each a non-negative decimal number (digits, optionally
// followed by '.' and more digits) and a unit out of ns, us, ms, s, m, h. Units go from largest
// to smallest and appear at most once ("1h30m", never "30m1h"), so every written duration reads
// one way. No sign, no spaces, no bare numbers: a missing unit is the classic config mistake
// ("timeout = 30" meaning seconds or milliseconds?) and is rejected rather than guessed.
// Values must be whole nanoseconds and fit in std::chrono::nanoseconds (about 292 years).
//
// Pure functions; thread-safe. Errors are Error values whose message quotes the input and shows
// examples of valid durations.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "daemon/core/result.h"

namespace elastic {

// Parses a duration written as above, e.g. "500ms" -> 500'000'000ns.
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

// Formats a non-negative duration in the canonical form parse_duration reads back exactly:
// below one second the largest of ms/us/ns that keeps it short, with a decimal fraction if
// needed ("500ms", "1.5ms", "250ns"); from one second up h, m and s components with zero
// components left out and the sub-second part as a decimal fraction of s ("30s", "1m30s",
// "2h", "1.25s"). Zero is "0s". parse_duration(format_duration(d)) == d for every d >= 0.
// A negative duration (never produced by parse_duration) is formatted with a leading '-' so
// that a broken invariant is visible in logs; it does not parse back.
std::string format_duration(std::chrono::nanoseconds duration);

}  // namespace elastic
