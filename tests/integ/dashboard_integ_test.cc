// Integration tier: the web dashboard (dashboard.listen) of real elasticd processes on
// 127.0.0.1. A daemon with the dashboard on port 0 answers every page and /api path (the /api
// reads go through the same verbs as elasticctl, as nobody: a job's env stays hidden), unknown
// paths get 404 and other methods 405; hostile HTTP does not stop it; a token-protected daemon
// refuses a missing or wrong token with 401 and serves the right one; a port in use fails the
// start with exit 69 naming dashboard.listen, and a wildcard listen without a token is a config
// error (78). Nothing sleeps a fixed time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"
#include "tests/support/sockets.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The dashboard address from the daemon's readiness line ("" when it has none).
std::string dashboard_address(Daemon& daemon) {
  return ready_line_address(daemon.process().err(), "dashboard");
}

nlohmann::json json_of(const HttpReply& r) {
  return nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
}

TEST(DashboardInteg, ServesEveryPageAndApiPathAndNothingElse) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  const std::string address = dashboard_address(n1);
  ASSERT_THAT(address, StartsWith("127.0.0.1:")) << n1.process().err();
  const int port = port_of(address);
  EXPECT_EQ(ctl_json(n1, {"status", "--json"}).value("dashboard", ""), address);

  for (const std::string page : {"/", "/jobs", "/job?id=x", "/incidents", "/log?job=x&rank=0"}) {
    const HttpReply r = http_get(port, page);
    EXPECT_EQ(r.code, 200) << page;
    EXPECT_THAT(r.head, HasSubstr("Content-Type: text/html")) << page;
    EXPECT_THAT(r.body, HasSubstr("/dashboard.js")) << page;
  }
  EXPECT_THAT(http_get(port, "/dashboard.css").head, HasSubstr("Content-Type: text/css"));
  EXPECT_THAT(http_get(port, "/dashboard.js").head, HasSubstr("Content-Type: text/javascript"));

  // The /api reads: each a control verb's JSON reply. jobs, events, drained and voters come
  // from the Raft leader (this daemon, once elected).
  for (const std::string path : {"/api/status", "/api/nodes", "/api/jobs", "/api/events",
                                 "/api/events?limit=5", "/api/drained", "/api/voters"}) {
    HttpReply r;
    ASSERT_TRUE(wait_until(
        [&] {
          r = http_get(port, path);
          return r.code == 200 && json_of(r).value("ok", false);
        },
        kConverge))
        << path << ": " << r.code << " " << r.body;
    EXPECT_THAT(r.head, HasSubstr("Content-Type: application/json")) << path;
  }
  EXPECT_EQ(json_of(http_get(port, "/api/status"))["self"].value("name", ""), "n1");
  const HttpReply unknown_job = http_get(port, "/api/job?id=nope-1");
  EXPECT_EQ(unknown_job.code, 200);
  EXPECT_FALSE(json_of(unknown_job).value("ok", true));
  EXPECT_THAT(json_of(unknown_job).value("error", ""), HasSubstr("nope-1"));
  EXPECT_EQ(http_get(port, "/api/job").code, 400);
  EXPECT_EQ(http_get(port, "/api/events?limit=zero").code, 400);

  // Nothing outside the listed paths: no write verb, no file, no other page.
  for (const std::string path :
       {"/nope", "/api/submit", "/api/cancel?job=x", "/api/drain", "/api/reload",
        "/api/", "/metrics", "/../../etc/passwd", "/favicon.ico", "/jobs/"}) {
    EXPECT_EQ(http_get(port, path).code, 404) << path;
  }
  // Log tails are operators' only: without a token, none (and the answer says how).
  EXPECT_EQ(http_get(port, "/api/logs").code, 400);
  EXPECT_EQ(http_get(port, "/api/logs?job=x&rank=minus").code, 400);
  const HttpReply logs = http_get(port, "/api/logs?job=x&rank=0");
  EXPECT_EQ(logs.code, 403);
  EXPECT_THAT(logs.body, HasSubstr("dashboard.token_file"));
  for (const std::string method : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    const HttpReply r = http_get(port, "/api/jobs", method);
    EXPECT_EQ(r.code, 405) << method;
    EXPECT_THAT(r.head, HasSubstr("Allow: GET, HEAD"));
  }
  const HttpReply head = http_get(port, "/", "HEAD");
  EXPECT_EQ(head.code, 200);
  EXPECT_TRUE(head.body.empty());

  // Hostile clients: garbage, an oversized head; the daemon goes on serving.
  EXPECT_THAT(http_exchange(port, "\x16\x03\x01 garbage\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(http_exchange(port, "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 431"));
  // Clients that hang up while their /api answer is awaited from the leader, and 40 that
  // connect and say nothing (more than the server's 32): the daemon goes on serving.
  for (int i = 0; i < 20; ++i) {
    const int fd = connect_loopback(port);
    ASSERT_GE(fd, 0);
    const std::string request = "GET /api/jobs HTTP/1.1\r\n\r\n";
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    ::close(fd);
  }
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(connect_loopback(port));
  EXPECT_EQ(http_get(port, "/api/jobs").code, 200);
  for (const int fd : idle) {
    if (fd >= 0) ::close(fd);
  }
  EXPECT_EQ(http_get(port, "/").code, 200);
  EXPECT_TRUE(n1.process().running());
}

TEST(DashboardInteg, JobsAreShownWithoutTheirEnvironment) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  const int port = port_of(dashboard_address(n1));
  const RunResult submitted = elasticctl_on(
      n1, {"submit", "--name", "envjob", "--env", "API_TOKEN=hunter2", "--", "sleep", "600"});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(submitted.out, match, std::regex("submitted (\\S+)")))
      << submitted.out;
  const std::string id = match[1];

  HttpReply r;
  ASSERT_TRUE(wait_until(
      [&] {
        r = http_get(port, "/api/job?id=" + id);
        return json_of(r).value("ok", false);
      },
      kConverge))
      << id << ": " << r.body;
  const nlohmann::json job = json_of(r)["job"];
  EXPECT_EQ(job.value("id", ""), id);
  EXPECT_TRUE(job["spec"].value("env_hidden", false)) << r.body;
  EXPECT_THAT(r.body, Not(HasSubstr("hunter2")));
  const HttpReply jobs = http_get(port, "/api/jobs");
  EXPECT_THAT(jobs.body, HasSubstr(id));
  EXPECT_THAT(jobs.body, Not(HasSubstr("hunter2")));
  // The owner (root, through elasticctl) still sees it: the dashboard is the one held back.
  EXPECT_THAT(elasticctl_on(n1, {"status", id, "--json"}).out, HasSubstr("hunter2"));
}

