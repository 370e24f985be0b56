// parse_duration / format_duration: table-driven accept and reject cases, exact error
// messages, and the round trip parse(format(d)) == d.
#include "daemon/core/duration.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>

namespace elastic {
namespace {

using std::chrono::nanoseconds;
using namespace std::chrono_literals;

constexpr const char* kHint =
    " (use e.g. \"500ms\", \"30s\", \"1m30s\"; units: ns, us, ms, s, m, h)";

struct Accepted {
  const char* text;
  nanoseconds expected;
};

// gtest prints parameters into ctest's test names: the input, not raw bytes.
void PrintTo(const Accepted& c, std::ostream* out) { *out << '"' << c.text << '"'; }

class ParseAccepts : public ::testing::TestWithParam<Accepted> {};

TEST_P(ParseAccepts, Value) {
  const auto& [text, expected] = GetParam();
  auto parsed = parse_duration(text);
  ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.error().message;
  EXPECT_EQ(parsed->count(), expected.count()) << text;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseAccepts,
    ::testing::Values(
        Accepted{"0s", 0ns}, Accepted{"0ns", 0ns}, Accepted{"0h", 0ns}, Accepted{"1ns", 1ns},
        Accepted{"999ns", 999ns}, Accepted{"1us", 1us}, Accepted{"1.5us", 1500ns},
        Accepted{"500ms", 500ms}, Accepted{"0.5ms", 500us}, Accepted{"1.25ms", 1250us},
        Accepted{"30s", 30s}, Accepted{"1.5s", 1500ms}, Accepted{"0.001s", 1ms},
        Accepted{"0.000000001s", 1ns}, Accepted{"1.000000000s", 1s}, Accepted{"2m", 2min},
        Accepted{"1m30s", 90s}, Accepted{"1.5m", 90s}, Accepted{"24h", 24h},
        Accepted{"1h30m", 90min}, Accepted{"1h1m1s1ms1us1ns", 1h + 1min + 1s + 1ms + 1us + 1ns},
        Accepted{"1h0.5s", 1h + 500ms}, Accepted{"0.5h", 30min}, Accepted{"90s", 90s},
        Accepted{"007s", 7s}, Accepted{"1.10s", 1100ms},
        Accepted{"0.0000000000000000000000000000000000000000s", 0ns},
        // The largest value, as format_duration prints it, and a bare nanosecond count of it.
        Accepted{"2562047h47m16.854775807s", nanoseconds::max()},
        Accepted{"9223372036854775807ns", nanoseconds::max()}));

struct Rejected {
  const char* text;
  const char* detail;  // the part of the message between "is not a duration: " and the hint
};

void PrintTo(const Rejected& c, std::ostream* out) { *out << '"' << c.text << '"'; }

class ParseRejects : public ::testing::TestWithParam<Rejected> {};

TEST_P(ParseRejects, ExactMessage) {
  const auto& [text, detail] = GetParam();
  auto parsed = parse_duration(text);
  ASSERT_FALSE(parsed.ok()) << text << " parsed as " << parsed->count() << "ns";
  EXPECT_EQ(parsed.error().message,
            std::string("\"") + text + "\" is not a duration: " + detail + kHint);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseRejects,
    ::testing::Values(
        Rejected{"", "it is empty"}, Rejected{"30", "missing unit after 30"},
        Rejected{"1.5", "missing unit after 1.5"}, Rejected{"1m30", "missing unit after 30"},
        Rejected{"5x", "unknown unit \"x\""}, Rejected{"5sec", "unknown unit \"sec\""},
        Rejected{"5S", "unknown unit \"S\""}, Rejected{"1d", "unknown unit \"d\""},
        Rejected{"1µs", "unknown unit \"µs\""},
        Rejected{"-1s", "negative durations are not allowed"},
        Rejected{"-0s", "negative durations are not allowed"},
        Rejected{"+1s", "unexpected \"+\" at position 1 (expected a number)"},
        Rejected{"s", "unexpected \"s\" at position 1 (expected a number)"},
        Rejected{" 1s", "unexpected \" \" at position 1 (expected a number)"},
        Rejected{"1s ", "unexpected \" \" at position 3 (expected a number)"},
        Rejected{"1 s", "unexpected \" \" at position 2 (expected a unit)"},
        Rejected{"30s!", "unexpected \"!\" at position 4 (expected a number)"},
        Rejected{"1s-1ms", "unexpected \"-\" at position 3 (expected a number)"},
        Rejected{"1,5s", "unexpected \",\" at position 2 (expected a unit)"},
        Rejected{".5s", "a number needs a digit before '.'"},
        Rejected{"1.s", "a number needs a digit after '.'"},
        Rejected{"1..5s", "a number needs a digit after '.'"},
        Rejected{"30s1m",
                 "\"m\" cannot follow \"s\": write units from largest to smallest, each at most "
                 "once"},
        Rejected{"1s1s",
                 "\"s\" cannot follow \"s\": write units from largest to smallest, each at most "
                 "once"},
        Rejected{"1.5ns", "1.5ns is not a whole number of nanoseconds"},
        Rejected{"0.0000000001s", "0.0000000001s is not a whole number of nanoseconds"},
        Rejected{"0.0000000000000000001h",
                 "0.0000000000000000001h is not a whole number of nanoseconds"},
        Rejected{"9223372036854775808ns",
                 "it is too large (the maximum is 2562047h47m16.854775807s)"},
        Rejected{"2562048h", "it is too large (the maximum is 2562047h47m16.854775807s)"},
        Rejected{"2562047h47m16.854775808s",
                 "it is too large (the maximum is 2562047h47m16.854775807s)"},
        Rejected{"99999999999999999999999999999999999999999999h",
                 "it is too large (the maximum is 2562047h47m16.854775807s)"}));

TEST(ParseDuration, QuotesControlCharactersSoTheMessageStaysOneLine) {
  auto parsed = parse_duration("1s\n2s");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().message.find('\n'), std::string::npos);
  EXPECT_EQ(parsed.error().message,
            std::string("\"1s\\x0a2s\" is not a duration: unexpected \"\\x0a\" at position 3 "
                        "(expected a number)") +
                kHint);
}

TEST(ParseDuration, EmbeddedNulIsRejected) {
  auto parsed = parse_duration(std::string_view("1s\0", 3));
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.error().message.find("\\x00"), std::string::npos);
}

