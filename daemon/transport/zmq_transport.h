// ZmqTransport: how envelopes travel between daemons (ZeroMQ ROUTER in, DEALER per peer out).
//
// Sockets (research/membership-anchors.md §4.3):
//  - one ROUTER bound to options.bind (e.g. tcp://0.0.0.0:7946, or tcp://127.0.0.1:* in tests;
//    bound_endpoint() reports the real port). Every inbound envelope arrives here.
//  - one DEALER per peer address, created by the first send() to it, closed by close_idle()
//    after idle_peer_close without sends, so the fd count follows active peers, not N. Its
//    ROUTING_ID is "<name>/<generation>": a restarted daemon never collides with its old self
//    (ROUTER_HANDOVER is the backstop for a reused id). Replies go to the sender's own ROUTER
//    (Envelope::sender_address), never back over the DEALER.
//  - every socket: LINGER 0, bounded SNDHWM/RCVHWM, MAXMSGSIZE, TCP_MAXRT and ZMTP heartbeats;
//    ROUTER_MANDATORY on the ROUTER; DEALERs: IMMEDIATE, reconnect 100 ms backing off to 5 s.
//
// Sends never block. With IMMEDIATE a DEALER only queues to a finished connection, so a fresh
// DEALER would refuse its first messages while TCP connects: those (at most kMaxPendingPerPeer)
// wait in a small per-peer queue that send() and receive() flush, and are dropped and counted
// as send_failures if the peer has not connected within the connect grace (heartbeat_timeout).
// After the first successful send a refused message (peer gone, queue at HWM) fails at once.
//
// Receiving: receive() decodes each inbound envelope with the cluster id, protocol version and
// max_message_bytes; malformed, oversized, wrong-version and wrong-cluster messages are dropped
// and counted by reason. It returns as soon as at least one envelope (or watched fd) is ready,
// or a peer disconnect was recorded (below).
//
// Peer disconnects (job-tier detection): each DEALER has a socket monitor (an inproc PAIR per
// DEALER, polled inside receive() and closed with the DEALER). When the connection of a DEALER
// whose ZMTP handshake had succeeded drops, the peer is recorded as a PeerDisconnect (the name
// the DEALER was created for, its address, the time) for take_disconnects(), and counted in
// TransportStats::disconnects. Why: when a peer's process dies (kill -9, OOM), its kernel
// closes the TCP connection, which shows here within about a millisecond as a FIN or reset;
// keepalive silence takes 600 ms or more. Only connections we dial are watched, so a peer is
// covered while this node sends to it (the job tier probes its peers all the time). The
// handshake, not the bare TCP connect, arms the report, so a peer that keeps refusing us
// (CURVE denial) does not report a disconnect on every retry. ZeroMQ keeps reconnecting; a
// later successful handshake re-arms the report, so a restarted peer that dies again reports
// again. A ZMTP heartbeat timeout also ends a connection and reports. DEALERs closed by
// close_idle() (or replaced because the address now names another node) never report.
// receive() returns as soon as it recorded a disconnect, even with nothing else ready.
//
// CURVE (options.curve set): the ROUTER is a CURVE server with this node's keypair; a ZAP
// handler (inproc://zeromq.zap.01 in this transport's private context, serviced by the owner's
// thread inside receive(), so there is no extra thread) accepts a client only if its public key
// is in the allow-list, and names it by its key file. Each received envelope must claim that
// name as its sender, so an allowed node cannot pose as another. Refused handshakes (ZAP
// denials, and non-CURVE clients via a socket monitor) and spoofed senders count as
// dropped_unauthenticated. A DEALER is a CURVE client with the peer's server key, found by the
// peer's node name in public_keys_dir: send() therefore needs the peer's name when CURVE is on
// (seeds must be configured as name@host:port then); without CURVE the name is optional.
// Because the ZAP handler runs inside receive(), an owner that stops calling receive() stalls
// inbound CURVE handshakes (peers retry); the daemon's loop calls it continuously.
//
// Thread safety: none. One thread (the node's loop) owns the transport and calls everything;
// ZeroMQ sockets must not be shared between threads.
// Errors: open() fails with a sentence on bad options, unreadable keys or a failed bind;
// send() returns an error Status (and counts it) when the message cannot be queued.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/wire/messages.h"

