// Unit tier, security: control::Server on a real unix socket in a
// TempDir, driven with injected time.
//  - A request dribbled byte by byte is cut off kRequestTimeout after the accept: the bytes do
//    not move the deadline (slowloris); a whole request restarts it.
//  - One uid holds at most kMaxConnectionsPerUid connections; another uid still gets in
//    (a real second uid: root only).
//  - A handler that throws is answered with an error and counted; the server goes on.
//  - Out of descriptors (EMFILE), a waiting client is answered and the loop does not spin.
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/control/protocol.h"
#include "daemon/control/server.h"
#include "tests/support/process.h"
#include "tests/support/sockets.h"
#include "tests/support/temp_dir.h"

namespace elastic::control {
namespace {

using testing::connect_unix;
using ::testing::HasSubstr;
using testing::TempDir;
using namespace std::chrono_literals;

std::string frame(const std::string& body) {
  return frame_header(static_cast<std::uint32_t>(body.size())) + body;
}

// Reads one reply frame's body (blocking up to `timeout`); "" when the peer closed first.
std::string read_reply(int fd, std::chrono::milliseconds timeout = 2s) {
  std::string in;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd item{fd, POLLIN, 0};
    if (::poll(&item, 1, 20) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n <= 0) return "";
    in.append(buffer, static_cast<std::size_t>(n));
    if (in.size() >= 4) {
      const std::uint32_t length =
          read_frame_header(reinterpret_cast<const unsigned char*>(in.data()));
      if (in.size() >= 4 + std::size_t{length}) return in.substr(4, length);
    }
  }
  return "";
}

// True once the server closed `fd` (reads hit end of stream), within a short wait.
bool closed_by_server(int fd) { return testing::read_until_closed(fd, 500ms); }

struct TestServer {
  TempDir dir;
  std::unique_ptr<Server> server;
  TimePoint t0 = TimePoint(std::chrono::hours(1000));

  explicit TestServer(Server::Handler handler = nullptr) {
    if (!handler) {
      handler = [](const Request&, const PeerCredentials&,
                   ReplyHandle) -> std::optional<std::string> { return R"({"ok":true})"; };
    }
    auto opened = Server::open(dir.file("ctl.sock"), std::move(handler));
    EXPECT_TRUE(opened.ok()) << opened.error().message;
    server = std::move(*opened);
  }
  std::string socket() const { return dir.file("ctl.sock"); }
  // process() at t0 + at, after the kernel has had a moment to deliver what was sent.
  void process_at(Duration at) {
    pollfd item{server->fd(), POLLIN, 0};
    ::poll(&item, 1, 20);
    server->process(t0 + at);
  }
};

TEST(ControlServer, ADribbledRequestIsCutOffAtTheDeadlineNotByTheLastByte) {
  TestServer s;
  const int slow = connect_unix(s.socket());
  ASSERT_GE(slow, 0);
  s.process_at(0s);
  ASSERT_EQ(s.server->connection_count(), 1u);
  // A frame promising 100 bytes, one byte per second: every byte arrives well within any idle
  // timer, but the whole request never does.
  const std::string bytes = frame(std::string(100, 'x'));
  for (int second = 0; second < 5; ++second) {
    ASSERT_EQ(::send(slow, &bytes[static_cast<std::size_t>(second)], 1, MSG_NOSIGNAL), 1);
    s.process_at(std::chrono::seconds(second) + 900ms);
    EXPECT_EQ(s.server->connection_count(), 1u) << "closed early, at second " << second;
  }
  ASSERT_EQ(::send(slow, &bytes[5], 1, MSG_NOSIGNAL), 1);
  s.process_at(Server::kRequestTimeout);
  EXPECT_EQ(s.server->connection_count(), 0u);
  EXPECT_TRUE(closed_by_server(slow));
  EXPECT_EQ(s.server->stats().request_timeout, 1u);
  ::close(slow);
}

TEST(ControlServer, AWholeRequestRestartsTheDeadline) {
  TestServer s;
  const int fd = connect_unix(s.socket());
  ASSERT_GE(fd, 0);
  s.process_at(0s);
  const std::string request = frame(R"({"verb":"status"})");
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  s.process_at(4s);
  EXPECT_THAT(read_reply(fd), HasSubstr("\"ok\":true"));
  s.process_at(8s);  // past accept + 5 s, within reply + 5 s
  EXPECT_EQ(s.server->connection_count(), 1u);
  s.process_at(9s);
  EXPECT_EQ(s.server->connection_count(), 0u);
  ::close(fd);
}

TEST(ControlServer, OneUidHoldsAtMostItsShareAndAnotherUidStillGetsIn) {
  TestServer s;
  std::vector<int> mine;
  for (std::size_t i = 0; i < Server::kMaxConnectionsPerUid + 4; ++i) {
    const int fd = connect_unix(s.socket());
    ASSERT_GE(fd, 0);
    mine.push_back(fd);
  }
  s.process_at(0s);
  EXPECT_EQ(s.server->connection_count(), Server::kMaxConnectionsPerUid);
  EXPECT_EQ(s.server->stats().too_many_connections, 4u);
  // A refused connection is told why before it is closed.
  EXPECT_THAT(read_reply(mine.back()), HasSubstr("connections open, the most one user may"));

  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as a second uid";
  ::chmod(s.dir.path().c_str(), 0755);  // our own TempDir: the other uid must reach the socket
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65532) != 0 || ::setuid(65532) != 0) _exit(2);
    const int fd = connect_unix(s.socket());
    if (fd < 0) _exit(3);
    const std::string request = frame(R"({"verb":"status"})");
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) _exit(4);
    _exit(read_reply(fd, 10s).find("\"ok\":true") != std::string::npos ? 0 : 5);
  }
  int status = -1;
  const bool done = testing::wait_until(
      [&] {
        s.process_at(1s);
        return ::waitpid(child, &status, WNOHANG) == child;
      },
      15s);
  ASSERT_TRUE(done);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  for (const int fd : mine) ::close(fd);
}