struct Formatted {
  nanoseconds value;
  const char* expected;
};

void PrintTo(const Formatted& c, std::ostream* out) { *out << c.expected; }

class Format : public ::testing::TestWithParam<Formatted> {};

TEST_P(Format, CanonicalText) {
  const auto& [value, expected] = GetParam();
  EXPECT_EQ(format_duration(value), expected);
  auto back = parse_duration(expected);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->count(), value.count());
}

INSTANTIATE_TEST_SUITE_P(
    Table, Format,
    ::testing::Values(Formatted{0ns, "0s"}, Formatted{1ns, "1ns"}, Formatted{999ns, "999ns"},
                      Formatted{1us, "1us"}, Formatted{1500ns, "1.5us"},
                      Formatted{1001ns, "1.001us"}, Formatted{500ms, "500ms"},
                      Formatted{1500us, "1.5ms"}, Formatted{999999999ns, "999.999999ms"},
                      Formatted{1s, "1s"}, Formatted{30s, "30s"}, Formatted{1500ms, "1.5s"},
                      Formatted{1s + 1ns, "1.000000001s"}, Formatted{60s, "1m"},
                      Formatted{90s, "1m30s"}, Formatted{1h, "1h"}, Formatted{24h, "24h"},
                      Formatted{1h + 1s, "1h1s"}, Formatted{1h + 1min + 500ms, "1h1m0.5s"},
                      Formatted{nanoseconds::max(), "2562047h47m16.854775807s"}));

TEST(FormatDuration, NegativeValuesAreVisibleButDoNotParse) {
  EXPECT_EQ(format_duration(-1500ms), "-1.5s");
  EXPECT_EQ(format_duration(nanoseconds::min()), "-9223372036854775808ns");
  EXPECT_FALSE(parse_duration(format_duration(-1s)).ok());
}

TEST(FormatDuration, RoundTripsRandomValues) {
  std::mt19937_64 rng(20240601);
  std::uniform_int_distribution<std::int64_t> any(0, std::numeric_limits<std::int64_t>::max());
  std::uniform_int_distribution<int> digits(0, 18);
  for (int i = 0; i < 20000; ++i) {
    // Mix magnitudes so that every unit and fraction length shows up.
    std::int64_t value = any(rng);
    std::int64_t divisor = 1;
    for (int d = digits(rng); d > 0; --d) divisor *= 10;
    value /= divisor;
    const auto text = format_duration(nanoseconds(value));
    auto back = parse_duration(text);
    ASSERT_TRUE(back.ok()) << value << " -> " << text << ": " << back.error().message;
    ASSERT_EQ(back->count(), value) << text;
  }
}

TEST(FormatDuration, ParsedTextFormatsBackToItselfWhenCanonical) {
  for (const char* text : {"500ms", "30s", "1m30s", "24h", "1.5s", "250us", "7ns"}) {
    auto parsed = parse_duration(text);
    ASSERT_TRUE(parsed.ok()) << text;
    EXPECT_EQ(format_duration(*parsed), text);
  }
}

}  // namespace
}  // namespace elastic
