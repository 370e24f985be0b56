// Deeply nested TOML: toml11 parses nesting by recursion, so 10,000 nested
// arrays crashed elasticd --check-config, elasticctl submit --dry-run and a daemon's SIGHUP
// reload with SIGSEGV. Both TOML readers now scan the text first (config/toml_text.h:
// find_deep_nesting) and refuse it with one line naming the file, the line and the limit:
//   - the scan itself: what counts (arrays, inline tables, dotted keys) and what does not
//     (brackets and dots inside strings of every kind, comments, floats);
//   - the config loader (file and --set) and the job file reader refuse deep texts at once,
//     the same texts that crashed them before, and accept the deepest allowed one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "ctl/job_file.h"
#include "daemon/config/config.h"
#include "daemon/config/toml_text.h"
#include "tests/support/temp_dir.h"

namespace elastic::config {
namespace {

using ::testing::HasSubstr;

std::string arrays(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string inline_tables(std::size_t depth) {
  std::string text;
  for (std::size_t i = 0; i < depth; ++i) text += "{ a = ";
  text += "1";
  for (std::size_t i = 0; i < depth; ++i) text += " }";
  return text;
}

// A dotted key of `parts` parts: a.a.a...
std::string dotted(std::size_t parts) {
  std::string key = "a";
  for (std::size_t i = 1; i < parts; ++i) key += ".a";
  return key;
}

const std::string kTooManyLevels =
    "TOML nested too deeply: more than 32 levels of arrays and inline tables (the limit is 32)";
const std::string kTooManyParts =
    "TOML nested too deeply: a dotted key of more than 32 parts (the limit is 32)";

// ---- the scan -------------------------------------------------------------------------------

TEST(FindDeepNesting, AllowsTheLimitAndRefusesOneMore) {
  EXPECT_FALSE(find_deep_nesting("x = " + arrays(kMaxTomlNesting) + "\n"));
  EXPECT_FALSE(find_deep_nesting("x = " + inline_tables(kMaxTomlNesting) + "\n"));
  EXPECT_FALSE(find_deep_nesting(dotted(kMaxTomlNesting) + " = 1\n"));
  EXPECT_FALSE(find_deep_nesting("[" + dotted(kMaxTomlNesting) + "]\n"));

  auto deep = find_deep_nesting("x = " + arrays(kMaxTomlNesting + 1) + "\n");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->line, 1u);
  EXPECT_EQ(deep->reason, kTooManyLevels);
  deep = find_deep_nesting("x = " + inline_tables(kMaxTomlNesting + 1) + "\n");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->reason, kTooManyLevels);
  deep = find_deep_nesting(dotted(kMaxTomlNesting + 1) + " = 1\n");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->reason, kTooManyParts);
  deep = find_deep_nesting("[" + dotted(kMaxTomlNesting + 1) + "]\n");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->reason, kTooManyParts);
}

TEST(FindDeepNesting, MixedArraysAndTablesCountTogetherAndNameTheLine) {
  std::string value;
  for (int i = 0; i < 20; ++i) value += "[{ b = ";
  const auto deep = find_deep_nesting("# a comment\n[section]\nok = [1, 2]\nx = " + value);
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->line, 4u);
  EXPECT_EQ(deep->reason, kTooManyLevels);
  // Closed brackets give their level back: many shallow arrays in a row are fine.
  std::string flat = "x = [";
  for (int i = 0; i < 1000; ++i) flat += "[[1]], ";
  EXPECT_FALSE(find_deep_nesting(flat + "]\n"));
  // Across lines: the line where the limit is passed.
  std::string tall = "x = ";
  for (std::size_t i = 0; i <= kMaxTomlNesting; ++i) tall += "[\n";
  const auto across = find_deep_nesting(tall);
  ASSERT_TRUE(across);
  EXPECT_EQ(across->line, kMaxTomlNesting + 1);
}

