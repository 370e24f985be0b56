#include "daemon/core/duration.h"

#include <cstdint>
#include <limits>

namespace elastic {
namespace {

using Int128 = __int128;

struct Unit {
  std::string_view name;
  std::int64_t nanoseconds;
};

// Largest first: the index is the rank that enforces "larger units first, each once".
constexpr Unit kUnits[] = {
    {"h", 3'600'000'000'000}, {"m", 60'000'000'000}, {"s", 1'000'000'000},
    {"ms", 1'000'000},        {"us", 1'000},         {"ns", 1},
};
constexpr int kNumUnits = sizeof(kUnits) / sizeof(kUnits[0]);

constexpr std::int64_t kMaxNanoseconds = std::numeric_limits<std::int64_t>::max();

bool is_digit(char c) { return c >= '0' && c <= '9'; }
// Non-ASCII bytes count as unit letters so that "1µs" reports the unknown unit "µs" instead of
// an unexpected byte.
bool is_unit_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || static_cast<unsigned char>(c) >= 0x80;
}

// Quotes user input for a one-line message: a newline or a control byte in a config value must
// not break the "one error per line" promise of the config loader.
std::string quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte == 0x7f) {
      constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

Error bad(std::string_view text, std::string_view detail) {
  return Error{quote(text) + " is not a duration: " + std::string(detail) +
               " (use e.g. \"500ms\", \"30s\", \"1m30s\"; units: ns, us, ms, s, m, h)"};
}

int find_unit(std::string_view name) {
  for (int i = 0; i < kNumUnits; ++i) {
    if (kUnits[i].name == name) return i;
  }
  return -1;
}

// "1.5" with scale 1000 for whole=1, frac=500: the digits of a fixed-point number, trailing
// fractional zeros removed.
std::string fixed_point(std::uint64_t value, std::uint64_t scale) {
  std::string out = std::to_string(value / scale);
  std::uint64_t frac = value % scale;
  if (frac == 0) return out;
  std::string digits;
  for (std::uint64_t s = scale; s > 1; s /= 10) {
    digits.insert(digits.begin(), static_cast<char>('0' + frac % 10));
    frac /= 10;
  }
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return out + "." + digits;
}

}  // namespace

Result<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  if (text.empty()) return bad(text, "it is empty");
  if (text.front() == '-') return bad(text, "negative durations are not allowed");

  Int128 total = 0;
  int previous_rank = -1;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t start = pos;
    if (!is_digit(text[pos])) {
      if (text[pos] == '.') return bad(text, "a number needs a digit before '.'");
      return bad(text, "unexpected " + quote(text.substr(pos, 1)) + " at position " +
                           std::to_string(pos + 1) + " (expected a number)");
    }
    // Integer part. Anything above int64 max overflows whatever the unit, so stop there.
    Int128 whole = 0;
    bool too_large = false;
    while (pos < text.size() && is_digit(text[pos])) {
      whole = whole * 10 + (text[pos] - '0');
      if (whole > kMaxNanoseconds) {
        too_large = true;
        whole = kMaxNanoseconds;
      }
      ++pos;
    }
    std::string_view fraction;
    if (pos < text.size() && text[pos] == '.') {
      ++pos;
      const std::size_t frac_start = pos;
      while (pos < text.size() && is_digit(text[pos])) ++pos;
      if (pos == frac_start) return bad(text, "a number needs a digit after '.'");
      fraction = text.substr(frac_start, pos - frac_start);
    }
    const std::string_view number = text.substr(start, pos - start);

    const std::size_t unit_start = pos;
    while (pos < text.size() && is_unit_char(text[pos])) ++pos;
    const std::string_view unit_name = text.substr(unit_start, pos - unit_start);
    if (unit_name.empty()) {
      if (pos == text.size()) return bad(text, "missing unit after " + std::string(number));
      return bad(text, "unexpected " + quote(text.substr(pos, 1)) + " at position " +
                           std::to_string(pos + 1) + " (expected a unit)");
    }
    const int rank = find_unit(unit_name);
    if (rank < 0) return bad(text, "unknown unit " + quote(unit_name));
    if (rank <= previous_rank) {
      return bad(text, quote(unit_name) + " cannot follow " + quote(kUnits[previous_rank].name) +
                           ": write units from largest to smallest, each at most once");
    }
    previous_rank = rank;
    if (too_large)
      return bad(text, "it is too large (the maximum is " +
                           format_duration(std::chrono::nanoseconds::max()) + ")");

    const std::int64_t unit_ns = kUnits[rank].nanoseconds;
    Int128 component = whole * unit_ns;
    // Fraction: exact integer arithmetic, no floating point. After dropping trailing zeros, a
    // fraction with more than 13 digits can never be a whole number of nanoseconds (1h is
    // 2^13 * 3^2 * 5^11 ns), so 18 digits is a safe bound that also keeps the product in range.
    while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);
    if (!fraction.empty()) {
      const std::string not_whole =
          std::string(number) + std::string(unit_name) + " is not a whole number of nanoseconds";
      if (fraction.size() > 18) return bad(text, not_whole);
      Int128 numerator = 0;
      Int128 denominator = 1;
      for (char c : fraction) {
        numerator = numerator * 10 + (c - '0');
        denominator *= 10;
      }
      numerator *= unit_ns;
      if (numerator % denominator != 0) return bad(text, not_whole);
      component += numerator / denominator;
    }
    total += component;
    if (total > kMaxNanoseconds) {
      return bad(text, "it is too large (the maximum is " +
                           format_duration(std::chrono::nanoseconds::max()) + ")");
    }
  }
  return std::chrono::nanoseconds(static_cast<std::int64_t>(total));
}

std::string format_duration(std::chrono::nanoseconds duration) {
  const std::int64_t count = duration.count();
  if (count < 0) {
    // Unsigned negation is well defined even for the minimum value.
    const std::uint64_t magnitude = 0 - static_cast<std::uint64_t>(count);
    if (magnitude > static_cast<std::uint64_t>(kMaxNanoseconds)) {
      return "-" + fixed_point(magnitude, 1) + "ns";
    }
    return "-" + format_duration(std::chrono::nanoseconds(static_cast<std::int64_t>(magnitude)));
  }
  const auto ns = static_cast<std::uint64_t>(count);
  if (ns == 0) return "0s";
  if (ns < 1'000) return std::to_string(ns) + "ns";
  if (ns < 1'000'000) return fixed_point(ns, 1'000) + "us";
  if (ns < 1'000'000'000) return fixed_point(ns, 1'000'000) + "ms";

  constexpr std::uint64_t kHour = 3'600'000'000'000;
  constexpr std::uint64_t kMinute = 60'000'000'000;
  std::string out;
  const std::uint64_t hours = ns / kHour;
  const std::uint64_t minutes = ns % kHour / kMinute;
  const std::uint64_t rest = ns % kMinute;
  if (hours != 0) out += std::to_string(hours) + "h";
  if (minutes != 0) out += std::to_string(minutes) + "m";
  if (rest != 0) out += fixed_point(rest, 1'000'000'000) + "s";
  return out;
}

}  // namespace elastic
