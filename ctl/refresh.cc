#include "ctl/refresh.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "daemon/core/duration.h"

namespace elastic::ctl {
namespace {

using std::chrono::milliseconds;

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
// The write end is what the handlers use; -1 while no StopSignals exists.
int signal_pipe[2] = {-1, -1};

extern "C" void on_signal(int signal) {
  const int saved = errno;
  const char byte = static_cast<char>(signal);
  // Full pipe: a byte is already waiting to wake the loop, and the flag it carries is set.
  [[maybe_unused]] const ssize_t n = ::write(signal_pipe[1], &byte, 1);
  errno = saved;
}

bool plain_seconds(std::string_view text) {
  if (text.empty() || text.front() == '.' || text.back() == '.') return false;
  return std::count(text.begin(), text.end(), '.') <= 1 &&
         std::all_of(text.begin(), text.end(),
                     [](char c) { return c == '.' || (c >= '0' && c <= '9'); });
}

}  // namespace

Result<milliseconds> parse_interval(std::string_view text) {
  const std::string shown = "\"" + std::string(text) + "\"";
  auto parsed = parse_duration(plain_seconds(text) ? std::string(text) + "s" : std::string(text));
  if (!parsed.ok()) {
    return Error{shown + " is not an interval: give seconds (2, 0.5) or a duration (500ms, 1m)"};
  }
  if (*parsed < kMinRefresh) {
    return Error{shown + " is too short an interval: at least " + format_duration(kMinRefresh)};
  }
  if (*parsed > kMaxRefresh) {
    return Error{shown + " is too long an interval: at most " + format_duration(kMaxRefresh)};
  }
  return std::chrono::duration_cast<milliseconds>(*parsed);
}

void add_interval_option(CLI::App* command, std::string& text) {
  command
      ->add_option("--interval", text,
                   "Refresh every SECONDS (2, 0.5) or duration (500ms, 1m); default 2s, at least "
                   "100ms")
      ->type_name("SECONDS")
      ->check(CLI::Validator(
          [](std::string& value) {
            auto parsed = parse_interval(value);
            return parsed.ok() ? std::string() : parsed.error().message;
          },
          "", "interval"));
}

StopSignals::StopSignals(bool resize) : resize_(resize) {
  if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("elasticctl: pipe2");
    std::abort();
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  // No SA_RESTART: a blocking call returns EINTR and the loop looks at the pipe sooner.
  action.sa_flags = 0;
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    ::sigaction(kStopSignals[i], &action, &previous_[i]);
  }
  if (resize_) ::sigaction(SIGWINCH, &action, &previous_[3]);
}

StopSignals::~StopSignals() {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    ::sigaction(kStopSignals[i], &previous_[i], nullptr);
  }
  if (resize_) ::sigaction(SIGWINCH, &previous_[3], nullptr);
  ::close(signal_pipe[0]);
  ::close(signal_pipe[1]);
  signal_pipe[0] = signal_pipe[1] = -1;
}

StopSignals::Wake StopSignals::wait(milliseconds timeout, int input) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!stopped_) {
    pollfd fds[2] = {{signal_pipe[0], POLLIN, 0}, {input, POLLIN, 0}};
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    const int ready =
        ::poll(fds, input >= 0 ? 2 : 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    if (ready < 0 && errno != EINTR) return Wake::kTimeout;  // nothing to wait on: refresh
    bool resized = false;
    if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
      char signals[64];
      ssize_t n;
      while ((n = ::read(signal_pipe[0], signals, sizeof(signals))) > 0) {
        for (ssize_t i = 0; i < n; ++i) {
          if (signals[i] == SIGWINCH) {
            resized = true;
          } else {
            stopped_ = true;
          }
        }
      }
    }
    if (stopped_) break;
    if (resized) return Wake::kResize;
    if (ready > 0 && input >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      return Wake::kInput;
    }
    if (ready == 0) return Wake::kTimeout;
  }
  return Wake::kStop;
}

}  // namespace elastic::ctl
