// InboundConnections: how many connections each peer address holds open on the transport's
// ROUTER, so one address cannot take every file descriptor of the daemon (a flood of TCP
// connects that never finish a handshake).
//
// The transport feeds it from its ROUTER's socket monitor (ZMQ_EVENT_ACCEPTED and
// ZMQ_EVENT_DISCONNECTED carry the connection's fd): accepted() admits a connection or says it
// is over max_per_address, and the transport then shuts that fd down (libzmq sees the close and
// reports its DISCONNECTED). A daemon dials each peer once, so a handful per address is normal.
//
// Addresses are accounting keys, not exact peers (address_key()): every loopback address
// (127.0.0.0/8, ::1) is one key, because any local user can bind any of 127.x.y.z; an IPv6
// peer's /64 is one key, because one host usually owns a whole /64; IPv4-mapped IPv6 is IPv4.
//
// Events arrive in order, but an fd may be reused by a later connection before its event is
// read; accepted() for an fd still counted replaces the stale entry, so counts never leak.
//
// Thread safety: none; owned by the transport's thread. Errors: none (pure bookkeeping).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <map>
#include <string>

namespace elastic::transport {

class InboundConnections {
 public:
  explicit InboundConnections(int max_per_address) : max_per_address_(max_per_address) {}

  // A connection accepted on `fd` from `address`: true and counted when the address holds fewer
  // than max_per_address; false (not counted) otherwise.
  bool accepted(int fd, const std::string& address);
  // The connection on `fd` closed; unknown fds are ignored (refused ones were never counted).
  void disconnected(int fd);

  std::size_t open() const { return by_fd_.size(); }
  std::size_t open_from(const std::string& address) const;

 private:
  int max_per_address_;
  std::map<int, std::string> by_fd_;
  std::map<std::string, int> per_address_;
};

// The accounting key of a peer address (see the top): "127.0.0.0/8", "10.1.2.3",
// "2001:db8:1:2::/64"; "" for anything but IPv4/IPv6.
std::string address_key(const sockaddr_storage& address, socklen_t length);

// address_key() of the peer of socket `fd`; "" when it is not a connected IP socket (e.g. it
// was closed in the meantime).
std::string peer_address_key(int fd);

// The local port of socket `fd`; -1 when it has none.
int local_port(int fd);

}  // namespace elastic::transport
