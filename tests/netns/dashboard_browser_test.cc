// Browser tier: the web dashboard in a real headless Chromium (Debian's `chromium`) against
// three elasticd daemons, one per network namespace, all Raft voters, with the default
// dashboard.listen (127.0.0.1:8474 inside each host's namespace) and a real elastic-trainer job
// (Gloo, Fashion-MNIST subset) on all three. One daemon that is neither the Raft leader nor the
// one whose dashboard is read is killed with SIGKILL; once the leader's incident has its
// rendezvous, Chromium (run inside the observing host's namespace, so it reaches that host's
// loopback) loads each page (cluster, jobs, the job, incidents): every page must finish its
// first refresh (body data-loaded) with no script or fetch error (body data-errors="0", which
// dashboard.js counts, and no console message in Chromium's log), the cluster page must name every
// node and the leader, and the job page must show the incident as a timeline bar with its
// cause and lost node, and its loss curve (the trainers' progress reports give the job a
// "series" point every 10 s; the test waits for one first). A screenshot of each page goes to
// DASHBOARD_SCREENSHOT_DIR (the build's tests/netns/dashboard-screenshots/) for people to look
// at. DashboardCurves also draws a job page from the compiled-in page and script with canned
// /api replies (fetch replaced in the page, no daemon) and checks both charts and their
// round-change and incident markers.
// Skips, saying why, without root or without /usr/bin/chromium (`make deps` installs it). Every
// wait polls with a deadline; Chromium's own virtual time budget lets the pages' fetches finish
// before the DOM is dumped.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/dashboard/dashboard.h"
#include "tests/netns/daemon_cluster.h"
#include "tests/netns/daemon_cluster_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::netns {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

constexpr const char* kChromium = "/usr/bin/chromium";
constexpr milliseconds kTrains = 90s;
constexpr milliseconds kRecovers = 90s;

class DashboardBrowserTest : public DaemonClusterTest {
 protected:
  DashboardBrowserTest() : DaemonClusterTest({.hosts = 3, .log_tail = 4000}) {}

  std::string missing_prerequisite() override {
    if (::access(kChromium, X_OK) != 0) {
      return std::string(kChromium) +
             " is not installed (apt-get install chromium; `make deps` installs it): the "
             "browser test needs a real browser";
    }
    return "";
  }

  // Chromium headless inside `host`'s namespace on `url` with `mode` (--dump-dom, or
  // --screenshot=PATH); its stdout is the DOM for --dump-dom, its stderr its log.
  testing::RunResult chromium(int host, const std::string& url, const std::string& mode) {
    const std::string profile = work_.path() + "/chromium-profile";
    std::filesystem::create_directories(profile);
    return hosts_->exec(host,
                        {kChromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                         "--no-default-browser-check", "--disable-background-networking",
                         "--disable-component-update", "--disable-extensions", "--disable-sync",
                         "--user-data-dir=" + profile, "--window-size=1280,1000",
                         "--enable-logging=stderr", "--v=0",
                         // Virtual time runs the page's fetches (and a refresh or two) to the
                         // end before the DOM or the screenshot is taken.
                         "--virtual-time-budget=5000", mode, url},
                        60s);
  }
};

// The console messages in Chromium's log (--enable-logging=stderr), one line each, like
//   [..:INFO:CONSOLE:1] "Uncaught ReferenceError: ...", source: http://127.0.0.1:8474/... (1)
// Chromium logs every console message at INFO whatever its level, and dashboard.js writes none
// of its own, so any of them is a problem: an uncaught exception, a failed load, a CSP refusal.
std::vector<std::string> console_messages(const std::string& log) {
  std::vector<std::string> messages;
  std::size_t at = 0;
  while (at < log.size()) {
    const auto end = log.find('\n', at);
    const std::string line = log.substr(at, end == std::string::npos ? end : end - at);
    at = end == std::string::npos ? log.size() : end + 1;
    if (line.find(":CONSOLE") != std::string::npos) messages.push_back(line);
  }
  return messages;
}

