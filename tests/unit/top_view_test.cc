// `elasticctl top`'s frame and keys (ctl/top_view.h) and the live views' --interval
// (ctl/refresh.h), without a terminal or a daemon: replies shaped as the daemon sends them
// become the exact tables; every key sorts, reverses, refreshes or quits as the footer says;
// an unknown key sets one message; a small terminal cuts rows and columns, never the keys line.
#include "ctl/top_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ctl/refresh.h"

namespace elastic::ctl {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr std::int64_t kNow = 1'800'000'000'000;

json member_row(const std::string& name, const std::string& state, int slots, double heard) {
  return {{"name", name},
          {"state", state},
          {"slots", slots},
          {"drained", name == "n3"},
          {"last_heard_ms_ago", heard},
          {"address", "tcp://10.0.0." + name.substr(1) + ":7000"}};
}

json job_row(const std::string& id, const std::string& state, int round, json ranks,
             std::int64_t since_ms_ago) {
  int world = 0;
  for (const json& r : ranks) world += r["slots"].get<int>();
  return {{"id", id},
          {"state", state},
          {"round", round},
          {"restarts", round > 1 ? round - 1 : 0},
          {"world_size", world},
          {"ranks", ranks},
          {"state_since_ms", kNow - since_ms_ago},
          {"reason", state == "pending" ? "waiting for 2 nodes" : "running"},
          {"spec", {{"user", "alice"}}}};
}

json rank(const std::string& node, int slots) { return {{"node", node}, {"slots", slots}}; }

// Three nodes seen from n2, n1 leading; three jobs, one finished (it holds no slots).
TopSample cluster_sample() {
  TopSample sample;
  sample.at_ms = kNow;
  sample.status = {{"self", {{"name", "n2"}, {"cluster_id", "lab"}}},
                   {"members", {{"alive", 2}, {"suspect", 1}, {"dead", 0}, {"left", 0}}},
                   {"consensus",
                    {{"leader", "n1"},
                     {"term", 4},
                     {"role", "follower"},
                     {"voter", true},
                     {"voters", {"n1", "n2", "n3"}}}}};
  sample.nodes = {{"self", {{"name", "n2"}}},
                  {"members",
                   {member_row("n3", "suspect", 2, 2500), member_row("n1", "alive", 4, 120),
                    member_row("n2", "alive", 4, -1)}}};
  sample.jobs = {{"jobs",
                  {job_row("train-10", "running", 3, {rank("n1", 4), rank("n2", 2)}, 65'000),
                   job_row("train-9", "pending", 0, json::array(), 4'000),
                   job_row("old-1", "succeeded", 1, {rank("n2", 4)}, 7'200'000)}}};
  return sample;
}

// The lines from the first that starts with `title` to the next blank one.
std::vector<std::string> section(const std::vector<std::string>& frame, const std::string& title) {
  std::vector<std::string> lines;
  bool in = false;
  for (const std::string& line : frame) {
    if (line.rfind(title, 0) == 0) in = true;
    if (in && line.empty()) break;
    if (in) lines.push_back(line);
  }
  return lines;
}

TEST(TopView, FrameShowsTheClusterNodesAndJobs) {
  const TopView view;
  const std::vector<std::string> frame = view.render(cluster_sample(), 2s, 0, 0);
  ASSERT_GE(frame.size(), 2u);
  EXPECT_THAT(frame[0], HasSubstr("cluster lab  via n2"));
  EXPECT_THAT(frame[0], HasSubstr("every 2s"));
  EXPECT_EQ(frame[1],
            "leader n1 (term 4)  members 2 alive, 1 suspect, 0 dead, 0 left  jobs 1 pending, 1 "
            "running, 1 succeeded  slots 6/10 used");
  EXPECT_THAT(
      section(frame, "NODES"),
      ElementsAre(
          "NODES (3)  sorted by NAME, ascending",
          "NAME       STATE    RAFT      SLOTS  USED  JOBS      DRAINED  LAST-HEARD  ADDRESS",
          "n1         alive    leader    4      4     train-10  no       120ms       "
          "tcp://10.0.0.1:7000",
          "n2 (self)  alive    follower  4      2     train-10  no       -           "
          "tcp://10.0.0.2:7000",
          "n3         suspect  voter     2      0     -         yes      2s          "
          "tcp://10.0.0.3:7000"));
  // Natural order: train-9 before train-10.
  EXPECT_THAT(section(frame, "JOBS"),
              ElementsAre("JOBS (3)  sorted by JOB, ascending",
                          "JOB       STATE      ROUND  NODES  WORLD  RESTARTS  AGE   USER   "
                          "REASON",
                          "old-1     succeeded  1      1      4      0         2h0m  alice  "
                          "running",
                          "train-9   pending    0      0      0      0         4s    alice  "
                          "waiting for 2 nodes",
                          "train-10  running    3      2      6      2         1m5s  alice  "
                          "running"));
  EXPECT_EQ(frame.back(), std::string("keys: ") + kTopKeysHelp);
}

TEST(TopView, KeysSortEachTableByItsNextColumnAndReverseIt) {
  TopView view;
  EXPECT_EQ(view.press("n"), TopView::Action::kNone);  // STATE
  EXPECT_EQ(view.press("n"), TopView::Action::kNone);  // RAFT
  EXPECT_EQ(view.press("n"), TopView::Action::kNone);  // SLOTS (by value; ties by name)
  EXPECT_EQ(view.press("N"), TopView::Action::kNone);
  std::vector<std::string> nodes = section(view.render(cluster_sample(), 2s, 0, 0), "NODES");
  ASSERT_EQ(nodes.size(), 5u);
  EXPECT_EQ(nodes[0], "NODES (3)  sorted by SLOTS, descending");
  EXPECT_THAT(nodes[2], ::testing::StartsWith("n2 (self)"));
  EXPECT_THAT(nodes[3], ::testing::StartsWith("n1 "));
  EXPECT_THAT(nodes[4], ::testing::StartsWith("n3 "));

  for (int i = 0; i < 5; ++i) view.press("j");  // JOB STATE ROUND NODES WORLD -> RESTARTS
  view.press("j");                              // AGE
  std::vector<std::string> jobs = section(view.render(cluster_sample(), 2s, 0, 0), "JOBS");
  ASSERT_EQ(jobs.size(), 5u);
  EXPECT_EQ(jobs[0], "JOBS (3)  sorted by AGE, ascending");
  EXPECT_THAT(jobs[2], ::testing::StartsWith("train-9 "));
  EXPECT_THAT(jobs[4], ::testing::StartsWith("old-1 "));
  // The columns wrap around: three more steps reach JOB again.
  for (int i = 0; i < 3; ++i) view.press("j");
  jobs = section(view.render(cluster_sample(), 2s, 0, 0), "JOBS");
  EXPECT_EQ(jobs[0], "JOBS (3)  sorted by JOB, ascending");
}

TEST(TopView, QuitRefreshAndUnknownKeys) {
  TopView view;
  EXPECT_EQ(view.press("q"), TopView::Action::kQuit);
  EXPECT_EQ(view.press("r"), TopView::Action::kRefresh);
  EXPECT_EQ(view.press(" "), TopView::Action::kRefresh);
  EXPECT_EQ(view.press("\x0c"), TopView::Action::kRefresh);
  EXPECT_EQ(view.message(), "");

  const std::vector<std::string> before = view.render(cluster_sample(), 2s, 0, 0);
  EXPECT_EQ(view.press("x"), TopView::Action::kNone);
  EXPECT_EQ(view.message(), std::string("unknown key x (keys: ") + kTopKeysHelp + ")");
  std::vector<std::string> after = view.render(cluster_sample(), 2s, 0, 0);
  EXPECT_EQ(after[after.size() - 2], view.message());
  after[after.size() - 2] = "";
  EXPECT_EQ(after, before);  // nothing else changed

  EXPECT_EQ(view.press("\x1b[A"), TopView::Action::kNone);
  EXPECT_THAT(view.message(), ::testing::StartsWith("unknown key ESC[A "));
  EXPECT_EQ(view.press("\x01"), TopView::Action::kNone);
  EXPECT_THAT(view.message(), ::testing::StartsWith("unknown key ^A "));
  EXPECT_EQ(view.press("\xe9"), TopView::Action::kNone);
  EXPECT_THAT(view.message(), ::testing::StartsWith("unknown key \\xe9 "));
  // The next understood key clears it.
  view.press("n");
  EXPECT_EQ(view.message(), "");
}

TEST(TopView, SmallTerminalCutsRowsAndColumnsButKeepsTheKeys) {
  TopSample sample = cluster_sample();
  for (int i = 0; i < 40; ++i) {
    sample.nodes["members"].push_back(member_row("n" + std::to_string(10 + i), "alive", 1, 5));
  }
  const TopView view;
  const std::vector<std::string> frame = view.render(sample, 2s, 60, 20);
  ASSERT_EQ(frame.size(), 20u);
  for (const std::string& line : frame) EXPECT_LE(line.size(), 60u) << line;
  EXPECT_EQ(frame.back(), (std::string("keys: ") + kTopKeysHelp).substr(0, 60));
  const std::vector<std::string> nodes = section(frame, "NODES");
  const std::vector<std::string> jobs = section(frame, "JOBS");
  EXPECT_THAT(nodes.back(), HasSubstr(" more (a taller terminal shows them)"));
  EXPECT_EQ(jobs.size(), 2u + 3u);  // every job fits: the nodes gave up their rows
  // Rows shown plus the ones counted as left out are all 43 nodes.
  const std::size_t shown = nodes.size() - 3;
  EXPECT_THAT(nodes.back(), HasSubstr("... " + std::to_string(43 - shown) + " more"));
}

TEST(TopView, FailedRequestsAreShownAndTheRestStays) {
  TopSample sample = cluster_sample();
  sample.jobs = nullptr;
  sample.jobs_error = "no leader is known yet; try again";
  const std::vector<std::string> frame = TopView().render(sample, 500ms, 0, 0);
  EXPECT_THAT(frame, ::testing::Contains("jobs: no leader is known yet; try again"));
  EXPECT_THAT(frame, ::testing::Contains("JOBS (0)  sorted by JOB, ascending"));
  EXPECT_THAT(section(frame, "NODES").size(), 5u);
  EXPECT_THAT(frame[0], HasSubstr("every 500ms"));

  // Replies of the wrong shape are "-", never a crash.
  TopSample hostile;
  hostile.status = {{"self", 7}, {"consensus", {{"voters", "n1"}}}};
  hostile.nodes = {{"members", {1, "x", json::object(), {{"name", 5}, {"slots", "many"}}}}};
  hostile.jobs = {{"jobs", {{{"ranks", {{{"node", 1}, {"slots", -3}}}}}, nullptr}}};
  EXPECT_NO_THROW(TopView().render(hostile, 2s, 80, 24));
}

TEST(TopView, SplitKeysKeepsEscapeSequencesWhole) {
  EXPECT_THAT(split_keys("qn\x1b[A\x1bOPj\x1b"),
              ElementsAre("q", "n", "\x1b[A", "\x1bOP", "j", "\x1b"));
  EXPECT_THAT(split_keys("\x1b[1;5C"), ElementsAre("\x1b[1;5C"));
  EXPECT_THAT(split_keys("\x1b["), ElementsAre("\x1b["));  // cut short: one key
  EXPECT_TRUE(split_keys("").empty());
}

TEST(TopView, NaturalOrder) {
  EXPECT_TRUE(natural_less("job-9", "job-10"));
  EXPECT_FALSE(natural_less("job-10", "job-9"));
  EXPECT_TRUE(natural_less("a", "b"));
  EXPECT_TRUE(natural_less("n1", "n1a"));
  EXPECT_TRUE(natural_less("x007", "x7") != natural_less("x7", "x007"));  // strict either way
  EXPECT_FALSE(natural_less("same", "same"));
}

TEST(RefreshInterval, SecondsOrDurations) {
  EXPECT_EQ(*parse_interval("2"), 2000ms);
  EXPECT_EQ(*parse_interval("0.5"), 500ms);
  EXPECT_EQ(*parse_interval("500ms"), 500ms);
  EXPECT_EQ(*parse_interval("1m"), 60000ms);
  EXPECT_EQ(*parse_interval("0.1"), kMinRefresh);
}

TEST(RefreshInterval, BadValuesAreOneSentenceEach) {
  const auto error = [](const char* text) {
    auto parsed = parse_interval(text);
    return parsed.ok() ? std::string("accepted") : parsed.error().message;
  };
  EXPECT_EQ(error("0"), "\"0\" is too short an interval: at least 100ms");
  EXPECT_EQ(error("0.05"), "\"0.05\" is too short an interval: at least 100ms");
  EXPECT_EQ(error("2h"), "\"2h\" is too long an interval: at most 1h");
  for (const char* bad : {"abc", "", "-1", "1.", ".5", "2 s", "1.2.3", "5x"}) {
    EXPECT_EQ(error(bad), "\"" + std::string(bad) +
                              "\" is not an interval: give seconds (2, 0.5) or a duration "
                              "(500ms, 1m)");
  }
}

}  // namespace
}  // namespace elastic::ctl
