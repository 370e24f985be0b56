// Integration tier for elasticctl's live views against a real elasticd on 127.0.0.1
// (daemon_under_test.h) with a submitted job:
//   - `top` on a pseudo-terminal (openpty; the test holds both ends, so it reads the terminal's
//     settings while the view runs and after it ended): it shows the node and the job, answers
//     keys (an unknown one gets its message, j re-sorts the jobs), quits on q and on Ctrl-C
//     with exit 0, and leaves the terminal's settings and screen as it found them; without a
//     daemon it exits 69 before touching the terminal;
//   - `top` into a pipe prints one frame without escapes;
//   - `jobs --watch` prints refresh after refresh until SIGINT, then exits 0;
//   - bad --interval values and --interval without --watch: exit 64, one sentence each.
// Nothing sleeps a fixed time: every expectation polls with a deadline.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr auto kLeader = std::chrono::seconds(20);
constexpr auto kView = std::chrono::seconds(15);

std::vector<std::string> ctl_argv(const std::string& socket, std::vector<std::string> args) {
  std::vector<std::string> argv = {ELASTICCTL_PATH, "-c", "", "--set", "control.socket=" + socket};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// A program on a new pseudo-terminal as its controlling terminal (120x40), as in an ssh
// session. The test keeps the terminal's slave end open too, so its settings stay readable
// after the program exits.
class OnTerminal {
 public:
  explicit OnTerminal(const std::vector<std::string>& argv) {
    winsize size{};
    size.ws_row = 40;
    size.ws_col = 120;
    if (::openpty(&master_, &slave_, nullptr, nullptr, &size) != 0) {
      ADD_FAILURE() << "openpty: " << std::strerror(errno);
      return;
    }
    ::tcgetattr(slave_, &before_);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setsid();
      ::ioctl(slave_, TIOCSCTTY, 0);
      ::dup2(slave_, STDIN_FILENO);
      ::dup2(slave_, STDOUT_FILENO);
      ::dup2(slave_, STDERR_FILENO);
      ::close(master_);
      if (slave_ > STDERR_FILENO) ::close(slave_);
      std::vector<char*> args;
      for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::fcntl(master_, F_SETFL, ::fcntl(master_, F_GETFL) | O_NONBLOCK);
  }
  ~OnTerminal() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) ::close(master_);
    if (slave_ >= 0) ::close(slave_);
  }
  OnTerminal(const OnTerminal&) = delete;
  OnTerminal& operator=(const OnTerminal&) = delete;

  // Everything the program wrote so far (read on demand, so it never blocks on a full pty).
  const std::string& output() {
    char buffer[65536];
    ssize_t n;
    while ((n = ::read(master_, buffer, sizeof(buffer))) > 0) {
      output_.append(buffer, static_cast<std::size_t>(n));
    }
    return output_;
  }
  // True once `text` appears in what was written after byte `from`.
  bool shows(const std::string& text, std::size_t from = 0) {
    return wait_until([&] { return output().find(text, from) != std::string::npos; }, kView);
  }
  // Types `keys` as a user would (Ctrl-C as "\x03" becomes SIGINT through the terminal).
  void type(const std::string& keys) {
    ASSERT_EQ(::write(master_, keys.data(), keys.size()), static_cast<ssize_t>(keys.size()));
  }
  std::optional<ExitStatus> wait_exit() {
    wait_until(
        [&] {
          output();
          int status = 0;
          if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
          ExitStatus exit;
          if (WIFEXITED(status)) exit.code = WEXITSTATUS(status);
          if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
          status_ = exit;
          return true;
        },
        kView);
    output();
    return status_;
  }
  termios settings() const {
    termios now{};
    ::tcgetattr(slave_, &now);
    return now;
  }
  const termios& settings_before() const { return before_; }

 private:
  int master_ = -1;
  int slave_ = -1;
  pid_t pid_ = -1;
  termios before_{};
  std::string output_;
  std::optional<ExitStatus> status_;
};

void expect_same_settings(const termios& now, const termios& before) {
  EXPECT_EQ(now.c_lflag, before.c_lflag);
  EXPECT_EQ(now.c_iflag, before.c_iflag);
  EXPECT_EQ(now.c_oflag, before.c_oflag);
  EXPECT_EQ(now.c_cc[VMIN], before.c_cc[VMIN]);
  EXPECT_EQ(now.c_cc[VSUSP], before.c_cc[VSUSP]);
}

// `top` ended (after `how`: "q", "Ctrl-C") with exit 0, its screen and terminal restored.
void expect_ended_restored(OnTerminal& top, const std::string& how) {
  const auto status = top.wait_exit();
  ASSERT_TRUE(status.has_value()) << "top did not end on " << how << ":\n" << top.output();
  EXPECT_TRUE(status->exited_with(0)) << top.output();
  EXPECT_THAT(top.output(), ::testing::EndsWith("\x1b[?25h\x1b[?1049l"));
  expect_same_settings(top.settings(), top.settings_before());
}

