#include "daemon/transport/inbound_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

namespace elastic::transport {

bool InboundConnections::accepted(int fd, const std::string& address) {
  disconnected(fd);  // a stale entry: that connection's DISCONNECTED was never seen
  int& count = per_address_[address];
  if (count >= max_per_address_) {
    if (count == 0) per_address_.erase(address);
    return false;
  }
  ++count;
  by_fd_[fd] = address;
  return true;
}

void InboundConnections::disconnected(int fd) {
  const auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  const auto count = per_address_.find(it->second);
  if (count != per_address_.end() && --count->second <= 0) per_address_.erase(count);
  by_fd_.erase(it);
}

std::size_t InboundConnections::open_from(const std::string& address) const {
  const auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : static_cast<std::size_t>(it->second);
}

namespace {

std::string ipv4_key(const in_addr& address) {
  if ((ntohl(address.s_addr) >> 24) == 127) return "127.0.0.0/8";
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &address, text, sizeof(text));
  return text;
}

}  // namespace

std::string address_key(const sockaddr_storage& address, socklen_t length) {
  if (address.ss_family == AF_INET && length >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    return ipv4_key(reinterpret_cast<const sockaddr_in&>(address).sin_addr);
  }
  if (address.ss_family != AF_INET6 || length < static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    return "";
  }
  const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&v6)) {
    in_addr v4{};
    std::memcpy(&v4, &v6.s6_addr[12], sizeof(v4));
    return ipv4_key(v4);
  }
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return "127.0.0.0/8";
  in6_addr prefix{};
  std::memcpy(&prefix, &v6, 8);  // the /64
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, &prefix, text, sizeof(text));
  return std::string(text) + "/64";
}

std::string peer_address_key(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  return address_key(address, length);
}

int local_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -1;
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  }
  return -1;
}

}  // namespace elastic::transport
