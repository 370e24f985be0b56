// The worker channel end to end: the real Spawner starts real children with a channel, and the
// daemon's side (WorkerEndpoint + WorkerLink, as the node's loop will run them) exchanges
// hello / round / joined / stop with a C++ worker (trainer/worker_channel.h) and a Python one
// (python/elastic_worker.py under /usr/bin/python3); the daemon sees end of file when a worker
// dies; a worker that never speaks, or speaks garbage, is left alone and leaves the others
// unaffected; and the descriptor and variable reach exactly the workers that asked for them.
// No fixed sleeps: every wait polls the descriptors with a deadline.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/spawner/spawner.h"
#include "daemon/worker_channel/endpoint.h"
#include "daemon/worker_channel/worker_link.h"
#include "tests/support/process.h"
#include "tests/support/result_assertions.h"
#include "tests/support/temp_dir.h"

namespace elastic::worker_channel {
namespace {

using namespace std::chrono_literals;
using spawner::WorkerSpec;
using testing::read_file;
using testing::TempDir;

constexpr const char* kPython = "/usr/bin/python3";
const std::string kPythonDir = std::string(ELASTIC_SOURCE_DIR) + "/python";
const std::string kPythonWorker =
    std::string(ELASTIC_SOURCE_DIR) + "/tests/integ/channel_worker.py";

TimePoint now() { return TimePoint(std::chrono::steady_clock::now().time_since_epoch()); }

// Rank 1 of 2, one rank on this node.
RoundOffer sample_round() {
  return RoundOffer{.job = "j-1",
                    .round = 7,
                    .term = 3,
                    .rank = 1,
                    .local_rank = 0,
                    .world_size = 2,
                    .local_world_size = 1,
                    .group_rank = 1,
                    .master_addr = "127.0.0.1",
                    .master_port = 29555,
                    .restart_count = 2};
}

// What the node's loop will do for each worker, in miniature: poll the channels and the
// spawner, feed what arrives to the worker's link, write what the link returns.
class Daemon {
 public:
  struct Worker {
    Worker(spawner::WorkerId worker_id, std::string label, UniqueFd fd, std::string log)
        : id(worker_id),
          endpoint(std::move(label), std::move(fd)),
          link(now()),
          log_path(std::move(log)) {}
    spawner::WorkerId id;
    WorkerEndpoint endpoint;
    WorkerLink link;
    std::string log_path;
    std::vector<std::string> transitions;  // describe() of each step
    std::optional<spawner::WorkerExit> exit;
    std::string log() const { return read_file(log_path); }
  };

  explicit Daemon(const TempDir& dir) : dir_(dir) {
    spawner::SpawnerConfig config;
    config.stop_grace = 5s;
    config.log_timestamps = false;
    auto opened = spawner::Spawner::open(config);
    EXPECT_TRUE(opened.ok()) << opened.error().message;
    if (opened.ok()) spawner_ = std::move(*opened);
  }

  spawner::Spawner& spawner() { return *spawner_; }

  WorkerSpec spec(const std::string& name, std::vector<std::string> argv) const {
    WorkerSpec spec;
    spec.label = name;
    spec.argv = std::move(argv);
    spec.env = {{"PATH", "/usr/bin:/bin"},
                {"PYTHONPATH", kPythonDir},
                {"PYTHONUNBUFFERED", "1"},
                {"TORCHELASTIC_RUN_ID", "j-1"}};
    spec.working_dir = dir_.path();
    spec.log_path = dir_ / ("logs/" + name + ".log");
    spec.channel = true;
    return spec;
  }

  Worker* start(const WorkerSpec& spec) {
    Result<spawner::Spawned> started = spawner_->start(now(), spec);
    EXPECT_TRUE(started.ok()) << started.error().message;
    if (!started.ok()) return nullptr;
    EXPECT_TRUE(started->channel.valid());
    workers_.push_back(std::make_unique<Worker>(started->id, spec.label,
                                                std::move(started->channel), spec.log_path));
    return workers_.back().get();
  }

  void offer(Worker& w, const RoundOffer& round, Duration timeout) {
    carry_out(w, w.link.offer(now(), round, timeout));
  }
  void stop(Worker& w, const std::string& reason) { carry_out(w, w.link.stop(now(), reason)); }

  // Runs the loop until `condition` holds or `timeout` passes.
  bool run_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!condition()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      pass();
    }
    return true;
  }

 private:
  void carry_out(Worker& w, const LinkStep& step) {
    w.transitions.push_back(describe(step));
    if (step.send) EXPECT_OK(w.endpoint.send(*step.send));
  }