TEST(DashboardInteg, TokenIsRequiredWhenConfigured) {
  TempDir dir;
  const std::string token_file = dir.file("dashboard.token");
  std::ofstream(token_file) << "  s3cret-Token-1  \n";
  Daemon n1(dir, "n1", {});
  n1.set("dashboard.token_file=" + token_file);
  n1.start();
  const int port = port_of(dashboard_address(n1));
  for (const std::string path : {"/", "/api/status", "/nope"}) {
    const HttpReply missing = http_get(port, path);
    EXPECT_EQ(missing.code, 401) << path;
    EXPECT_THAT(missing.head, HasSubstr("WWW-Authenticate: Bearer"));
    EXPECT_EQ(http_get(port, path, "GET", "Authorization: Bearer s3cret-Token-2\r\n").code, 401);
    EXPECT_EQ(http_get(port, path, "GET", "Authorization: Bearer s3cret-Token-\r\n").code, 401);
    EXPECT_EQ(http_get(port, path, "GET", "Authorization: Basic s3cret-Token-1\r\n").code, 401);
  }
  const std::string right = "Authorization: Bearer s3cret-Token-1\r\n";
  EXPECT_EQ(http_get(port, "/", "GET", right).code, 200);
  EXPECT_EQ(http_get(port, "/api/status", "GET", right).code, 200);
  EXPECT_EQ(http_get(port, "/nope", "GET", right).code, 404);

  // The token's holder reads a rank's log tail, whoever owns the job.
  const RunResult submitted = elasticctl_on(
      n1, {"submit", "--name", "talk", "--export", "NONE", "--workdir", "/", "--", "/bin/sh",
           "-c", "echo hello-from-rank-$RANK; exec sleep 600"});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(submitted.out, match, std::regex("submitted (\\S+)")))
      << submitted.out;
  const std::string id = match[1];
  HttpReply tail;
  EXPECT_TRUE(wait_until(
      [&] {
        tail = http_get(port, "/api/logs?job=" + id + "&rank=0", "GET", right);
        return tail.code == 200 && json_of(tail).value("data", "").find("hello-from-rank-0") !=
                                       std::string::npos;
      },
      kConverge))
      << tail.code << " " << tail.body;
  EXPECT_EQ(http_get(port, "/api/logs?job=" + id + "&rank=0").code, 401) << "not without it";
  EXPECT_TRUE(elasticctl_on(n1, {"cancel", id}).status.exited_with(0));
}

TEST(DashboardInteg, PortInUseFailsTheStart) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  RunResult r;
  {
    const HeldLoopbackPort held;
    ASSERT_NE(held.port(), 0);
    n1.set("dashboard.listen=127.0.0.1:" + std::to_string(held.port()));
    r = run(n1.args(), {}, std::chrono::seconds(10));
  }
  EXPECT_TRUE(r.status.exited_with(69)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("dashboard.listen"));
  EXPECT_THAT(r.err, HasSubstr("Address already in use"));
  // Nothing half-started: the control socket is gone, and a start on a free port works.
  EXPECT_FALSE(std::filesystem::exists(n1.socket()));
  n1.set("dashboard.listen=127.0.0.1:0");
  n1.start();
  EXPECT_THAT(dashboard_address(n1), StartsWith("127.0.0.1:"));
}

TEST(DashboardInteg, BadConfigurationIsRefused) {
  TempDir dir;
  Daemon wide(dir, "n1", {});
  wide.set("dashboard.listen=0.0.0.0:0");
  RunResult r = run(wide.args(), {}, std::chrono::seconds(10));
  EXPECT_TRUE(r.status.exited_with(78)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("dashboard.token_file"));

  Daemon missing(dir, "n2", {});
  missing.set("dashboard.token_file=" + dir.file("no-such-token"));
  r = run(missing.args(), {}, std::chrono::seconds(10));
  EXPECT_TRUE(r.status.exited_with(78)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("dashboard.token_file"));

  Daemon off(dir, "n3", {});
  off.set_voters({"n3"});
  off.set("dashboard.listen=");
  off.start();
  EXPECT_EQ(dashboard_address(off), "");
}

}  // namespace
}  // namespace elastic::testing
