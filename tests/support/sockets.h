// Raw client sockets for tests that talk to a daemon byte by byte (hostile frames, half
// frames, many connections): AF_UNIX to a control socket, TCP to 127.0.0.1. Header-only.
#pragma once

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
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

// A TCP connection to 127.0.0.1:port from `source` (any of 127.0.0.0/8 is local, so a test
// can play many hosts) whose blocking sends and receives give up after `timeout`, or -1 when
// it cannot be made.
inline int connect_loopback_from(int port, const char* source,
                                 std::chrono::seconds timeout = std::chrono::seconds(5)) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval limit{.tv_sec = static_cast<time_t>(timeout.count()), .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::inet_pton(AF_INET, source, &from.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The same from 127.0.0.1.
inline int connect_loopback(int port, std::chrono::seconds timeout = std::chrono::seconds(5)) {
  return connect_loopback_from(port, "127.0.0.1", timeout);
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

// Sends `body` as one control frame (4-byte big-endian length, then the bytes) on the unix
// socket at `path` from a child process running as uid/gid (root only), and returns the body of
// the one reply frame; "" when none came within `timeout` (the daemon closed or went away).
inline std::string framed_request_as(uid_t uid, gid_t gid, const std::string& path,
                                     const std::string& body, std::chrono::seconds timeout) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) ::_exit(2);
    const int fd = connect_unix(path);
    if (fd < 0) ::_exit(3);
    const std::uint32_t length = htonl(static_cast<std::uint32_t>(body.size()));
    std::string frame(reinterpret_cast<const char*>(&length), 4);
    frame += body;
    if (::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) < 0) ::_exit(4);
    timeval limit{.tv_sec = static_cast<time_t>(timeout.count()), .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    char buffer[65536];
    ssize_t n;
    while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
      if (::write(pipe_fds[1], buffer, static_cast<std::size_t>(n)) != n) ::_exit(5);
    }
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string reply;
  char buffer[65536];
  ssize_t n;
  // Reads until the child exits: a reply frame is complete once its length is in.
  while ((n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0) {
    reply.append(buffer, static_cast<std::size_t>(n));
    if (reply.size() >= 4) {
      std::uint32_t length = 0;
      std::memcpy(&length, reply.data(), 4);
      if (reply.size() >= 4 + std::size_t{ntohl(length)}) break;
    }
  }
  ::close(pipe_fds[0]);
  ::kill(child, SIGKILL);  // our own child: it may still wait for the daemon to close
  int status = 0;
  ::waitpid(child, &status, 0);
  if (reply.size() < 4) return "";
  std::uint32_t length = 0;
  std::memcpy(&length, reply.data(), 4);
  return reply.substr(4, ntohl(length));
}

}  // namespace elastic::testing
