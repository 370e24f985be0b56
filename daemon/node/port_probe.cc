#include "daemon/node/port_probe.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace elastic::node {
namespace {

// 1: bound (free), 0: EADDRINUSE, -1: this family is not available.
int try_bind(int family, std::uint16_t port) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int on = 1;
  const int off = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  int rc = 0;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_any;
    address.sin6_port = htons(port);
    rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  } else {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(port);
    rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  }
  const int error = errno;
  ::close(fd);
  if (rc == 0) return 1;
  return error == EADDRINUSE ? 0 : -1;
}

}  // namespace

bool tcp_port_in_use(std::uint16_t port) {
  // Dual-stack [::] clashes with holders of either family; a host without IPv6 checks IPv4.
  int free = try_bind(AF_INET6, port);
  if (free < 0) free = try_bind(AF_INET, port);
  return free == 0;
}

}  // namespace elastic::node
