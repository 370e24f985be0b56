// elasticd's life under systemd, on real daemons (127.0.0.1) and the real unit file:
//   - sd_notify: a test socket is the daemon's NOTIFY_SOCKET; READY=1 comes only once the node
//     joined (at once without seeds; never while its only seed is absent, STATUS says
//     "joining"); SIGHUP -> RELOADING=1 ... READY=1; SIGTERM -> STOPPING=1 and exit 0;
//   - reload: a valid changed file applies logging.level live and names node.name as needing a
//     restart; a broken file changes nothing, STATUS and `elasticctl status` say why, and a
//     fixed file applies on the next SIGHUP; `elasticctl reload` (the unit's ExecReload) does
//     the same and exits 78 for a refused file;
//   - drain: SIGTERM lets a worker checkpoint (its TERM trap writes a file and exits 75), the
//     node leaves membership gracefully ("left" on the survivor) and the job is re-planned on
//     the survivor without a restart; a worker that ignores TERM is SIGKILLed after
//     spawner.stop_grace; a second SIGTERM skips the grace;
//   - the unit passes `systemd-analyze verify` (no systemd needed as PID 1), and `cmake
//     --install` into a DESTDIR lays out every file, keeps an edited config, and its unit
//     verifies with the installed binary.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// The systemd side of sd_notify: an AF_UNIX datagram socket at a per-test path.
class NotifyListener {
 public:
  explicit NotifyListener(std::string path) : path_(std::move(path)) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    EXPECT_LT(path_.size(), sizeof(address.sun_path)) << path_;
    std::memcpy(address.sun_path, path_.data(),
                std::min(path_.size(), sizeof(address.sun_path) - 1));
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
        << std::strerror(errno);
  }
  ~NotifyListener() { ::close(fd_); }
  const std::string& path() const { return path_; }

  // Every datagram received so far, oldest first.
  const std::vector<std::string>& messages() {
    char buffer[4096];
    while (true) {
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n < 0) break;
      messages_.emplace_back(buffer, static_cast<std::size_t>(n));
    }
    return messages_;
  }
  // The index of the first message from `from` on that contains `text`, or -1.
  int find(const std::string& text, std::size_t from = 0) {
    const auto& all = messages();
    for (std::size_t i = from; i < all.size(); ++i) {
      if (all[i].find(text) != std::string::npos) return static_cast<int>(i);
    }
    return -1;
  }
  std::string dump() {
    std::string text;
    for (const std::string& m : messages()) text += "  [" + m + "]\n";
    return text;
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> messages_;
};

// An elasticd under test (daemon_under_test.h's arguments) started with an environment and,
// optionally, a config file instead of -c "".
class LifecycleDaemon {
 public:
  LifecycleDaemon(const TempDir& dir, std::string name, std::vector<std::string> seeds)
      : dir_(dir), daemon_(dir, std::move(name), std::move(seeds)) {}

  Daemon& daemon() { return daemon_; }
  void set(std::string setting) { daemon_.set(std::move(setting)); }
  void use_config_file(std::string path) { config_file_ = std::move(path); }