  void pass() {
    std::vector<pollfd> fds;
    fds.push_back({spawner_->fd(), POLLIN, 0});
    for (const auto& w : workers_) {
      if (w->endpoint.open()) {
        fds.push_back({w->endpoint.fd(),
                       static_cast<short>(POLLIN | (w->endpoint.wants_write() ? POLLOUT : 0)), 0});
      }
    }
    ::poll(fds.data(), fds.size(), 20);
    const TimePoint t = now();
    for (const auto& w : workers_) {
      // A worker that died with bytes waiting makes this fail (EPIPE); read() then sees the end.
      if (w->endpoint.wants_write()) {
        if (Status flushed = w->endpoint.flush(); !flushed.ok()) {
          w->transitions.push_back(flushed.error().message);
        }
      }
      for (const ChannelInput& input : w->endpoint.read()) {
        switch (input.kind) {
          case ChannelInput::Kind::kMessage:
            carry_out(*w, w->link.on_message(t, input.message));
            break;
          case ChannelInput::Kind::kBadFrame:
            carry_out(*w, w->link.on_bad_frame(t, input.error));
            break;
          case ChannelInput::Kind::kClosed:
            carry_out(*w, w->link.on_closed(t));
            break;
        }
      }
      if (auto due = w->link.tick(t)) carry_out(*w, *due);
    }
    std::vector<spawner::WorkerExit> exits;
    spawner_->process(t, &exits);
    for (const auto& exit : exits) {
      for (const auto& w : workers_) {
        if (w->id == exit.id) w->exit = exit;
      }
      exits_.push_back(exit);
    }
  }

 public:
  // Every exit so far, of the workers started here and of those started on spawner() directly.
  const std::vector<spawner::WorkerExit>& exits() const { return exits_; }

 private:
  std::vector<spawner::WorkerExit> exits_;

  const TempDir& dir_;
  std::unique_ptr<spawner::Spawner> spawner_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

std::string joined_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

// hello -> round -> joined -> stop, and the worker exits 0 after printing what it was told.
void exchange(Daemon& daemon, Daemon::Worker& w, const std::string& expected_round_line) {
  ASSERT_TRUE(daemon.run_until([&] { return w.link.state() == LinkState::kReady; }, 60s))
      << "no hello; the worker's log:\n"
      << w.log() << joined_lines(w.transitions);
  EXPECT_EQ(w.link.version(), kProtocolVersion);
  daemon.offer(w, sample_round(), 60s);
  ASSERT_TRUE(daemon.run_until([&] { return w.link.state() == LinkState::kJoined; }, 60s))
      << w.log() << joined_lines(w.transitions);
  EXPECT_EQ(w.link.joined()->round, 7u);
  EXPECT_EQ(w.link.joined()->term, 3u);
  daemon.stop(w, "the test is over");
  ASSERT_TRUE(daemon.run_until([&] { return w.exit.has_value(); }, 60s));
  EXPECT_EQ(w.exit->describe(), "exited with status 0") << w.log();
  ASSERT_TRUE(daemon.run_until([&] { return w.link.state() == LinkState::kGone; }, 10s));
  const std::string log = w.log();
  EXPECT_NE(log.find("said hello on fd 4"), std::string::npos) << log;
  EXPECT_NE(log.find(expected_round_line), std::string::npos) << log;
  EXPECT_NE(log.find("stop: the test is over"), std::string::npos) << log;
}

TEST(WorkerChannelIntegTest, ACppWorkerSaysHelloIsToldItsRoundAndJoins) {
  TempDir dir;
  Daemon daemon(dir);
  Daemon::Worker* w = daemon.start(daemon.spec("cpp", {CHANNEL_WORKER_PATH}));
  ASSERT_NE(w, nullptr);
  exchange(daemon, *w,
           "round 7 term 3 rank 1 of 2 local 0/1 group 1 store 127.0.0.1:29555 restarts 2 "
           "job j-1 run j-1");
}

TEST(WorkerChannelIntegTest, APythonWorkerSaysHelloIsToldItsRoundAndJoins) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  TempDir dir;
  Daemon daemon(dir);
  Daemon::Worker* w = daemon.start(daemon.spec("py", {kPython, kPythonWorker}));
  ASSERT_NE(w, nullptr);
  exchange(daemon, *w, "round 7 term 3 rank 1 of 2 store 127.0.0.1:29555 job j-1");
}

