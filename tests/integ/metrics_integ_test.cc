// Integration tier: the Prometheus endpoint (control.metrics_listen) of real elasticd processes
// on 127.0.0.1. Every scrape is parsed as exposition text 0.0.4 (each line a comment or
// `name{labels} value`, each family with one HELP and one TYPE before its samples); the values
// follow a 2-daemon cluster and a submitted job; hostile HTTP clients (garbage, a 1 MiB request
// line, 100 idle connections, a slowloris) do not stop the daemon from serving scrapes and
// elasticctl; the endpoint is off unless configured, binds a wildcard only when told to, and a
// port in use fails the start with exit 69. Nothing sleeps a fixed time.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
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

std::vector<std::string> ctl_args(const Daemon& daemon, std::vector<std::string> args) {
  std::vector<std::string> argv = {"-c", "", "--set", "control.socket=" + daemon.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// The metrics address from the daemon's readiness line ("" when it has none).
std::string metrics_address(Daemon& daemon) {
  return ready_line_address(daemon.process().err(), "metrics");
}

// A parsed scrape: series ("name{k="v",...}" with labels as sent) -> value.
struct Scrape {
  std::map<std::string, double> series;
  std::map<std::string, std::string> types;  // family -> type
  std::vector<std::string> errors;

  // The value of `name` with exactly these labels (in the order the daemon writes them).
  std::optional<double> value(const std::string& name, const std::string& labels = "") const {
    const auto it = series.find(labels.empty() ? name : name + "{" + labels + "}");
    if (it == series.end()) return std::nullopt;
    return it->second;
  }
};

// Parses a label set `{...}` starting at text[i] == '{'; returns the index after '}' or npos.
std::size_t parse_labels(const std::string& text, std::size_t i) {
  ++i;
  while (i < text.size() && text[i] != '}') {
    const std::size_t name_start = i;
    while (i < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_')) {
      ++i;
    }
    if (i == name_start || i + 1 >= text.size() || text[i] != '=' || text[i + 1] != '"') {
      return std::string::npos;
    }
    i += 2;
    while (i < text.size() && text[i] != '"') {
      if (text[i] == '\\') {
        if (i + 1 >= text.size() ||
            (text[i + 1] != '\\' && text[i + 1] != '"' && text[i + 1] != 'n')) {
          return std::string::npos;
        }
        ++i;
      } else if (text[i] == '\n') {
        return std::string::npos;
      }
      ++i;
    }
    if (i >= text.size()) return std::string::npos;
    ++i;  // closing quote
    if (i < text.size() && text[i] == ',') ++i;
  }
  return i < text.size() ? i + 1 : std::string::npos;
}

Scrape parse(const std::string& text) {
  Scrape s;
  std::map<std::string, int> helps;
  std::set<std::string> families_with_samples;
  std::string current;
  if (text.empty() || text.back() != '\n') s.errors.push_back("the text does not end in a newline");
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end == std::string::npos ? text.size() : end + 1;
    static const std::regex help("# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*");
    static const std::regex type("# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)");
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      if (++helps[m[1]] > 1) s.errors.push_back("two HELP lines for " + m[1].str());
      current = m[1];
      continue;
    }
    if (std::regex_match(line, m, type)) {
      if (m[1] != current) s.errors.push_back("TYPE without its HELP first: " + line);
      if (!s.types.emplace(m[1], m[2]).second) s.errors.push_back("two TYPE lines: " + line);
      continue;
    }
    if (line.rfind("#", 0) == 0) {
      s.errors.push_back("unexpected comment: " + line);
      continue;
    }
    std::size_t i = 0;
    while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) ||
                               line[i] == '_' || line[i] == ':')) {
      ++i;
    }
    const std::string name = line.substr(0, i);
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
      s.errors.push_back("not a sample: " + line);
      continue;
    }
    if (i < line.size() && line[i] == '{') i = parse_labels(line, i);
    if (i == std::string::npos || i >= line.size() || line[i] != ' ') {
      s.errors.push_back("bad labels or no value: " + line);
      continue;
    }
    const std::string value = line.substr(i + 1);
    double number = 0;
    if (value == "+Inf" || value == "-Inf" || value == "NaN") {
      number = value == "NaN" ? std::nan("") : (value[0] == '+' ? 1e308 * 10 : -1e308 * 10);
    } else {
      std::size_t used = 0;
      try {
        number = std::stod(value, &used);
      } catch (...) {
        used = 0;
      }
      if (used != value.size() || value.empty()) {
        s.errors.push_back("bad value: " + line);
        continue;
      }
    }
    // The family a sample belongs to: its name, or a histogram's base name.
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sfx = suffix;
      if (family.size() > sfx.size() && family.ends_with(sfx) &&
          s.types.contains(family.substr(0, family.size() - sfx.size())) &&
          s.types[family.substr(0, family.size() - sfx.size())] == "histogram") {
        family = family.substr(0, family.size() - sfx.size());
      }
    }
    if (family != current || !s.types.contains(family)) {
      s.errors.push_back("sample outside its family's block: " + line);
    }
    families_with_samples.insert(family);
    s.series[line.substr(0, i)] = number;
  }
  for (const auto& [family, count] : helps) {
    if (!s.types.contains(family)) s.errors.push_back("HELP without TYPE: " + family);
  }
  return s;
}