TEST(ControlServer, AHandlerThatThrowsIsAnsweredAndCounted) {
  TestServer s([](const Request& request, const PeerCredentials&,
                  ReplyHandle) -> std::optional<std::string> {
    if (request.verb == "boom") throw std::runtime_error("[json.exception.type_error.302]");
    return R"({"ok":true})";
  });
  const int bad = connect_unix(s.socket());
  ASSERT_GE(bad, 0);
  const std::string boom = frame(R"({"verb":"boom"})");
  ASSERT_GT(::send(bad, boom.data(), boom.size(), MSG_NOSIGNAL), 0);
  s.process_at(0s);
  s.process_at(10ms);
  EXPECT_EQ(read_reply(bad),
            R"({"error":"The daemon could not serve this \"boom\" request (an internal error, )"
            R"(logged).","ok":false})");
  EXPECT_EQ(s.server->stats().handler_errors, 1u);
  // The same connection and others are served on.
  const std::string fine = frame(R"({"verb":"status"})");
  ASSERT_GT(::send(bad, fine.data(), fine.size(), MSG_NOSIGNAL), 0);
  s.process_at(20ms);
  EXPECT_THAT(read_reply(bad), HasSubstr("\"ok\":true"));
  ::close(bad);
}

TEST(ControlServer, OutOfDescriptorsTheWaitingClientIsAnsweredAndTheLoopDoesNotSpin) {
  TestServer s;
  int ready[2];
  int result[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(result), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    // The server's process: fill the descriptor table, then serve for 1.5 s and count how
    // often the loop woke up.
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = 256;
    ::setrlimit(RLIMIT_NOFILE, &limit);
    while (::dup(s.server->fd()) >= 0) {
    }
    if (errno != EMFILE) _exit(2);
    if (::write(ready[1], "r", 1) != 1) _exit(3);
    std::uint64_t wakeups = 0;
    const auto end = std::chrono::steady_clock::now() + 1500ms;
    while (std::chrono::steady_clock::now() < end) {
      pollfd item{s.server->fd(), POLLIN, 0};
      const TimePoint now = TimePoint(std::chrono::steady_clock::now().time_since_epoch());
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::min(s.server->next_deadline(), now + 100ms) - now);
      if (::poll(&item, 1, static_cast<int>(std::max<std::int64_t>(wait.count(), 0))) > 0) {
        ++wakeups;
      }
      s.server->process(TimePoint(std::chrono::steady_clock::now().time_since_epoch()));
    }
    const std::uint64_t report[2] = {wakeups, s.server->stats().accept_errors};
    _exit(::write(result[1], report, sizeof(report)) == sizeof(report) ? 0 : 4);
  }
  ::close(ready[1]);
  ::close(result[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  const int fd = connect_unix(s.socket());
  ASSERT_GE(fd, 0);
  const std::string request = frame(R"({"verb":"status"})");
  (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  EXPECT_THAT(read_reply(fd, 3s), HasSubstr("out of file descriptors"));
  ::close(fd);
  std::uint64_t report[2] = {0, 0};
  EXPECT_EQ(::read(result[0], report, sizeof(report)), static_cast<ssize_t>(sizeof(report)));
  int status = -1;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_GE(report[1], 1u) << "accept() never failed: the descriptor table was not full";
  EXPECT_LT(report[0], 50u) << "the loop woke " << report[0] << " times in 1.5 s: it spins";
  ::close(ready[0]);
  ::close(result[0]);
}

}  // namespace
}  // namespace elastic::control