TEST(WorkerChannelIntegTest, TheDaemonSeesEndOfFileWhenTheWorkerDies) {
  TempDir dir;
  Daemon daemon(dir);
  Daemon::Worker* w = daemon.start(daemon.spec("cpp", {CHANNEL_WORKER_PATH}));
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(daemon.run_until([&] { return w->link.state() == LinkState::kReady; }, 60s))
      << w->log();
  daemon.offer(*w, sample_round(), 60s);
  ASSERT_TRUE(daemon.run_until([&] { return w->link.state() == LinkState::kJoined; }, 60s));
  daemon.spawner().kill(w->id);
  ASSERT_TRUE(daemon.run_until([&] { return w->link.state() == LinkState::kGone; }, 30s))
      << joined_lines(w->transitions);
  EXPECT_FALSE(w->endpoint.open());
  ASSERT_TRUE(daemon.run_until([&] { return w->exit.has_value(); }, 30s));
  EXPECT_EQ(w->exit->describe(), "killed by signal 9 (SIGKILL)");
}

TEST(WorkerChannelIntegTest, AWorkerSeesEndOfFileWhenTheDaemonClosesItsEnd) {
  TempDir dir;
  Daemon daemon(dir);
  std::vector<std::pair<Daemon::Worker*, std::string>> workers = {
      {daemon.start(daemon.spec("cpp", {CHANNEL_WORKER_PATH})),
       "channel ended: the worker channel (fd 4) was closed by elasticd."},
  };
  if (::access(kPython, X_OK) == 0) {
    workers.push_back({daemon.start(daemon.spec("py", {kPython, kPythonWorker})),
                       "channel ended: the worker channel was closed by elasticd"});
  }
  for (auto& [w, expected] : workers) {
    ASSERT_NE(w, nullptr);
    ASSERT_TRUE(daemon.run_until([&] { return w->link.state() == LinkState::kReady; }, 60s))
        << w->log();
    w->endpoint = WorkerEndpoint(w->endpoint.label(), UniqueFd());  // closes the daemon's end
    ASSERT_TRUE(daemon.run_until([&] { return w->exit.has_value(); }, 60s));
    EXPECT_EQ(w->exit->describe(), "exited with status 3") << w->log();
    EXPECT_NE(w->log().find(expected), std::string::npos) << w->log();
  }
}

TEST(WorkerChannelIntegTest, AWorkerThatNeverSpeaksLeavesTheDaemonAndTheOthersUnaffected) {
  TempDir dir;
  Daemon daemon(dir);
  Daemon::Worker* silent =
      daemon.start(daemon.spec("silent", {"/bin/sh", "-c", "exec sleep 1000"}));
  Daemon::Worker* w = daemon.start(daemon.spec("cpp", {CHANNEL_WORKER_PATH}));
  ASSERT_NE(silent, nullptr);
  ASSERT_NE(w, nullptr);
  // The talking worker's whole exchange happens while the silent one holds its channel.
  ASSERT_TRUE(daemon.run_until([&] { return w->link.state() == LinkState::kReady; }, 60s));
  daemon.offer(*w, sample_round(), 60s);
  daemon.offer(*silent, sample_round(), 60s);
  ASSERT_TRUE(daemon.run_until([&] { return w->link.state() == LinkState::kJoined; }, 60s));
  EXPECT_EQ(silent->link.state(), LinkState::kUnknown);
  EXPECT_FALSE(silent->link.offered().has_value())
      << "a worker that said no hello is offered nothing";
  EXPECT_FALSE(silent->exit.has_value());
  // It keeps today's path: the signal ends it, and its channel then ends too.
  daemon.spawner().stop(now(), silent->id);
  ASSERT_TRUE(daemon.run_until([&] { return silent->link.state() == LinkState::kGone; }, 30s));
  ASSERT_TRUE(daemon.run_until([&] { return silent->exit.has_value(); }, 30s));
  EXPECT_EQ(silent->exit->describe(), "killed by signal 15 (SIGTERM)");
  EXPECT_EQ(w->link.state(), LinkState::kJoined);
  EXPECT_FALSE(w->exit.has_value());
}

TEST(WorkerChannelIntegTest, AWorkerThatDoesNotReadNeverBlocksTheDaemon) {
  TempDir dir;
  Daemon daemon(dir);
  Daemon::Worker* silent = daemon.start(daemon.spec("deaf", {"/bin/sh", "-c", "exec sleep 1000"}));
  ASSERT_NE(silent, nullptr);
  const DaemonMessage big(Stop{std::string(4000, 'r')});
  const std::size_t at_most = WorkerEndpoint::kMaxPending / 4000 + 4096;  // + the socket's buffer
  Status sent = ok_status();
  std::size_t count = 0;
  while (sent.ok() && count < at_most) {
    sent = silent->endpoint.send(big);
    ++count;
  }
  ASSERT_FALSE(sent.ok()) << count << " messages were all taken";
  EXPECT_NE(sent.error().message.find("worker deaf's channel: the worker does not read it"),
            std::string::npos)
      << sent.error().message;
  EXPECT_TRUE(silent->endpoint.wants_write());
  EXPECT_OK(silent->endpoint.flush());  // still nothing blocks
  daemon.spawner().kill(silent->id);
  ASSERT_TRUE(daemon.run_until([&] { return silent->link.state() == LinkState::kGone; }, 30s));
}