std::string errors_of(const Scrape& s) {
  std::string text;
  for (const auto& e : s.errors) text += e + "\n";
  return text;
}

// One scrape of the daemon whose endpoint listens on `port`, checked for format errors.
Scrape scrape(int port) {
  const HttpReply r = http_get(port, "/metrics");
  EXPECT_EQ(r.code, 200) << r.head;
  EXPECT_THAT(r.head, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  Scrape s = parse(r.body);
  EXPECT_TRUE(s.errors.empty()) << errors_of(s) << "--- text:\n" << r.body;
  return s;
}

nlohmann::json status_of(const Daemon& daemon) {
  const RunResult r = elasticctl(ctl_args(daemon, {"status", "--json"}));
  if (!r.status.exited_with(0)) return nullptr;
  auto reply = nlohmann::json::parse(r.out, nullptr, false);
  return reply.is_discarded() ? nlohmann::json(nullptr) : reply;
}

TEST(MetricsInteg, TwoDaemonsExportMembershipRaftAndJobs) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.set("control.metrics_listen=127.0.0.1:0");
  n1.set("checkpoint.root=" + dir.file("ckpt"));
  n1.start();
  const std::string address1 = metrics_address(n1);
  ASSERT_THAT(address1, ::testing::StartsWith("127.0.0.1:")) << n1.process().err();
  EXPECT_NE(port_of(address1), 0);
  EXPECT_EQ(status_of(n1).value("metrics", ""), address1);

  Daemon n2(dir, "n2", {n1.seed()});
  n2.set("control.metrics_listen=127.0.0.1:0");
  n2.set("checkpoint.root=" + dir.file("ckpt"));
  n2.start();
  const int port1 = port_of(address1);
  const int port2 = port_of(metrics_address(n2));

  // Both see two alive members; n1 (the only voter) leads, n2 learns of it by gossip.
  EXPECT_TRUE(wait_until(
      [&] {
        const Scrape a = scrape(port1), b = scrape(port2);
        return a.value("elastic_members", "state=\"alive\"") == 2.0 &&
               b.value("elastic_members", "state=\"alive\"") == 2.0 &&
               a.value("elastic_raft_leader") == 1.0 && b.value("elastic_raft_leader_known") == 1.0;
      },
      kConverge))
      << describe({&n1, &n2});
  const Scrape a = scrape(port1);
  const Scrape b = scrape(port2);
  EXPECT_EQ(a.value("elastic_members", "state=\"dead\""), 0.0);
  EXPECT_EQ(a.value("elastic_raft_voter"), 1.0);
  EXPECT_GE(a.value("elastic_raft_term").value_or(0), 1.0);
  EXPECT_TRUE(a.value("elastic_raft_commit_index").has_value());
  EXPECT_EQ(b.value("elastic_raft_voter"), 0.0);
  EXPECT_EQ(b.value("elastic_raft_leader"), 0.0);
  EXPECT_EQ(b.value("elastic_raft_term"), a.value("elastic_raft_term"));
  EXPECT_FALSE(b.value("elastic_raft_commit_index").has_value());  // voters only
  // n1 probes n2 within a probe interval or two of meeting it.
  EXPECT_TRUE(wait_until(
      [&] {
        const Scrape s = scrape(port1);
        return s.value("elastic_messages_sent_total", "type=\"ping\"").value_or(0) > 0 &&
               s.value("elastic_messages_received_total", "type=\"ack\"").value_or(0) > 0 &&
               s.value("elastic_membership_probes_total").value_or(0) > 0;
      },
      kConverge));
  EXPECT_EQ(a.value("elastic_messages_dropped_total", "reason=\"malformed\""), 0.0);
  EXPECT_TRUE(a.value("elastic_uptime_seconds").has_value());
  // The leader's recovery histogram, one series per cause, empty so far (incident_test fills it).
  for (const char* cause : {"worker_failed", "node_lost", "node_left"}) {
    EXPECT_EQ(a.value("elastic_recovery_seconds_count", "cause=\"" + std::string(cause) + "\""),
              0.0)
        << cause;
  }
  EXPECT_FALSE(b.value("elastic_recovery_seconds_count", "cause=\"node_lost\"").has_value())
      << "leader only";
  // No worker has reported progress yet (job_supervisor_test counts real reports).
  EXPECT_EQ(a.value("elastic_progress_reports_total", "outcome=\"forwarded\""), 0.0);
  EXPECT_EQ(a.value("elastic_progress_reports_total", "outcome=\"coalesced\""), 0.0);
  EXPECT_EQ(a.types.at("elastic_messages_sent_total"), "counter");
  bool info = false;
  for (const auto& [series, value] : a.series) {
    if (series.rfind("elastic_node_info{name=\"n1\",generation=\"", 0) == 0 && value == 1.0) {
      info = true;
    }
  }
  EXPECT_TRUE(info) << "no elastic_node_info for n1";

  // A job: the leader's table shows it, and its restarts and round are exported. Its worker
  // publishes a checkpoint the way elastic-trainer does (LATEST names the newest step dir).
  const RunResult submitted = elasticctl(
      ctl_args(n2, {"submit", "--name", "metrics", "--nodes", "1", "--", "/bin/sh", "-c",
                    "mkdir -p \"$ELASTIC_CHECKPOINT_DIR/step-000000042\" && "
                    "echo step-000000042 > \"$ELASTIC_CHECKPOINT_DIR/LATEST\" && exec sleep 600"}));
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.out << submitted.err;
  const std::string prefix = "submitted ";
  ASSERT_EQ(submitted.out.rfind(prefix, 0), 0u) << submitted.out;
  const std::string job =
      submitted.out.substr(prefix.size(), submitted.out.find('\n') - prefix.size());
  EXPECT_TRUE(wait_until(
      [&] {
        const Scrape s = scrape(port1);
        double jobs = 0;
        for (const char* state : {"pending", "rendezvous", "running", "recovering"}) {
          jobs += s.value("elastic_jobs", "state=\"" + std::string(state) + "\"").value_or(0);
        }
        return jobs == 1.0 && s.value("elastic_job_restarts_total", "job=\"" + job + "\"") == 0.0 &&
               s.value("elastic_job_round", "job=\"" + job + "\"").value_or(0) >= 1.0;
      },
      kConverge))
      << scrape(port1).series.size();
  // The job's one worker runs on one of the two daemons.
  EXPECT_TRUE(wait_until(
      [&] {
        return scrape(port1).value("elastic_workers", "state=\"running\"").value_or(0) +
                   scrape(port2).value("elastic_workers", "state=\"running\"").value_or(0) ==
               1.0;
      },
      kConverge));
  // The node running it exports the checkpoint's step and age.
  const std::string job_label = "job=\"" + job + "\"";
  EXPECT_TRUE(wait_until(
      [&] {
        for (const int port : {port1, port2}) {
          const Scrape s = scrape(port);
          const auto age = s.value("elastic_checkpoint_age_seconds", job_label);
          if (s.value("elastic_checkpoint_step", job_label) == 42.0 && age && *age >= 0 &&
              *age < 60) {
            return true;
          }
        }
        return false;
      },
      kConverge));
  EXPECT_GT(scrape(port1).value("elastic_control_requests_total", "verb=\"status\"").value_or(0),
            0.0);
}