  void start(const std::map<std::string, std::string>& env) {
    std::vector<std::string> argv = daemon_.args();
    if (!config_file_.empty()) {
      argv[2] = config_file_;  // args() = {elasticd, "-c", "", ...}
      // The file's logging.level is what a reload changes; drop the harness's --set for it.
      for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
        if (argv[i] == "--set" && argv[i + 1].rfind("logging.level=", 0) == 0) {
          argv.erase(argv.begin() + static_cast<std::ptrdiff_t>(i),
                     argv.begin() + static_cast<std::ptrdiff_t>(i) + 2);
          break;
        }
      }
    }
    process_ = std::make_unique<Process>(argv, env, dir_.file(daemon_.name()),
                                         daemon_.name() + "-lifecycle");
    // "elasticd ready: ... address=tcp://HOST:PORT control=..." (string search: std::regex
    // trips GCC 12's -Wmaybe-uninitialized in sanitizer builds).
    EXPECT_TRUE(wait_until(
        [&] {
          const std::string err = process_->err();
          const auto line = err.find("elasticd ready: ");
          if (line == std::string::npos) return false;
          const std::string key = "address=tcp://";
          const auto at = err.find(key, line);
          const auto end = err.find(' ', at);
          if (at == std::string::npos || end == std::string::npos) return false;
          // Named: CURVE (on, as in production) needs the seed's name.
          seed_ = daemon_.name() + "@" + err.substr(at + key.size(), end - at - key.size());
          return true;
        },
        kReady))
        << process_->err();
  }
  Process& process() { return *process_; }
  const std::string& seed() const { return seed_; }
  std::vector<std::string> ctl(std::vector<std::string> args) const {
    std::vector<std::string> all = {"-c", "", "--set", "control.socket=" + daemon_.socket()};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }
  json status() const {
    const RunResult r = elasticctl(ctl({"status", "--json"}));
    if (!r.status.exited_with(0)) return nullptr;
    const json reply = json::parse(r.out, nullptr, false);
    return reply.is_discarded() ? nullptr : reply;
  }

 private:
  const TempDir& dir_;
  Daemon daemon_;
  std::string config_file_;
  std::unique_ptr<Process> process_;
  std::string seed_;
};

// Starts `daemon` reading `file` (so a reload has something to re-read) under `notify`; true
// once it sent READY=1.
bool start_with_file(LifecycleDaemon& daemon, NotifyListener& notify, const std::string& file) {
  daemon.use_config_file(file);
  daemon.start({{"NOTIFY_SOCKET", notify.path()}});
  return wait_until([&] { return notify.find("READY=1") >= 0; }, kReady);
}

bool exits_with(Process& process, int code, std::chrono::milliseconds within) {
  const auto status = process.wait(within);
  return status && status->exited_with(code);
}

// ---- sd_notify and readiness ----------------------------------------------------------------

TEST(Lifecycle, ReadyOnlyAfterJoiningAndStoppingOnSigterm) {
  TempDir dir;
  NotifyListener notify1(dir.file("n1.notify"));
  LifecycleDaemon n1(dir, "n1", {});
  n1.start({{"NOTIFY_SOCKET", notify1.path()}});
  // No seeds: ready at once, with a STATUS line about the cluster.
  ASSERT_TRUE(wait_until([&] { return notify1.find("READY=1") >= 0; }, kReady)) << notify1.dump();
  EXPECT_TRUE(wait_until([&] { return notify1.find("STATUS=member of 1 node") >= 0; }, kReady))
      << notify1.dump();

  // A seed nobody answers on: STATUS says joining, READY never comes.
  NotifyListener notify_lonely(dir.file("lonely.notify"));
  LifecycleDaemon lonely(dir, "lonely", {"nobody@127.0.0.1:9"});
  lonely.start({{"NOTIFY_SOCKET", notify_lonely.path()}});
  ASSERT_TRUE(
      wait_until([&] { return notify_lonely.find("STATUS=joining via 1 seed") >= 0; }, kReady))
      << notify_lonely.dump();
  EXPECT_FALSE(wait_until([&] { return notify_lonely.find("READY=1") >= 0; }, 2s))
      << notify_lonely.dump();
  const json lonely_status = lonely.status();
  ASSERT_FALSE(lonely_status.is_null());
  EXPECT_EQ(lonely_status["lifecycle"]["ready"], false);
  EXPECT_THAT(lonely_status["lifecycle"]["status"].get<std::string>(), HasSubstr("joining"));

  // The second daemon of a cluster: joining first, READY only once it is a member with n1.
  NotifyListener notify2(dir.file("n2.notify"));
  LifecycleDaemon n2(dir, "n2", {n1.seed()});
  n2.start({{"NOTIFY_SOCKET", notify2.path()}});
  ASSERT_TRUE(wait_until([&] { return notify2.find("READY=1") >= 0; }, kConverge))
      << notify2.dump() << n2.process().err();
  const int joining = notify2.find("STATUS=joining via 1 seed");
  EXPECT_GE(joining, 0) << notify2.dump();
  EXPECT_LT(joining, notify2.find("READY=1")) << notify2.dump();
  EXPECT_TRUE(sees(n2.daemon(), "n1", "alive"));
  EXPECT_TRUE(wait_until([&] { return notify2.find("STATUS=member of 2 nodes (2 alive)") >= 0; },
                         kConverge))
      << notify2.dump();

  // SIGTERM: STOPPING=1 and a clean exit.
  n2.process().signal(SIGTERM);
  EXPECT_TRUE(exits_with(n2.process(), 0, 10s)) << n2.process().err();
  EXPECT_GE(notify2.find("STOPPING=1"), 0) << notify2.dump();
  lonely.process().signal(SIGTERM);
  EXPECT_TRUE(exits_with(lonely.process(), 0, 10s)) << lonely.process().err();
  EXPECT_GE(notify_lonely.find("STOPPING=1"), 0) << notify_lonely.dump();
  n1.process().signal(SIGINT);
  EXPECT_TRUE(exits_with(n1.process(), 0, 10s)) << n1.process().err();
}