TEST(FindDeepNesting, StringsAndCommentsDoNotCount) {
  const std::string many = std::string(100, '[') + std::string(100, '{') + std::string(100, '.');
  EXPECT_FALSE(find_deep_nesting("x = \"" + many + "\"\n"));
  EXPECT_FALSE(find_deep_nesting("x = '" + many + "'\n"));
  EXPECT_FALSE(find_deep_nesting("x = \"\"\"\n" + many + "\n\"\"\"\n"));
  EXPECT_FALSE(find_deep_nesting("x = '''\n" + many + "\n'''\n"));
  EXPECT_FALSE(find_deep_nesting("# " + many + "\nx = 1\n"));
  EXPECT_FALSE(find_deep_nesting("x = 1 # " + many + "\n"));
  // Escaped quotes do not end a basic string; a literal string has no escapes.
  EXPECT_FALSE(find_deep_nesting("x = \"\\\"" + many + "\"\n"));
  EXPECT_TRUE(find_deep_nesting("x = '\\'" + many + "'\n"));
  // """a"""" is the string a" (a quote may precede the closing three): what follows on the
  // same line is code again, not the start of another string.
  EXPECT_TRUE(find_deep_nesting("x = [\"\"\"a\"\"\"\", " + arrays(kMaxTomlNesting) + "]\n"));
  EXPECT_TRUE(find_deep_nesting("x = ['''a'''', " + arrays(kMaxTomlNesting) + "]\n"));
  // A one-line string ends at the line's end (toml11 refuses it there): the next line counts.
  const auto next = find_deep_nesting("x = \"open\ny = " + arrays(kMaxTomlNesting + 1));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->line, 2u);
  // Multi-line strings count their lines.
  const auto after = find_deep_nesting("x = '''\n\n\n'''\ny = " + arrays(kMaxTomlNesting + 1));
  ASSERT_TRUE(after);
  EXPECT_EQ(after->line, 5u);
}

TEST(FindDeepNesting, QuotedKeyPartsStillCountAndValuesDoNot) {
  std::string key = "a";
  for (std::size_t i = 0; i < kMaxTomlNesting; ++i) key += i % 2 ? ".b" : ". \"q.q\"";
  EXPECT_TRUE(find_deep_nesting(key + " = 1\n"));
  // Floats, times and lists of them have at most one dot between separators.
  std::string floats = "x = [";
  for (int i = 0; i < 200; ++i) floats += "1.5, ";
  EXPECT_FALSE(find_deep_nesting(floats + "2.5]\nt = 07:32:00.999\nd = 1979-05-27T07:32:00.5Z\n"));
}

TEST(FindDeepNesting, TenThousandLevelsAreRefusedQuickly) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(find_deep_nesting("x = " + arrays(10'000) + "\n"));
  EXPECT_TRUE(find_deep_nesting(dotted(100'000) + " = 1\n"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// ---- the readers ----------------------------------------------------------------------------

TEST(DeepConfig, AFileIsRefusedWithFileLineAndLimit) {
  testing::TempDir dir;
  for (const std::string& value : {arrays(10'000), inline_tables(10'000)}) {
    const std::string path =
        dir.write("deep.toml", "[node]\nname = \"n1\"\ngpus = " + value + "\n");
    const auto loaded =
        load_config(LoadOptions{.file = path, .file_must_exist = true, .overrides = {}});
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.error().message, path + ":3: " + kTooManyLevels);
  }
  const std::string path = dir.write("dotted.toml", "[node]\n" + dotted(100'000) + " = 1\n");
  const auto loaded =
      load_config(LoadOptions{.file = path, .file_must_exist = true, .overrides = {}});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().message, path + ":2: " + kTooManyParts);
}

TEST(DeepConfig, ASetValueIsRefusedWithoutEchoingIt) {
  const auto loaded = load_config(LoadOptions{
      .file = "", .file_must_exist = false, .overrides = {"node.gpus=" + arrays(10'000)}});
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().message, "--set node.gpus=...: node.gpus: " + kTooManyLevels);
}

TEST(DeepConfig, ReadableValuesOfADeepFileAreTheDefaults) {
  testing::TempDir dir;
  const std::string path = dir.write("deep.toml", "[control]\nx = " + arrays(10'000) + "\n");
  EXPECT_TRUE(readable_values(LoadOptions{
                  .file = path, .file_must_exist = true, .overrides = {}}) == DaemonConfig{});
}

TEST(DeepJobFile, IsRefusedWithFileLineAndLimit) {
  const auto file =
      ctl::parse_job_toml("name = \"a\"\ncommand = " + arrays(10'000) + "\n", "job.toml");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().message, "job.toml:2: " + kTooManyLevels);
  testing::TempDir dir;
  const std::string path = dir.write("job.toml", "env = " + inline_tables(10'000) + "\n");
  ctl::JobFileError kind = ctl::JobFileError::kUnreadable;
  const auto read = ctl::read_job_file(path, &kind);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(kind, ctl::JobFileError::kInvalid);
  EXPECT_EQ(read.error().message, path + ":1: " + kTooManyLevels);
}

}  // namespace
}  // namespace elastic::config
