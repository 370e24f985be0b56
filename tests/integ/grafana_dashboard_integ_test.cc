// conf/grafana-dashboard.json uses only metric names a real elasticd exports: a single daemon
// (the Raft leader and a voter, so it declares every family, leader-only and voter-only ones
// included) with a submitted job is scraped over HTTP, the exported set is read from the
// scrape's "# TYPE" lines (a histogram also owns NAME_bucket, NAME_sum and NAME_count), and
// every name in every PromQL expression of the dashboard must be in it. The set comes from the
// daemon's own renderer (Node::render_metrics needs a running node), not from a list kept here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/promql_names.h"
#include "tests/support/sockets.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

const std::string kDashboard = std::string(ELASTIC_SOURCE_DIR) + "/conf/grafana-dashboard.json";

// The body of GET /metrics on 127.0.0.1:`port` ("" when it did not answer 200).
std::string scrape(int port) {
  const int fd = connect_loopback(port);
  if (fd < 0) return "";
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return "";
  }
  std::string response;
  char buffer[65536];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    response.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const std::size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 200", 0) != 0 || body == std::string::npos) return "";
  return response.substr(body + 4);
}

// Every series name the exposition text declares.
std::set<std::string> exported_names(const std::string& text) {
  std::set<std::string> names;
  std::istringstream lines(text);
  std::string line;
  static const std::regex type("# TYPE (\\S+) (counter|gauge|histogram|summary|untyped)");
  std::smatch match;
  while (std::getline(lines, line)) {
    if (!std::regex_match(line, match, type)) continue;
    names.insert(match[1]);
    if (match[2] == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        names.insert(match[1].str() + suffix);
    }
  }
  return names;
}

TEST(GrafanaDashboard, UsesOnlyMetricsTheEndpointExports) {
  const TempDir dir;
  Daemon daemon(dir, "n1", {});
  daemon.set("control.metrics_listen=127.0.0.1:0");
  daemon.start();
  ASSERT_TRUE(
      wait_until([&] { return elasticctl_on(daemon, {"jobs"}).status.exited_with(0); }, kConverge))
      << daemon.process().err();
  const std::string job_file = dir.write("graphed.toml",
                                         "name = \"graphed\"\n"
                                         "command = [\"/bin/sleep\", \"600\"]\n"
                                         "nodes = \"2\"\n"
                                         "workers_per_node = 1\n");
  const RunResult submitted = elasticctl_on(daemon, {"submit", job_file});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;

  std::smatch match;
  const std::string err = daemon.process().err();
  ASSERT_TRUE(
      std::regex_search(err, match, std::regex("elasticd ready: [^\n]* metrics=\\S+:(\\d+)")))
      << err;
  const int port = std::stoi(match[1]);
  std::set<std::string> exported;
  // The leader's families are there once it leads; the job's series once the table has it.
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string text = scrape(port);
        exported = exported_names(text);
        return exported.contains("elastic_rounds_opened_total") &&
               text.find("elastic_job_round{job=\"graphed-1\"}") != std::string::npos;
      },
      kConverge));
  EXPECT_TRUE(exported.contains("elastic_recovery_seconds_bucket"));
  EXPECT_FALSE(
      exported.contains("elastic_recovery_seconds"
                        "_nonexistent"));

  const nlohmann::json dashboard = read_json_file(kDashboard);
  ASSERT_TRUE(dashboard.is_object()) << kDashboard;
  const std::vector<std::string> exprs = dashboard_exprs(dashboard);
  ASSERT_FALSE(exprs.empty());
  std::set<std::string> used;
  for (const std::string& expr : exprs) {
    for (const std::string& name : promql_metric_names(expr)) {
      used.insert(name);
      EXPECT_TRUE(exported.contains(name))
          << name << " (in " << expr << ") is not a metric the endpoint exports";
    }
  }
  EXPECT_GE(used.size(), 25u);  // the dashboard covers the endpoint, not a corner of it
}

}  // namespace
}  // namespace elastic::testing