// Without NOTIFY_SOCKET nothing is sent and the daemon runs as before (Slurm, by hand).
TEST(Lifecycle, WithoutNotifySocketTheDaemonRunsAndStops) {
  TempDir dir;
  LifecycleDaemon n1(dir, "n1", {});
  n1.start({});
  EXPECT_TRUE(wait_until(
      [&] { return n1.process().err().find("no NOTIFY_SOCKET") != std::string::npos; }, kReady))
      << n1.process().err();
  n1.process().signal(SIGTERM);
  EXPECT_TRUE(exits_with(n1.process(), 0, 10s)) << n1.process().err();
}

// ---- SIGHUP reload ----------------------------------------------------------------------------

TEST(Lifecycle, ReloadAppliesValidRefusesBrokenAndAppliesTheFix) {
  TempDir dir;
  NotifyListener notify(dir.file("n1.notify"));
  LifecycleDaemon n1(dir, "n1", {});
  const std::string file = dir.write("elasticd.toml", "[logging]\nlevel = \"info\"\n");
  ASSERT_TRUE(start_with_file(n1, notify, file)) << notify.dump();
  json status = n1.status();
  ASSERT_FALSE(status.is_null());
  EXPECT_EQ(status["config"]["source"].get<std::string>().rfind(file, 0), 0u) << status.dump();
  EXPECT_TRUE(status["config"]["last_reload"].is_null());
  // At info, control requests are not logged.
  EXPECT_EQ(n1.process().err().find("control request \"status\""), std::string::npos);

  // A valid change: logging.level applies now; checkpoint.keep waits for a restart. (node.name
  // is pinned by the harness's --set, which the reload re-applies: the override still wins.)
  dir.write("elasticd.toml",
            "[node]\nname = \"renamed\"\n[checkpoint]\nkeep = 7\n[logging]\nlevel = \"debug\"\n");
  std::size_t mark = notify.messages().size();
  n1.process().signal(SIGHUP);
  ASSERT_TRUE(wait_until(
      [&] {
        const int reloading = notify.find("RELOADING=1\nMONOTONIC_USEC=", mark);
        return reloading >= 0 && notify.find("READY=1", static_cast<std::size_t>(reloading)) >= 0;
      },
      kReady))
      << notify.dump();
  ASSERT_TRUE(wait_until(
      [&] {
        status = n1.status();
        return !status.is_null() && !status["config"]["last_reload"].is_null();
      },
      kReady));
  EXPECT_EQ(status["config"]["last_reload"]["ok"], true) << status.dump();
  const std::string message = status["config"]["last_reload"]["message"];
  EXPECT_THAT(message, HasSubstr("logging.level"));
  EXPECT_THAT(message, HasSubstr("checkpoint.keep"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("node.name")));
  EXPECT_EQ(status["self"]["name"], "n1");
  EXPECT_THAT(n1.process().err(),
              HasSubstr("checkpoint.keep changed; takes effect after a restart"));
  EXPECT_TRUE(wait_until(
      [&] {
        n1.status();  // logged at debug now
        return n1.process().err().find("control request \"status\"") != std::string::npos;
      },
      kReady))
      << n1.process().err();

  // A broken file: nothing changes, STATUS and status name the key and the reason.
  dir.write("elasticd.toml", "[logging]\nlevel = \"loud\"\n");
  mark = notify.messages().size();
  n1.process().signal(SIGHUP);
  ASSERT_TRUE(wait_until(
      [&] {
        return notify.find("STATUS=reload failed: ", mark) >= 0 &&
               notify.find("READY=1", mark) >= 0;
      },
      kReady))
      << notify.dump();
  EXPECT_THAT(
      notify.messages()[static_cast<std::size_t>(notify.find("STATUS=reload failed", mark))],
      HasSubstr("logging.level"));
  status = n1.status();
  ASSERT_FALSE(status.is_null());
  EXPECT_EQ(status["config"]["last_reload"]["ok"], false) << status.dump();
  EXPECT_THAT(status["config"]["last_reload"]["message"].get<std::string>(),
              HasSubstr("logging.level"));
  EXPECT_THAT(status["lifecycle"]["status"].get<std::string>(),
              HasSubstr("still running with the previous configuration"));
  EXPECT_TRUE(n1.process().running());
  EXPECT_THAT(n1.process().err(), HasSubstr("[error] reload failed: "));

  // The fix applies on the next SIGHUP, and STATUS no longer reports the failure.
  dir.write("elasticd.toml", "[logging]\nlevel = \"warn\"\n");
  mark = notify.messages().size();
  n1.process().signal(SIGHUP);
  ASSERT_TRUE(wait_until(
      [&] {
        status = n1.status();
        return !status.is_null() && status["config"]["last_reload"]["ok"] == true;
      },
      kReady))
      << status.dump();
  EXPECT_THAT(status["config"]["last_reload"]["message"].get<std::string>(),
              HasSubstr("logging.level"));
  EXPECT_TRUE(wait_until([&] { return notify.find("STATUS=member of", mark) >= 0; }, kReady))
      << notify.dump();

  n1.process().signal(SIGTERM);
  EXPECT_TRUE(exits_with(n1.process(), 0, 10s)) << n1.process().err();
  EXPECT_GE(notify.find("STOPPING=1", mark), 0) << notify.dump();
}

