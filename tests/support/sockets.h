// Raw client sockets for tests that talk to a daemon byte by byte (hostile frames, half
// frames, many connections): AF_UNIX to a control socket, TCP to 127.0.0.1. Header-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

namespace elastic::testing {

// A connected descriptor, or -1 when nothing listens at `path`.
inline int connect_unix(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A TCP connection to 127.0.0.1:port whose blocking sends and receives give up after
// `timeout`, or -1 when it cannot be made.
inline int connect_loopback(int port, std::chrono::seconds timeout = std::chrono::seconds(5)) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval limit{.tv_sec = static_cast<time_t>(timeout.count()), .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads (and drops) whatever the peer sends until it closes the connection (true: end of
// stream or a reset) or `timeout` passes (false).
inline bool read_until_closed(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd item{fd, POLLIN, 0};
    if (::poll(&item, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0 || errno == ECONNRESET) return true;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  return false;
}

// Writes `bytes` to 127.0.0.1:port and waits up to `timeout` for the server to close the
// connection; true if it did.
inline bool send_and_wait_closed(int port, const std::string& bytes,
                                 std::chrono::milliseconds timeout) {
  const int fd = connect_loopback(port);
  if (fd < 0) return false;
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  const bool closed = read_until_closed(fd, timeout);
  ::close(fd);
  return closed;
}

}  // namespace elastic::testing