TEST(MetricsInteg, HttpErrorsAreAnsweredAndCounted) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.set("control.metrics_listen=127.0.0.1:0");
  n1.start();
  const int port = port_of(metrics_address(n1));
  EXPECT_EQ(http_get(port, "/").code, 404);
  EXPECT_EQ(http_get(port, "/metricsx").code, 404);
  EXPECT_EQ(http_get(port, "/metrics?name[]=x").code, 200);
  const HttpReply post = http_get(port, "/metrics", "POST");
  EXPECT_EQ(post.code, 405);
  EXPECT_THAT(post.head, HasSubstr("Allow: GET, HEAD"));
  const HttpReply head = http_get(port, "/metrics", "HEAD");
  EXPECT_EQ(head.code, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_THAT(http_exchange(port, "GET /metrics SPDY/3\r\n\r\n"), HasSubstr("400 Bad Request"));
  std::string many = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; i < 100; ++i) many += "X-Header-" + std::to_string(i) + ": 1\r\n";
  EXPECT_THAT(http_exchange(port, many + "\r\n"), HasSubstr("431"));
  const Scrape s = scrape(port);
  EXPECT_EQ(s.value("elastic_metrics_rejected_total", "reason=\"not_found\""), 2.0);
  EXPECT_EQ(s.value("elastic_metrics_rejected_total", "reason=\"bad_request\""), 3.0);
}

