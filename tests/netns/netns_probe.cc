// netns_probe: a tiny network client/server for the namespace harness's own tests (so they need
// no ping or netcat package).
//
//   netns_probe serve IP PORT                 UDP echo + TCP accept on IP:PORT; prints "ready"
//   netns_probe ping IP PORT COUNT WAIT_MS    COUNT UDP round trips, one at a time, each waiting
//                                             at most WAIT_MS; prints "replies R of COUNT"
//   netns_probe connect IP PORT WAIT_MS       one TCP connect; exit 0 if it succeeded, 1 if not
//
// Exit 2 on bad usage or a failed socket call (message on stderr).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "netns_probe: %s: %s\n", what, std::strerror(errno));
  return 2;
}

sockaddr_in address(const char* ip, const char* port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(port)));
  if (::inet_pton(AF_INET, ip, &addr.sin_addr) != 1) {
    std::fprintf(stderr, "netns_probe: bad IPv4 address %s\n", ip);
    std::exit(2);
  }
  return addr;
}

int serve(const sockaddr_in& addr) {
  const int udp = ::socket(AF_INET, SOCK_DGRAM, 0);
  const int tcp = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (udp < 0 || tcp < 0) return fail("socket");
  if (::bind(udp, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return fail("bind");
  if (::bind(tcp, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return fail("bind");
  if (::listen(tcp, 64) != 0) return fail("listen");
  std::printf("ready\n");
  std::fflush(stdout);
  pollfd fds[2] = {{udp, POLLIN, 0}, {tcp, POLLIN, 0}};
  while (true) {
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return fail("poll");
    if (fds[0].revents & POLLIN) {
      char buffer[512];
      sockaddr_in from{};
      socklen_t from_len = sizeof from;
      const ssize_t got =
          ::recvfrom(udp, buffer, sizeof buffer, 0, reinterpret_cast<sockaddr*>(&from), &from_len);
      if (got > 0) {
        ::sendto(udp, buffer, static_cast<size_t>(got), 0, reinterpret_cast<sockaddr*>(&from),
                 from_len);
      }
    }
    if (fds[1].revents & POLLIN) {
      const int conn = ::accept(tcp, nullptr, nullptr);
      if (conn >= 0) ::close(conn);
    }
  }
}

int ping(const sockaddr_in& addr, int count, int wait_ms) {
  const int udp = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (udp < 0) return fail("socket");
  int replies = 0;
  for (std::uint32_t seq = 0; seq < static_cast<std::uint32_t>(count); ++seq) {
    // A send can fail with ENETUNREACH or EPERM when a route or filter refuses it: a loss.
    if (::sendto(udp, &seq, sizeof seq, 0, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) !=
        sizeof seq) {
      continue;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) break;
      pollfd fd{udp, POLLIN, 0};
      if (::poll(&fd, 1, static_cast<int>(left)) <= 0) break;
      std::uint32_t echoed = 0;
      if (::recv(udp, &echoed, sizeof echoed, 0) == sizeof echoed && echoed == seq) {
        ++replies;
        break;
      }  // a late echo of an earlier probe: keep waiting for this one
    }
  }
  std::printf("replies %d of %d\n", replies, count);
  return 0;
}

int connect_once(const sockaddr_in& addr, int wait_ms) {
  const int tcp = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (tcp < 0) return fail("socket");
  if (::connect(tcp, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return 0;
  if (errno != EINPROGRESS) {
    std::printf("connect: %s\n", std::strerror(errno));
    return 1;
  }
  pollfd fd{tcp, POLLOUT, 0};
  if (::poll(&fd, 1, wait_ms) <= 0) {
    std::printf("connect: timed out\n");
    return 1;
  }
  int error = 0;
  socklen_t len = sizeof error;
  ::getsockopt(tcp, SOL_SOCKET, SO_ERROR, &error, &len);
  if (error != 0) {
    std::printf("connect: %s\n", std::strerror(error));
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string verb = argc > 1 ? argv[1] : "";
  if (verb == "serve" && argc == 4) return serve(address(argv[2], argv[3]));
  if (verb == "ping" && argc == 6) {
    return ping(address(argv[2], argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
  }
  if (verb == "connect" && argc == 5)
    return connect_once(address(argv[2], argv[3]), std::atoi(argv[4]));
  std::fprintf(stderr,
               "usage: netns_probe serve IP PORT | ping IP PORT COUNT WAIT_MS | "
               "connect IP PORT WAIT_MS\n");
  return 2;
}