class LiveViews : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_, "n1", std::vector<std::string>{});
    daemon_->start();
    ASSERT_TRUE(wait_until([&] { return elasticctl_on(*daemon_, {"jobs"}).status.exited_with(0); },
                           kLeader))
        << daemon_->process().err();
    // Pending on a one-daemon cluster (it needs two nodes): no worker ever starts.
    const std::string job_file = dir_.write("watched.toml",
                                            "name = \"watched\"\n"
                                            "command = [\"/bin/sleep\", \"600\"]\n"
                                            "nodes = \"2\"\n"
                                            "workers_per_node = 1\n");
    const RunResult submitted = elasticctl_on(*daemon_, {"submit", job_file});
    ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
    ASSERT_EQ(submitted.out, "submitted watched-1\n");
  }

  std::string socket() const { return daemon_->socket(); }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(LiveViews, TopShowsTheNodeAndTheJobTakesKeysAndQuitsOnQ) {
  OnTerminal top(ctl_argv(socket(), {"top", "--interval", "0.2"}));
  ASSERT_TRUE(top.shows("n1 (self)  alive")) << top.output();
  ASSERT_TRUE(top.shows("watched-1  pending")) << top.output();
  EXPECT_THAT(top.output(), HasSubstr("\x1b[?1049h"));  // the alternate screen
  EXPECT_EQ(top.settings().c_lflag & (ICANON | ECHO), 0u);

  // Refreshes come by themselves: a later frame shows the job again.
  const std::size_t seen = top.output().size();
  EXPECT_TRUE(top.shows("watched-1  pending", seen)) << top.output().substr(seen);

  std::size_t mark = top.output().size();
  top.type("x");
  EXPECT_TRUE(top.shows("unknown key x (keys: q quit", mark)) << top.output().substr(mark);
  mark = top.output().size();
  top.type("j");
  EXPECT_TRUE(top.shows("JOBS (1)  sorted by STATE, ascending", mark)) << top.output().substr(mark);

  top.type("q");
  expect_ended_restored(top, "q");
}

TEST_F(LiveViews, CtrlCEndsTopWithItsTerminalRestored) {
  OnTerminal top(ctl_argv(socket(), {"top"}));
  ASSERT_TRUE(top.shows("watched-1  pending")) << top.output();
  top.type("\x03");
  expect_ended_restored(top, "Ctrl-C");
}

TEST_F(LiveViews, TopIntoAPipePrintsOneFrame) {
  const RunResult r = elasticctl_on(*daemon_, {"top"});
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nn1 (self)  alive  leader"));
  EXPECT_THAT(r.out, HasSubstr("\nwatched-1  pending"));
  EXPECT_THAT(r.out, HasSubstr("\nkeys: q quit"));
  EXPECT_THAT(r.out, Not(HasSubstr("\x1b")));
}

TEST_F(LiveViews, JobsWatchRefreshesUntilSigint) {
  Process watch(ctl_argv(socket(), {"jobs", "--watch", "--interval", "0.2"}), {}, dir_.path(),
                "watch");
  const auto refreshes = [&] {
    const std::string out = watch.out();
    std::size_t count = 0;
    for (std::size_t at = out.find("every 200ms: elasticctl jobs"); at != std::string::npos;
         at = out.find("every 200ms: elasticctl jobs", at + 1)) {
      ++count;
    }
    return count;
  };
  ASSERT_TRUE(wait_until([&] { return refreshes() >= 2; }, kView)) << watch.out() << watch.err();
  EXPECT_THAT(watch.out(), HasSubstr("\nwatched-1  pending"));
  watch.signal(SIGINT);
  const auto status = watch.wait(kView);
  ASSERT_TRUE(status.has_value()) << "jobs --watch did not end on SIGINT";
  EXPECT_TRUE(status->exited_with(0)) << watch.err();
  EXPECT_EQ(watch.err(), "");
}

TEST(LiveViewsInput, BadIntervalsAreOneSentenceEach) {
  const TempDir dir;
  const std::string socket = dir.file("nobody.sock");
  const std::string too_short =
      "elasticctl: --interval: \"0\" is too short an interval: at least 100ms\n";
  const std::string not_a_number =
      "elasticctl: --interval: \"abc\" is not an interval: give seconds (2, 0.5) or a duration "
      "(500ms, 1m)\n";
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"top", "--interval", "0"}, too_short},
      {{"top", "--interval", "abc"}, not_a_number},
      {{"jobs", "--watch", "--interval", "0"}, too_short},
      {{"jobs", "--watch", "--interval", "abc"}, not_a_number},
      {{"jobs", "--interval", "2"}, "elasticctl: --interval requires --watch\n"},
  };
  for (const auto& [args, error] : cases) {
    const RunResult r = run(ctl_argv(socket, args), {}, std::chrono::seconds(10));
    EXPECT_TRUE(r.status.exited_with(64)) << args[1];
    EXPECT_EQ(r.err, error + "Run 'elasticctl --help' for usage.\n");
    EXPECT_EQ(r.out, "");
  }
}

TEST(LiveViewsInput, TopWithoutADaemonExits69AndLeavesTheTerminalAlone) {
  const TempDir dir;
  OnTerminal top(ctl_argv(dir.file("nobody.sock"), {"top"}));
  const auto status = top.wait_exit();
  ASSERT_TRUE(status.has_value()) << top.output();
  EXPECT_TRUE(status->exited_with(69)) << top.output();
  EXPECT_THAT(top.output(), HasSubstr("no daemon answers at"));
  EXPECT_THAT(top.output(), Not(HasSubstr("\x1b[")));
  expect_same_settings(top.settings(), top.settings_before());
}

}  // namespace
}  // namespace elastic::testing