// `elasticctl reload`, the unit's ExecReload (`ExecReload=/bin/kill -HUP` made
// `systemctl reload` return 0 for a refused file): the same reload as SIGHUP, answered with its
// outcome; a refused file exits 78 with the reason and the daemon runs on unchanged.
TEST(Lifecycle, ElasticctlReloadAnswersWithTheOutcomeAndFailsForARefusedFile) {
  TempDir dir;
  NotifyListener notify(dir.file("n1.notify"));
  LifecycleDaemon n1(dir, "n1", {});
  const std::string file = dir.write("elasticd.toml", "[logging]\nlevel = \"info\"\n");
  ASSERT_TRUE(start_with_file(n1, notify, file)) << notify.dump();

  dir.write("elasticd.toml", "[checkpoint]\nkeep = 7\n[logging]\nlevel = \"warn\"\n");
  RunResult r = elasticctl(n1.ctl({"reload"}));
  EXPECT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_THAT(r.out, ::testing::StartsWith("reloaded " + file));
  EXPECT_THAT(r.out, HasSubstr("logging.level"));
  EXPECT_THAT(r.out, HasSubstr("after a restart: checkpoint.keep"));
  // Done when elasticctl returns: status already shows it, without waiting.
  json status = n1.status();
  ASSERT_FALSE(status.is_null());
  EXPECT_EQ(status["config"]["last_reload"]["ok"], true) << status.dump();

  // A refused file: exit 78, the reason on stderr; nothing changes and the daemon runs on.
  dir.write("elasticd.toml", "[logging]\nlevel = \"loud\"\n");
  std::size_t mark = notify.messages().size();
  r = elasticctl(n1.ctl({"reload"}));
  EXPECT_TRUE(r.status.exited_with(78)) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("elasticctl: reload refused: " + file + ":2: logging.level"));
  EXPECT_THAT(r.err, HasSubstr("still running with the previous configuration"));
  EXPECT_TRUE(n1.process().running());
  status = n1.status();
  ASSERT_FALSE(status.is_null());
  EXPECT_EQ(status["config"]["last_reload"]["ok"], false) << status.dump();
  EXPECT_THAT(status["lifecycle"]["status"].get<std::string>(), HasSubstr("reload failed: "));
  // systemd saw the same reload as for a SIGHUP: RELOADING=1, then READY=1.
  EXPECT_GE(notify.find("RELOADING=1", mark), 0) << notify.dump();
  EXPECT_GE(notify.find("READY=1", mark), 0) << notify.dump();

  // --json carries the daemon's refusal as is, with the same exit status.
  r = elasticctl(n1.ctl({"reload", "--json"}));
  EXPECT_TRUE(r.status.exited_with(78)) << r.out << r.err;

  dir.write("elasticd.toml", "[logging]\nlevel = \"info\"\n");
  r = elasticctl(n1.ctl({"reload", "--json"}));
  EXPECT_TRUE(r.status.exited_with(0)) << r.err;
  const json reply = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(reply.is_object()) << r.out;
  EXPECT_EQ(reply["ok"], true);
  EXPECT_THAT(reply["message"].get<std::string>(), HasSubstr("logging.level"));

  n1.process().signal(SIGTERM);
  EXPECT_TRUE(exits_with(n1.process(), 0, 10s)) << n1.process().err();
}