// Chromium headless (outside any namespace) on `url` with `mode`, its profile under `dir`.
testing::RunResult chromium_here(const std::string& dir, const std::string& url,
                                 const std::string& mode) {
  return testing::run({kChromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                       "--disable-background-networking", "--disable-component-update",
                       "--user-data-dir=" + dir + "/profile", "--window-size=1280,1400",
                       "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000", mode, url},
                      {}, 60s);
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

TEST(DashboardCurves, JobPageDrawsTheSeriesWithRoundAndIncidentMarkers) {
  if (::access(kChromium, X_OK) != 0) {
    GTEST_SKIP() << kChromium << " is not installed (apt-get install chromium; make deps does)";
  }
  testing::TempDir dir;
  const std::int64_t t0 = 1'764'270'000'000;
  nlohmann::json rate = nlohmann::json::array(), loss = nlohmann::json::array();
  for (int i = 0; i < 60; ++i) {
    rate.push_back({t0 + i * 1000, i > 30 && i < 36 ? 600 : 950 + i % 5});
    loss.push_back({t0 + i * 1000, 2.3 / (1 + i * 0.1)});
  }
  const nlohmann::json job = {
      {"id", "j1"},
      {"state", "running"},
      {"round", 2},
      {"world_size", 2},
      {"restarts", 1},
      {"ranks", {{{"node", "h0"}, {"slots", 1}, {"first_rank", 0}}}},
      {"spec", {{"user", "alice"}, {"command", {"elastic-trainer"}}}},
      {"events",
       {{{"at_ms", t0}, {"round", 1}, {"from", "rendezvous"}, {"to", "running"}, {"reason", "a"}},
        {{"at_ms", t0 + 32'000},
         {"round", 2},
         {"from", "running"},
         {"to", "rendezvous"},
         {"reason", "b"}}}},
      {"series", {{"samples_per_s", rate}, {"loss", loss}}}};
  const nlohmann::json incident = {{"id", 1},
                                   {"job", "j1"},
                                   {"cause", "node_lost"},
                                   {"node", "h1"},
                                   {"from_round", 1},
                                   {"to_round", 2},
                                   {"at_ms", t0 + 31'500},
                                   {"detected_s", 0.4},
                                   {"rendezvous_s", 3.5},
                                   {"complete", false}};
  const nlohmann::json replies = {
      {"status", {{"ok", true}, {"self", {{"name", "h0"}}}}},
      {"job", {{"ok", true}, {"job", job}}},
      {"events", {{"ok", true}, {"incidents", {incident}}, {"cluster", nlohmann::json::array()}}}};
  // The page as the daemon serves it, with its script and style inline, the path it would be
  // opened at, and fetch answering from `replies`.
  const std::string script =
      replace_all(replace_all(std::string(dashboard::route("/dashboard.js", "").body),
                              "location.pathname", "'/job'"),
                  "location.search", "'?id=j1'");
  std::string page(dashboard::route("/job", "id=j1").body);
  page = replace_all(
      page, "<link rel=\"stylesheet\" href=\"/dashboard.css\">",
      "<style>" + std::string(dashboard::route("/dashboard.css", "").body) + "</style>");
  page = replace_all(
      page, "<script src=\"/dashboard.js\"></script>",
      "<script>const REPLIES = " + replies.dump() +
          ";\nwindow.fetch = async (url) => { const verb = url.split('/api/')[1].split('?')[0];\n"
          "  return {ok: true, status: 200, text: async () => JSON.stringify(REPLIES[verb])}; };"
          "</script>\n<script>" +
          script + "</script>");
  const std::string file = dir.write("job.html", page);

  const testing::RunResult dom = chromium_here(dir.path(), "file://" + file, "--dump-dom");
  ASSERT_TRUE(dom.status.exited_with(0)) << dom.err;
  EXPECT_NE(dom.out.find("data-loaded=\"true\""), std::string::npos) << dom.out;
  EXPECT_NE(dom.out.find("data-errors=\"0\""), std::string::npos) << dom.out;
  const auto console = console_messages(dom.err);
  EXPECT_TRUE(console.empty()) << console.front();
  // What was drawn (the inline script holds the same words).
  const auto main_at = dom.out.find("<main");
  const std::string drawn =
      main_at == std::string::npos
          ? ""
          : dom.out.substr(main_at, dom.out.find("</main>", main_at) - main_at);
  const auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (auto at = drawn.find(what); at != std::string::npos; at = drawn.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count("class=\"line-chart\""), 2u) << dom.out;
  // Per chart: the round change (to round 2) and the incident.
  EXPECT_EQ(count("class=\"marker\" data-kind=\"round\""), 2u) << drawn;
  EXPECT_EQ(count("class=\"marker\" data-kind=\"incident\""), 2u) << drawn;
  EXPECT_EQ(count("no training metrics reported"), 0u);
  EXPECT_EQ(count("data-cause=\"node_lost\""), 1u);

  const std::string shots = DASHBOARD_SCREENSHOT_DIR;
  std::filesystem::create_directories(shots);
  const testing::RunResult picture =
      chromium_here(dir.path(), "file://" + file, "--screenshot=" + shots + "/job-curves.png");
  EXPECT_TRUE(picture.status.exited_with(0)) << picture.err;
}

TEST_F(DashboardBrowserTest, PagesShowTheClusterTheJobAndItsIncident) {
  const std::string checkpoints = work_.path() + "/checkpoints";
  std::filesystem::create_directories(checkpoints);
  daemons_->set_overrides(
      {"rendezvous.last_call=1s", "spawner.stop_grace=3s", "checkpoint.root=" + checkpoints});
  ASSERT_NO_FATAL_FAILURE(start_converged());
  const std::string leader = daemons_->wait_leader(all_hosts(), kConverge);
  ASSERT_FALSE(leader.empty()) << daemons_->describe_raft(all_hosts());

  std::vector<std::string> args = {"--name", "dash", "--nodes", "2:3", "--"};
  for (auto& arg : small_fmnist_trainer(ELASTIC_TRAINER_PATH, 5, 1000)) args.push_back(arg);
  const Submitted submitted = daemons_->submit_job(0, args);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string job = submitted.id;
  JobView first;
  ASSERT_TRUE(daemons_->wait_job(
      0, job, [](const JobView& v) { return v.state == "running" && v.ranks.size() == 3; }, kTrains,
      &first))
      << first.summary();
  ASSERT_TRUE(testing::wait_until(
      [&] {
        for (const auto& line : daemons_->trainer_lines(job)) {
          if (line.event == "step" && line.round == static_cast<std::int64_t>(first.round)) {
            return true;
          }
        }
        return false;
      },
      kTrains))
      << "the trainers never logged a step";

  // The victim: neither the leader nor the observer; the observer reads through forwarding
  // (it is not the leader either) when it can.
  const int leader_host = daemons_->host_of(leader);
  int victim = -1, observer = -1;
  for (const int host : all_hosts()) {
    if (host == leader_host) continue;
    if (victim < 0) {
      victim = host;
    } else {
      observer = host;
    }
  }
  ASSERT_GE(victim, 0);
  ASSERT_GE(observer, 0);
  daemons_->daemon(victim).signal(SIGKILL);
  ASSERT_TRUE(daemons_->daemon(victim).wait(10s).has_value());

  nlohmann::json incident;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        const auto r = daemons_->ctl(leader_host, {"events", job, "--json"});
        const auto reply = nlohmann::json::parse(r.out, nullptr, false);
        if (reply.is_discarded() || !reply.contains("incidents") || reply["incidents"].empty()) {
          return false;
        }
        incident = reply["incidents"][0];
        return incident["rendezvous_s"].is_number();
      },
      kRecovers))
      << incident.dump();

  // A point of the job's training curves (the leader commits one every 10 s per job).
  std::string series;
  ASSERT_TRUE(testing::wait_until(
      [&] {
        const auto view = daemons_->job(leader_host, job);
        if (!view.ok()) return false;
        const auto reply = nlohmann::json::parse(view->json, nullptr, false);
        if (!reply.is_object() || !reply.contains("series")) return false;
        series = reply["series"].dump();
        return !reply["series"]["loss"].empty();
      },
      40s))
      << "no loss point in the job's series: " << series;

  const std::string base = "http://127.0.0.1:8474";
  const std::string shots = DASHBOARD_SCREENSHOT_DIR;
  std::filesystem::create_directories(shots);
  struct Page {
    std::string name, path;
  };
  const std::vector<Page> pages = {
      {"cluster", "/"}, {"jobs", "/jobs"}, {"job", "/job?id=" + job}, {"incidents", "/incidents"}};
  for (const Page& page : pages) {
    SCOPED_TRACE(page.name);
    const testing::RunResult dom = chromium(observer, base + page.path, "--dump-dom");
    ASSERT_TRUE(dom.status.exited_with(0)) << dom.err;
    EXPECT_NE(dom.out.find("data-loaded=\"true\""), std::string::npos)
        << "the page never finished a refresh:\n"
        << dom.out;
    EXPECT_NE(dom.out.find("data-errors=\"0\""), std::string::npos) << dom.out;
    const auto console = console_messages(dom.err);
    EXPECT_TRUE(console.empty()) << console.front() << "\n" << dom.err;
    if (page.name == "cluster") {
      for (const int host : all_hosts()) {
        EXPECT_NE(dom.out.find(DaemonCluster::name(host)), std::string::npos) << dom.out;
      }
      EXPECT_NE(dom.out.find("leader"), std::string::npos);
    }
    if (page.name == "jobs") {
      EXPECT_NE(dom.out.find(job), std::string::npos) << dom.out;
    }
    if (page.name == "job") {
      EXPECT_NE(dom.out.find("data-cause=\"node_lost\""), std::string::npos) << dom.out;
      EXPECT_NE(dom.out.find("data-node=\"" + DaemonCluster::name(victim) + "\""),
                std::string::npos)
          << dom.out;
      EXPECT_NE(dom.out.find("incident-bar"), std::string::npos) << dom.out;
      EXPECT_NE(dom.out.find("data-phase=\"rendezvous\""), std::string::npos) << dom.out;
      // The loss curve from the trainers' own reports.
      EXPECT_NE(dom.out.find("<div class=\"title\">loss</div>"), std::string::npos) << dom.out;
      EXPECT_NE(dom.out.find("line-chart"), std::string::npos) << dom.out;
      EXPECT_NE(dom.out.find(leader), std::string::npos) << "the rank map names the survivors";
    }
    if (page.name == "incidents") {
      EXPECT_NE(dom.out.find("data-job=\"" + job + "\""), std::string::npos) << dom.out;
    }
    const std::string shot = shots + "/" + page.name + ".png";
    std::filesystem::remove(shot);
    const testing::RunResult picture = chromium(observer, base + page.path, "--screenshot=" + shot);
    EXPECT_TRUE(picture.status.exited_with(0)) << picture.err;
    EXPECT_TRUE(std::filesystem::exists(shot) && std::filesystem::file_size(shot) > 1000)
        << "no screenshot at " << shot << ":\n"
        << picture.err;
  }
  std::cerr << "dashboard screenshots: " << shots << "\n";
}

}  // namespace
}  // namespace elastic::netns
