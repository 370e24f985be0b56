#include "daemon/control/client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace elastic::control {

namespace {

using Clock = std::chrono::steady_clock;

// Closes the descriptor on every return path.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd item{fd, events, 0};
    const int ready = ::poll(&item, 1, remaining_ms(deadline));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace

Result<std::string> call(const std::string& socket_path, const Request& request,
                         std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(address.sun_path)) {
    return Error{"The control socket path \"" + socket_path + "\" is empty or too long."};
  }
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);

  FdGuard guard{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (guard.fd < 0) return Error{std::string("Cannot create a unix socket: ") + strerror(errno)};
  if (::connect(guard.fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ECONNREFUSED) {
      return Error{"No elasticd answers on the control socket " + socket_path + " (" +
                   (error == ENOENT ? "the socket does not exist" : "connection refused") +
                   "); is the daemon running, and is control.socket the same for both?"};
    }
    if (error == EACCES || error == EPERM) {
      return Error{"Permission denied connecting to the control socket " + socket_path + "."};
    }
    if (error != EINPROGRESS && error != EAGAIN) {
      return Error{"Cannot connect to the control socket " + socket_path + ": " +
                   std::strerror(error) + "."};
    }
    // A full listen backlog: wait for the daemon to accept.
    if (!wait_for(guard.fd, POLLOUT, deadline)) {
      return Error{"Timed out connecting to the control socket " + socket_path + "."};
    }
  }

  const std::string body = encode_request(request);
  const std::string frame = frame_header(static_cast<std::uint32_t>(body.size())) + body;
  std::size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(guard.fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(guard.fd, POLLOUT, deadline)) {
        return Error{"Timed out sending to the control socket " + socket_path + "."};
      }
    } else {
      return Error{"The daemon at " + socket_path +
                   " closed the connection: " + std::strerror(errno) + "."};
    }
  }

  std::string in;
  std::size_t wanted = 4;
  bool have_header = false;
  char buffer[64 * 1024];
  while (in.size() < wanted) {
    const ssize_t n = ::recv(guard.fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      in.append(buffer, static_cast<std::size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(guard.fd, POLLIN, deadline)) {
        return Error{"Timed out waiting for the daemon's reply on " + socket_path + "."};
      }
    } else {
      return Error{"The daemon at " + socket_path + " closed the connection before replying."};
    }
    if (!have_header && in.size() >= 4) {
      const std::uint32_t length =
          read_frame_header(reinterpret_cast<const unsigned char*>(in.data()));
      if (length > kMaxReplyBytes) {
        return Error{"The daemon at " + socket_path + " sent a reply frame of " +
                     std::to_string(length) + " bytes, above the limit."};
      }
      wanted = 4 + std::size_t{length};
      have_header = true;
    }
  }
  return in.substr(4, wanted - 4);
}

}  // namespace elastic::control
