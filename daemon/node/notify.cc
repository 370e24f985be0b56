#include "daemon/node/notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace elastic::node {

Notifier Notifier::from_environment() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  std::string path = socket != nullptr ? socket : "";
  std::optional<std::chrono::microseconds> watchdog;
  const char* usec = std::getenv("WATCHDOG_USEC");
  const char* pid = std::getenv("WATCHDOG_PID");
  // WATCHDOG_PID names the process the watchdog is meant for; a forked helper must not act on
  // its parent's setting.
  const bool ours = pid == nullptr || std::strtoll(pid, nullptr, 10) == ::getpid();
  if (usec != nullptr && ours) {
    char* end = nullptr;
    const long long value = std::strtoll(usec, &end, 10);
    if (end != usec && *end == '\0' && value > 0) watchdog = std::chrono::microseconds(value);
  }
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
  return Notifier(std::move(path), watchdog);
}

Notifier::Notifier(std::string socket_path, std::optional<std::chrono::microseconds> watchdog)
    : socket_path_(std::move(socket_path)), watchdog_(watchdog) {}

Status Notifier::send(std::string_view state) const {
  if (socket_path_.empty()) return ok_status();
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // "@name" is the abstract namespace: a leading NUL byte and no terminator.
  const bool abstract = socket_path_.front() == '@';
  if ((socket_path_.front() != '/' && !abstract) ||
      socket_path_.size() >= sizeof(address.sun_path)) {
    return Error{"NOTIFY_SOCKET=" + socket_path_ +
                 " is neither an absolute path nor an abstract socket name (@...) that fits."};
  }
  std::memcpy(address.sun_path, socket_path_.data(), socket_path_.size());
  if (abstract) address.sun_path[0] = '\0';
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path_.size() +
                                             (abstract ? 0 : 1));
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return Error{std::string("Cannot create a socket to notify systemd: ") + std::strerror(errno) +
                 "."};
  }
  const ssize_t sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                                reinterpret_cast<const sockaddr*>(&address), length);
  const int error = errno;
  ::close(fd);
  if (sent < 0) {
    return Error{"Cannot notify systemd through " + socket_path_ + ": " + std::strerror(error) +
                 "."};
  }
  return ok_status();
}

Status Notifier::reloading() const {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const long long usec = static_cast<long long>(now.tv_sec) * 1'000'000 + now.tv_nsec / 1'000;
  return send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

Status Notifier::status(const std::string& text) {
  std::string line = text;
  std::replace(line.begin(), line.end(), '\n', ' ');
  if (line == last_status_) return ok_status();
  last_status_ = line;
  return send("STATUS=" + line);
}

std::optional<std::chrono::microseconds> Notifier::watchdog_interval() const {
  if (!watchdog_) return std::nullopt;
  return std::max(std::chrono::microseconds(1000), *watchdog_ / 2);
}

}  // namespace elastic::node