TEST(WorkerChannelIntegTest, AWorkerThatSendsGarbageIsTreatedAsPlainAndNotKilled) {
  TempDir dir;
  Daemon daemon(dir);
  // A frame of 3 bytes that are not JSON, then a well-formed hello that comes too late.
  const std::string not_json =
      R"(printf '\000\000\000\003abc' >&4; )"
      R"(printf '\000\000\000\050{"type":"hello","version":1,"live":true}' >&4; )"
      "exec sleep 1000";
  Daemon::Worker* w = daemon.start(daemon.spec("junk", {"/bin/sh", "-c", not_json}));
  // A length no frame may have: the rest of the stream is dropped.
  Daemon::Worker* huge = daemon.start(daemon.spec(
      "huge", {"/bin/sh", "-c", R"(printf '\377\377\377\377xyz' >&4; exec sleep 1000)"}));
  ASSERT_NE(w, nullptr);
  ASSERT_NE(huge, nullptr);
  ASSERT_TRUE(daemon.run_until(
      [&] {
        return w->link.state() == LinkState::kPlain && huge->link.state() == LinkState::kPlain &&
               w->transitions.size() >= 2;
      },
      60s))
      << joined_lines(w->transitions) << joined_lines(huge->transitions);
  const std::string bad_frame =
      "bad frame worker junk's channel: The worker's message is not a JSON object.: "
      "unknown->plain (";
  EXPECT_EQ(w->transitions[0].rfind(bad_frame, 0), 0u) << w->transitions[0];
  EXPECT_NE(w->transitions[1].find("hello(live) version 1: ignored in plain"), std::string::npos)
      << w->transitions[1];
  EXPECT_NE(huge->transitions[0].find("worker huge's channel: a frame announces 4294967295 bytes"),
            std::string::npos)
      << huge->transitions[0];
  EXPECT_FALSE(w->exit.has_value());
  EXPECT_FALSE(huge->exit.has_value());
  EXPECT_TRUE(daemon.spawner().pid(w->id).has_value());
  // End of file is still seen after a stream that could not be decoded.
  daemon.spawner().kill(huge->id);
  ASSERT_TRUE(daemon.run_until([&] { return huge->link.state() == LinkState::kGone; }, 30s));
  daemon.spawner().kill(w->id);
  ASSERT_TRUE(daemon.run_until([&] { return w->link.state() == LinkState::kGone; }, 30s));
}

TEST(WorkerChannelIntegTest, OnlyAWorkerThatAskedForAChannelGetsTheDescriptorAndTheVariable) {
  TempDir dir;
  Daemon daemon(dir);
  const std::string probe =
      R"(echo "fd=${ELASTIC_WORKER_FD-unset}"; [ -S /proc/self/fd/4 ] && echo "4 is a socket"; )"
      R"([ -p /proc/self/fd/3 ] && echo "3 is a pipe"; [ -e /proc/self/fd/5 ] || echo "no 5")";
  WorkerSpec plain = daemon.spec("plain", {"/bin/sh", "-c", probe});
  plain.channel = false;
  plain.env["ELASTIC_WORKER_FD"] = "9";  // a stale number from the submitter's environment
  auto plain_id = daemon.spawner().start(now(), plain);
  ASSERT_OK(plain_id);
  EXPECT_FALSE(plain_id->channel.valid());

  WorkerSpec both = daemon.spec("both", {"/bin/sh", "-c", probe});
  both.handoff = true;
  Daemon::Worker* w = daemon.start(both);
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(daemon.run_until([&] { return daemon.exits().size() == 2; }, 30s));
  EXPECT_NE(read_file(plain.log_path).find("fd=unset\n"), std::string::npos)
      << read_file(plain.log_path);
  EXPECT_EQ(read_file(plain.log_path).find("4 is a socket"), std::string::npos);
  const std::string log = w->log();
  EXPECT_NE(log.find("fd=4\n4 is a socket\n3 is a pipe\nno 5\n"), std::string::npos) << log;
}

}  // namespace
}  // namespace elastic::worker_channel