TEST(MetricsInteg, ControlSocketRefusalsAreCountedByReason) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.set("control.metrics_listen=127.0.0.1:0");
  n1.start();
  const int port = port_of(metrics_address(n1));
  // A frame header promising 2 GiB: closed at once. A frame that is not a request: answered
  // with the reason, then closed.
  const int big = connect_unix(n1.socket());
  ASSERT_GE(big, 0);
  ASSERT_EQ(::send(big, "\x7f\xff\xff\xff", 4, MSG_NOSIGNAL), 4);
  EXPECT_TRUE(read_until_closed(big, 10s));
  ::close(big);
  const int garbage = connect_unix(n1.socket());
  ASSERT_GE(garbage, 0);
  ASSERT_EQ(::send(garbage, "\x00\x00\x00\x03{x}", 7, MSG_NOSIGNAL), 7);
  EXPECT_TRUE(read_until_closed(garbage, 10s));
  ::close(garbage);
  // More connections than one uid may keep open (16): the rest are refused at accept.
  std::vector<int> fds;
  for (int i = 0; i < 70; ++i) {
    const int fd = connect_unix(n1.socket());
    if (fd >= 0) fds.push_back(fd);
  }
  EXPECT_TRUE(wait_until(
      [&] {
        const Scrape s = scrape(port);
        return s.value("elastic_control_rejected_total", "reason=\"oversized\"") == 1.0 &&
               s.value("elastic_control_rejected_total", "reason=\"malformed\"") == 1.0 &&
               s.value("elastic_control_rejected_total", "reason=\"too_many_connections\"")
                       .value_or(0) >= 6.0;
      },
      kConverge));
  for (const int fd : fds) ::close(fd);
  const Scrape s = scrape(port);
  EXPECT_EQ(s.value("elastic_control_rejected_total", "reason=\"request_timeout\""), 0.0);
  EXPECT_EQ(s.value("elastic_control_rejected_total", "reason=\"remote_refused\""), 0.0);
}

