// The trainer's progress client (trainer/progress.h) against a fake daemon on a real unix
// socket: what it sends, its rate limit, and failing fast without a daemon. Real sockets: the
// integ tier (the incident log it feeds is tested purely in incident_test).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"
#include "trainer/progress.h"

namespace elastic::node {
namespace {

using namespace std::chrono_literals;

// ---- the trainer's progress client -------------------------------------------------------

// A one-connection-at-a-time control socket that records frames and answers `reply`.
class FakeDaemon {
 public:
  FakeDaemon(const std::string& path, std::string reply) : path_(path), reply_(std::move(reply)) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
  }
  ~FakeDaemon() { ::close(fd_); }
  // Serves `n` connections (blocking).
  void serve(int n) {
    for (int k = 0; k < n; ++k) {
      const int c = ::accept(fd_, nullptr, nullptr);
      ASSERT_GE(c, 0);
      unsigned char header[4];
      ASSERT_EQ(::recv(c, header, 4, MSG_WAITALL), 4);
      const std::uint32_t size =
          (header[0] << 24) | (header[1] << 16) | (header[2] << 8) | header[3];
      std::string body(size, '\0');
      ASSERT_EQ(::recv(c, body.data(), size, MSG_WAITALL), static_cast<ssize_t>(size));
      frames.push_back(body);
      const auto n_reply = static_cast<std::uint32_t>(reply_.size());
      std::string out = {static_cast<char>(n_reply >> 24), static_cast<char>(n_reply >> 16),
                         static_cast<char>(n_reply >> 8), static_cast<char>(n_reply)};
      out += reply_;
      ASSERT_EQ(::send(c, out.data(), out.size(), MSG_NOSIGNAL), static_cast<ssize_t>(out.size()));
      ::close(c);
    }
  }
  std::vector<std::string> frames;

 private:
  std::string path_;
  std::string reply_;
  int fd_ = -1;
};

TEST(ProgressReporter, SendsTheFirstStepEveryCheckpointAndRateLimitsSteps) {
  elastic::testing::TempDir dir;
  const std::string socket = dir.file("ctl.sock");
  FakeDaemon daemon(socket, R"({"ok":true})");
  trainer::ProgressReporter reporter({{"ELASTIC_CONTROL_SOCKET", socket},
                                      {"ELASTIC_JOB_ID", "j-1"},
                                      {"ELASTIC_ROUND", "4"},
                                      {"RANK", "0"}},
                                     std::chrono::hours(1));
  ASSERT_TRUE(reporter.enabled());
  std::thread server([&] { daemon.serve(2); });
  reporter.step(121, 120, 3872, 0.5);
  reporter.step(122, 120, 3904);  // within the step interval of the first: not sent
  reporter.checkpoint(130);
  server.join();
  ASSERT_EQ(daemon.frames.size(), 2u);
  const auto first = nlohmann::json::parse(daemon.frames[0]);
  EXPECT_EQ(first, nlohmann::json({{"verb", "progress"},
                                   {"job", "j-1"},
                                   {"round", 4},
                                   {"rank", 0},
                                   {"event", "step"},
                                   {"step", 121},
                                   {"resumed_from", 120},
                                   {"first", true},
                                   {"samples", 3872},
                                   {"loss", 0.5}}));
  const auto checkpoint = nlohmann::json::parse(daemon.frames[1]);
  EXPECT_EQ(checkpoint["event"], "checkpoint");
  EXPECT_EQ(checkpoint["step"], 130);
}

TEST(ProgressReporter, WithoutADaemonItIsOffOrFailsFast) {
  trainer::ProgressReporter off(std::map<std::string, std::string>{{"RANK", "0"}});
  EXPECT_FALSE(off.enabled());
  off.step(1, -1);  // nothing to do, no crash
  elastic::testing::TempDir dir;
  trainer::ProgressReporter nobody(
      {{"ELASTIC_CONTROL_SOCKET", dir.file("none.sock")}, {"ELASTIC_JOB_ID", "j\"1"}});
  EXPECT_NE(nobody.frame_json("step", 1, -1, true).find(R"("job":"j\"1")"), std::string::npos);
  // A sample count is sent only when counted.
  EXPECT_EQ(nobody.frame_json("step", 1, -1, true).find("samples"), std::string::npos);
  // A loss only when finite.
  EXPECT_EQ(nobody.frame_json("step", 1, -1, true, 5, std::nan("")).find("loss"),
            std::string::npos);
  const auto begin = std::chrono::steady_clock::now();
  nobody.step(1, -1);
  nobody.checkpoint(1);  // paused after the failure: not even tried
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1s);
}

}  // namespace
}  // namespace elastic::node