// ---- SIGTERM drain ----------------------------------------------------------------------------

json job_of(const LifecycleDaemon& daemon, const std::string& id) {
  const RunResult r = elasticctl(daemon.ctl({"status", id, "--json"}));
  if (!r.status.exited_with(0)) return nullptr;
  const json job = json::parse(r.out, nullptr, false);
  return job.is_discarded() ? nullptr : job;
}

std::vector<std::string> rank_nodes(const json& job) {
  std::vector<std::string> nodes;
  for (const auto& r : job.value("ranks", json::array())) nodes.push_back(r["node"]);
  return nodes;
}

std::string submit(const LifecycleDaemon& daemon, const std::string& name, const std::string& nodes,
                   const std::string& script, const std::string& marker_dir) {
  const RunResult r =
      elasticctl(daemon.ctl({"submit", "--name", name, "--nodes", nodes, "--env",
                             "MARKERS=" + marker_dir, "--", "/bin/sh", "-c", script}));
  EXPECT_TRUE(r.status.exited_with(0)) << r.err;
  const std::string prefix = "submitted ";
  if (r.out.rfind(prefix, 0) != 0) return "";
  return r.out.substr(prefix.size(), r.out.find('\n') - prefix.size());
}

// Checkpoints on TERM like elastic-trainer: writes a marker, exits 75.
constexpr const char* kCheckpointingWorker =
    "trap 'touch \"$MARKERS/checkpointed-$ELASTIC_NODE-$ELASTIC_ROUND\"; exit 75' TERM; "
    "touch \"$MARKERS/started-$ELASTIC_NODE-$ELASTIC_ROUND\"; "
    "while :; do sleep 0.05; done";
// Ignores TERM (a worker stuck in a collective).
constexpr const char* kStubbornWorker =
    "trap '' TERM; echo $$ > \"$MARKERS/pid-$ELASTIC_NODE\"; while :; do sleep 0.05; done";

bool process_alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