TEST(MetricsInteg, HostileClientsDoNotStopTheDaemon) {
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.set("control.metrics_listen=127.0.0.1:0");
  n1.start();
  const int port = port_of(metrics_address(n1));

  // Garbage bytes, then a 1 MiB request line.
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage += static_cast<char>((i * 7919) % 256);
  const std::string answer = http_exchange(port, garbage + "\r\n\r\n");
  EXPECT_THAT(answer, HasSubstr("400 Bad Request"));
  const std::string huge =
      http_exchange(port, "GET /" + std::string(1 << 20, 'a') + " HTTP/1.1\r\n\r\n");
  EXPECT_THAT(huge, HasSubstr("431"));

  // 100 idle connections and a slowloris that keeps trickling header bytes.
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = connect_loopback(port);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  const int slow = connect_loopback(port);
  ASSERT_GE(slow, 0);
  ASSERT_EQ(::send(slow, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL), 23);

  // Meanwhile a good client is served and elasticctl answers.
  const Scrape s = scrape(port);
  EXPECT_EQ(s.value("elastic_members", "state=\"alive\""), 1.0);
  EXPECT_FALSE(status_of(n1).is_null());

  // The slowloris is cut off at the request timeout although it keeps sending.
  bool closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!closed && std::chrono::steady_clock::now() < deadline) {
    if (::send(slow, "X", 1, MSG_NOSIGNAL) != 1) {
      closed = true;
      break;
    }
    pollfd p{.fd = slow, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 200) > 0) {  // readable: EOF or a reset (the server closed it)
      char byte;
      closed = ::recv(slow, &byte, 1, MSG_DONTWAIT) <= 0;
    }
  }
  EXPECT_TRUE(closed) << "a slowloris client was never cut off";
  ::close(slow);
  for (const int fd : idle) ::close(fd);

  const Scrape after = scrape(port);
  EXPECT_GE(after.value("elastic_metrics_rejected_total", "reason=\"timeout\"").value_or(0), 1.0);
  EXPECT_GE(
      after.value("elastic_metrics_rejected_total", "reason=\"too_many_connections\"").value_or(0),
      68.0);
  EXPECT_FALSE(status_of(n1).is_null());
  EXPECT_TRUE(n1.process().running());
}

TEST(MetricsInteg, OffByDefaultAndWildcardOnlyWhenConfigured) {
  TempDir dir;
  Daemon plain(dir, "n1", {});
  plain.start();
  EXPECT_EQ(metrics_address(plain), "");
  EXPECT_EQ(status_of(plain).value("metrics", "?"), "");

  Daemon wide(dir, "n2", {});
  wide.set_voters({"n2"});
  wide.set("control.metrics_listen=0.0.0.0:0");
  wide.start();
  const std::string address = metrics_address(wide);
  ASSERT_THAT(address, ::testing::StartsWith("0.0.0.0:")) << wide.process().err();
  EXPECT_EQ(scrape(port_of(address)).value("elastic_raft_voter"), 1.0);
}

TEST(MetricsInteg, PortInUseFailsTheStart) {
  TempDir dir;
  // Hold a listening port, then ask a daemon to bind it.
  const HeldLoopbackPort held;
  ASSERT_NE(held.port(), 0);
  Daemon n1(dir, "n1", {});
  n1.set("control.metrics_listen=127.0.0.1:" + std::to_string(held.port()));
  const RunResult r = run(n1.args(), {}, std::chrono::seconds(10));
  EXPECT_TRUE(r.status.exited_with(69)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("control.metrics_listen"));
  EXPECT_THAT(r.err, HasSubstr("Address already in use"));
}

}  // namespace
}  // namespace elastic::testing