namespace elastic::transport {

struct CurveOptions {
  std::string secret_key_file;  // this node's <name>.key (mode 0600)
  std::string public_keys_dir;  // allow-list: <node name>.pub for every node of the cluster
};

struct TransportOptions {
  std::string bind = "tcp://127.0.0.1:*";
  // Endpoint stamped as sender_address; "" = the bound endpoint.
  std::string advertise;
  std::string name;  // this node
  std::uint64_t generation = 0;
  std::string cluster_id;
  int send_hwm = 1000;
  std::int64_t max_message_bytes = 64 * 1024 * 1024;
  Duration tcp_max_retransmit_timeout = std::chrono::seconds(15);
  Duration heartbeat_interval = std::chrono::seconds(1);
  Duration heartbeat_timeout = std::chrono::seconds(3);
  Duration idle_peer_close = std::chrono::seconds(60);
  std::optional<CurveOptions> curve;  // nullopt = plain TCP
};

// The daemon's options from its config, identity and cluster id.
TransportOptions transport_options(const config::TransportConfig& config, const std::string& name,
                                   std::uint64_t generation, const std::string& cluster_id);

struct TransportStats {
  std::uint64_t sent = 0;
  std::uint64_t received = 0;  // decoded and returned by receive()
  std::uint64_t send_failures = 0;
  std::uint64_t dropped_malformed = 0;
  std::uint64_t dropped_oversized = 0;
  std::uint64_t dropped_wrong_version = 0;
  std::uint64_t dropped_wrong_cluster = 0;
  std::uint64_t dropped_unauthenticated = 0;
  std::uint64_t peers_opened = 0;
  std::uint64_t peers_closed = 0;
  std::uint64_t disconnects = 0;  // recorded PeerDisconnects (see the contract above)
};

// Where a message goes: the peer's ROUTER endpoint and, when known, its node name.
struct PeerAddress {
  std::string address;
  std::string name;  // required with CURVE (it selects the server key); may be "" otherwise
};

// The connection to a peer we had sent to dropped (its process most likely died).
struct PeerDisconnect {
  std::string name;     // the peer name the DEALER was created for ("" if sent without one)
  std::string address;  // the peer's ROUTER endpoint, as passed to send()
  TimePoint at;         // steady clock, when receive() saw the event
};

struct Received {
  std::vector<wire::Envelope> envelopes;
  std::vector<int> readable_fds;  // of the extra fds passed to receive(), those readable
};

class ZmqTransport {
 public:
  static Result<std::unique_ptr<ZmqTransport>> open(const TransportOptions& options);
  ~ZmqTransport();
  ZmqTransport(const ZmqTransport&) = delete;
  ZmqTransport& operator=(const ZmqTransport&) = delete;

  // Queues `envelope` for `peer` without blocking. The header (version, cluster id, sender,
  // generation, sender_address, seq) is stamped here; the caller sets type and body.
  Status send(const PeerAddress& peer, wire::Envelope envelope);
  // Stamped on every envelope sent from now on (wire::Envelope::leader_hint / leader_term).
  void set_leader_hint(std::string leader, std::uint64_t term);

  // Waits up to max_wait for inbound envelopes or for one of `extra_fds` to become readable
  // (the daemon's control socket, its signal fd), and returns what is ready. Also services the
  // ZAP handler and retries pending first messages while it waits.
  Received receive(Duration max_wait, const std::vector<int>& extra_fds = {});

  // Closes DEALERs without a send since now - idle_peer_close (steady clock). They never
  // report a disconnect.
  void close_idle(TimePoint now);

  // The peer disconnects recorded by receive() since the last call, oldest first; the
  // transport forgets them. A peer that reconnects and drops again appears again.
  std::vector<PeerDisconnect> take_disconnects();

  std::string bound_endpoint() const;
  // What this node stamps as sender_address.
  std::string advertised_endpoint() const;
  std::size_t open_peers() const;
  TransportStats stats() const;

  class Impl;

 private:
  explicit ZmqTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace elastic::transport