TEST(Lifecycle, DrainCheckpointsLeavesAndTheJobShrinksWithoutARestart) {
  TempDir dir;
  const std::string markers = dir.file("markers");
  std::filesystem::create_directories(markers);
  ::chmod(markers.c_str(), 0777);
  LifecycleDaemon n1(dir, "n1", {});
  n1.start({});
  LifecycleDaemon n2(dir, "n2", {n1.seed()});
  n2.set("spawner.stop_grace=5s");
  n2.start({});
  // The leader places only nodes whose slots it knows.
  ASSERT_TRUE(wait_until(
      [&] {
        const RunResult r = elasticctl(n1.ctl({"nodes", "--json"}));
        const json reply = json::parse(r.out, nullptr, false);
        if (reply.is_discarded()) return false;
        int placed = 0;
        for (const auto& m : reply.value("members", json::array())) {
          placed += m.value("state", "") == "alive" && m.contains("slots") ? 1 : 0;
        }
        return placed == 2;
      },
      kConverge));
  const std::string id = submit(n1, "drain", "1:2", kCheckpointingWorker, markers);
  ASSERT_FALSE(id.empty());
  json job;
  ASSERT_TRUE(wait_until(
      [&] {
        job = job_of(n1, id);
        return !job.is_null() && job["state"] == "running" && rank_nodes(job).size() == 2;
      },
      kConverge))
      << job.dump();
  const auto round = job["round"].get<std::uint64_t>();
  const std::string started = markers + "/started-n2-" + std::to_string(round);
  ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(started); }, kConverge));

  const auto sent = std::chrono::steady_clock::now();
  n2.process().signal(SIGTERM);
  // The daemon keeps answering while it drains (or has finished already).
  EXPECT_TRUE(exits_with(n2.process(), 0, 5s + 10s)) << n2.process().err();
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 5s) << "the worker exited on TERM at once";
  EXPECT_TRUE(std::filesystem::exists(markers + "/checkpointed-n2-" + std::to_string(round)))
      << n2.process().err();
  EXPECT_THAT(n2.process().err(), HasSubstr("SIGTERM received from pid"));
  EXPECT_THAT(n2.process().err(), HasSubstr("exited with status 75"));
  // Gracefully gone: the survivor sees "left", never "dead".
  EXPECT_TRUE(wait_until([&] { return sees(n1.daemon(), "n2", "left"); }, kConverge))
      << describe({&n1.daemon()});
  // Re-planned on the survivor as a lost member: no restart counted.
  ASSERT_TRUE(wait_until(
      [&] {
        job = job_of(n1, id);
        return !job.is_null() && job["round"].get<std::uint64_t>() > round &&
               job["state"] == "running" && rank_nodes(job) == std::vector<std::string>{"n1"};
      },
      kConverge))
      << job.dump() << n1.process().err();
  EXPECT_EQ(job["restarts"], 0) << job.dump();
  EXPECT_THAT(n1.process().err(), HasSubstr("rendezvous: n2 (gen 1) drains"));
  n1.process().signal(SIGTERM);
  EXPECT_TRUE(exits_with(n1.process(), 0, 15s)) << n1.process().err();
}

TEST(Lifecycle, DrainKillsAWorkerThatIgnoresTermAfterTheGrace) {
  TempDir dir;
  const std::string markers = dir.file("markers");
  std::filesystem::create_directories(markers);
  ::chmod(markers.c_str(), 0777);
  NotifyListener notify(dir.file("n1.notify"));
  LifecycleDaemon n1(dir, "n1", {});
  n1.set("spawner.stop_grace=1s");
  n1.start({{"NOTIFY_SOCKET", notify.path()}});
  const std::string id = submit(n1, "stubborn", "1", kStubbornWorker, markers);
  ASSERT_FALSE(id.empty());
  int pid = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string text = read_file(markers + "/pid-n1");
        if (text.empty()) return false;
        pid = std::stoi(text);
        return true;
      },
      kConverge))
      << n1.process().err();
  ASSERT_TRUE(process_alive(pid));
  const auto sent = std::chrono::steady_clock::now();
  n1.process().signal(SIGTERM);
  // While the worker ignores TERM, the daemon still answers and says it drains.
  json status;
  EXPECT_TRUE(wait_until(
      [&] {
        status = n1.status();
        return !n1.process().running() ||
               (!status.is_null() && status["lifecycle"]["draining"] == true);
      },
      5s))
      << status.dump();
  EXPECT_TRUE(exits_with(n1.process(), 0, 1s + 10s)) << n1.process().err();
  EXPECT_GE(std::chrono::steady_clock::now() - sent, 1s);
  EXPECT_FALSE(process_alive(pid));
  // The spawner's own TERM->KILL escalation and the drain's deadline both fire at the grace.
  EXPECT_THAT(n1.process().err(), HasSubstr("killed by signal 9 (SIGKILL)"));
  EXPECT_GE(notify.find("STATUS=draining: 1 worker stopping (grace 1s)"), 0) << notify.dump();
}

TEST(Lifecycle, SecondSigtermSkipsTheGrace) {
  TempDir dir;
  const std::string markers = dir.file("markers");
  std::filesystem::create_directories(markers);
  ::chmod(markers.c_str(), 0777);
  LifecycleDaemon n1(dir, "n1", {});
  n1.set("spawner.stop_grace=60s");
  n1.start({});
  ASSERT_FALSE(submit(n1, "stubborn", "1", kStubbornWorker, markers).empty());
  int pid = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string text = read_file(markers + "/pid-n1");
        if (text.empty()) return false;
        pid = std::stoi(text);
        return true;
      },
      kConverge));
  n1.process().signal(SIGTERM);
  ASSERT_TRUE(wait_until(
      [&] { return n1.process().err().find("draining (1 worker") != std::string::npos; }, 5s))
      << n1.process().err();
  n1.process().signal(SIGTERM);
  EXPECT_TRUE(exits_with(n1.process(), 0, 10s)) << n1.process().err();
  EXPECT_FALSE(process_alive(pid));
  EXPECT_THAT(n1.process().err(), HasSubstr("during the drain: killing 1 worker now"));
}

// ---- --help reads like a man page -------------------------------------------------------------

TEST(Lifecycle, HelpNamesFilesSignalsExitCodesAndEnvironment) {
  const RunResult r = run({ELASTICD_PATH, "--help"}, {}, 10s);
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  for (const char* text :
       {"FILES", "/etc/elastic/elasticd.toml", "/var/lib/elastic", "/run/elastic/elasticd.sock",
        "SIGNALS", "SIGTERM  drain", "SIGHUP   reload", "SIGINT", "EXIT STATUS", "\n  0 ",
        "\n  64 ", "\n  69 ", "\n  73 ", "\n  74 ", "\n  78 ", "ENVIRONMENT", "NOTIFY_SOCKET"}) {
    EXPECT_THAT(r.out, HasSubstr(text));
  }
}

// ---- the unit and make install ------------------------------------------------------------------

bool have_systemd_analyze() { return ::access("/usr/bin/systemd-analyze", X_OK) == 0; }

// `systemd-analyze verify` needs no running systemd; it exits 0 on unknown keys but warns on
// stderr, so any output is a failure.
RunResult verify(const std::string& unit) {
  return run({"/usr/bin/systemd-analyze", "verify", "--man=no", unit}, {}, 60s);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Lifecycle, UnitForThisBuildPassesSystemdAnalyzeVerify) {
  if (!have_systemd_analyze()) GTEST_SKIP() << "systemd-analyze is not installed (package systemd)";
  const std::string unit = std::string(ELASTIC_BUILD_DIR) + "/systemd/build/elasticd.service";
  const RunResult r = verify(unit);
  EXPECT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_EQ(r.err + r.out, "");
  EXPECT_THAT(read_text(unit), HasSubstr("ExecStart=" + std::string(ELASTICD_PATH) + " --config"));
}

TEST(Lifecycle, InstallLaysOutEveryFileKeepsAnEditedConfigAndItsUnitVerifies) {
  TempDir dir;
  const std::string root = dir.file("root");
  auto install = [&] {
    // ELASTIC_INSTALL_KEYS=1: make the node key pair as a plain `make install` does.
    return run({CMAKE_COMMAND, "--install", ELASTIC_BUILD_DIR, "--prefix", "/usr/local"},
               {{"DESTDIR", root}, {"ELASTIC_INSTALL_KEYS", "1"}}, 120s);
  };
  RunResult r = install();
  ASSERT_TRUE(r.status.exited_with(0)) << r.out << r.err;
  const std::string prefix = root + "/usr/local";
  for (const std::string& file :
       {prefix + "/sbin/elasticd", prefix + "/bin/elasticctl",
        prefix + "/lib/systemd/system/elasticd.service", prefix + "/lib/tmpfiles.d/elastic.conf",
        prefix + "/share/doc/elastic/README.md", root + "/etc/elastic/elasticd.toml",
        // Where spawner.python_dir = "auto" looks for it (job_supervisor.h).
        prefix + "/share/elastic/python/elastic_worker.py",
        prefix + "/share/elastic/grafana-dashboard.json"}) {
    EXPECT_TRUE(std::filesystem::exists(file)) << file << "\n" << r.out;
  }
  EXPECT_EQ(::access((prefix + "/sbin/elasticd").c_str(), X_OK), 0);
  // Slurm scripts, when the tree has them, are executable under libexec.
  const std::filesystem::path slurm = std::filesystem::path(ELASTIC_SOURCE_DIR) / "slurm";
  if (std::filesystem::exists(slurm)) {
    for (const auto& entry : std::filesystem::directory_iterator(slurm)) {
      if (entry.path().extension() != ".sh") continue;
      const std::string installed =
          prefix + "/libexec/elastic/slurm/" + entry.path().filename().string();
      EXPECT_EQ(::access(installed.c_str(), X_OK), 0) << installed;
    }
  }
  const std::string shipped = read_text(std::string(ELASTIC_SOURCE_DIR) + "/conf/elasticd.toml");
  EXPECT_EQ(read_text(root + "/etc/elastic/elasticd.toml"), shipped);

  // The node's CURVE key pair where the default config looks: the secret
  // 0600, the public key under the host's name in the allow-list.
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const std::string secret = root + "/etc/elastic/node.key";
  ASSERT_TRUE(std::filesystem::exists(secret)) << r.out << r.err;
  EXPECT_EQ(std::filesystem::status(secret).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_TRUE(std::filesystem::exists(root + "/etc/elastic/nodes/" + host + ".pub")) << r.out;
  const std::string key_before = read_text(secret);

  // The unit names the installed binary and the installed config.
  const std::string unit = read_text(prefix + "/lib/systemd/system/elasticd.service");
  EXPECT_THAT(
      unit,
      HasSubstr("\nExecStart=/usr/local/sbin/elasticd --config /etc/elastic/elasticd.toml\n"));
  if (have_systemd_analyze()) {
    // Verified with ExecStart pointing into DESTDIR, where the installed binary is.
    std::string staged = unit;
    const std::string from = "ExecStart=/usr/local/sbin/elasticd";
    staged.replace(staged.find(from), from.size(), "ExecStart=" + prefix + "/sbin/elasticd");
    const std::string reload = "ExecReload=/usr/local/bin/elasticctl";
    ASSERT_NE(staged.find(reload), std::string::npos) << unit;
    staged.replace(staged.find(reload), reload.size(), "ExecReload=" + prefix + "/bin/elasticctl");
    const std::string copy = dir.write("elasticd.service", staged);
    const RunResult v = verify(copy);
    EXPECT_TRUE(v.status.exited_with(0)) << v.err;
    EXPECT_EQ(v.err + v.out, "");
  }

  // An edited config survives a second install; the new default lands next to it.
  dir.write("root/etc/elastic/elasticd.toml", "# edited by the admin\n");
  r = install();
  ASSERT_TRUE(r.status.exited_with(0)) << r.out << r.err;
  EXPECT_EQ(read_text(root + "/etc/elastic/elasticd.toml"), "# edited by the admin\n");
  EXPECT_EQ(read_text(root + "/etc/elastic/elasticd.toml.default"), shipped);
  EXPECT_EQ(read_text(secret), key_before) << "a second install replaced the node key";
}

}  // namespace
}  // namespace elastic::testing
