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
//    with CURVE, MAXMSGSIZE is kMaxFrameBytes per frame and an envelope longer than that
//    travels as several frames (up to max_message_bytes in all), so a peer that has not passed
//    its handshake cannot make a daemon read more than one such frame; without CURVE an
//    envelope is one frame of up to max_message_bytes;
//    ROUTER_MANDATORY on the ROUTER; DEALERs: IMMEDIATE, reconnect 100 ms backing off to 5 s.
//
// Sends never block. With IMMEDIATE a DEALER only queues to a finished connection, so a fresh
// DEALER would refuse its first messages while TCP connects: those (at most kMaxPendingPerPeer)
// wait in a small per-peer queue that send() and receive() flush, and are dropped and counted
// as send_failures if the peer has not connected within the connect grace (heartbeat_timeout).
// After the first successful send a refused message (peer gone, queue at HWM) fails at once.
//
// Receiving: receive() decodes each inbound envelope with the cluster id, protocol version,
// max_message_bytes and the per-type body limit (options.max_body_bytes); malformed, oversized,
// wrong-version and wrong-cluster messages are dropped and counted by reason. Decoding is
// bounded in memory and time whatever the bytes claim (daemon/wire/codec.h), so a hostile
// message costs about one pass over its headers, never a stall of the loop. It returns as soon
// as at least one envelope (or watched fd) is ready, or a peer disconnect was recorded (below).
//
// Inbound connections (the fds a flood of connects would take): the ROUTER drops a connection
// whose ZMTP handshake has not finished within kHandshakeTimeout, and an address may hold at
// most options.max_connections_per_address connections (inbound_connections.h: its socket
// monitor counts accepts and disconnects; a connection over the cap is shut down at once,
// counted in connections_refused and logged at most once per 10 s per cause). A failed accept
// (EMFILE: the process is out of fds, e.g. a flood from many addresses) is counted in
// accept_failures and logged likewise, and the ROUTER stops listening for 250 ms (doubling up
// to 5 s while it recurs within 30 s), which also drops its inbound connections and so frees
// their fds (peers reconnect), instead of ZeroMQ retrying the accept in a busy loop; counted in
// accept_pauses.
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
// Inbound connections report too: the ROUTER remembers, per connection, the node that the last
// envelope received over it came from (authenticated with CURVE), and when that connection
// drops the node is recorded as a PeerDisconnect (address ""). So a peer that sends to this node
// is covered even while this node's own connection to it is down or re-connecting (one that
// dropped a moment before, say): its death still shows at once. A peer that closes its
// connection on purpose (its close_idle(), a graceful stop) reports as well; owners treat a
// report as a suspicion, which a live peer clears. A peer may be reported twice for one death
// (both connections); owners act once.
// receive() returns as soon as it recorded a disconnect, even with nothing else ready.
//
// CURVE (options.curve set): the ROUTER is a CURVE server with this node's keypair; a ZAP
// handler (zap_handler.h; its socket is inproc://zeromq.zap.01 in this transport's private
// context, serviced by the owner's thread inside receive(), so there is no extra thread)
// accepts a client only if its public key is in the allow-list, and names it by its key file. Each received envelope must claim that
// name as its sender, so an allowed node cannot pose as another. Refused handshakes (ZAP
// denials, and non-CURVE clients via a socket monitor) and spoofed senders count as
// dropped_unauthenticated; spoofed senders are also logged, at most one line per 10 s. Nothing
// an unauthenticated peer sends reaches the envelope decoder: a client without CURVE is refused
// at the ZMTP greeting, one with an unknown key at its HELLO. The allow-list
// (public_keys_dir, a NodeAllowList: allow_lists.h says when it is re-read) lets nodes be added
// and removed without restarting the others.
// A DEALER is a CURVE client with the peer's server key, found by the
// peer's node name in public_keys_dir: send() therefore needs the peer's name when CURVE is on
// (seeds must be configured as name@host:port then); without CURVE the name is optional.
// Because the ZAP handler runs inside receive(), an owner that stops calling receive() stalls
// inbound CURVE handshakes (peers retry); the daemon's loop calls it continuously.
//
// Remote control (options.remote_control, control.remote_listen): a second ROUTER for
// elasticctl on login nodes (remote_control.h), needing options.curve; its requests come out of
// receive() as ControlRequests and its replies go back with send_control_reply(route, body).
//
// Thread safety: none. One thread (the node's loop) owns the transport and calls everything;
// ZeroMQ sockets must not be shared between threads.
// Errors: open() fails with a sentence on bad options, unreadable keys or a failed bind;
// send() returns an error Status (and counts it) when the message cannot be queued.
#pragma once

#include <array>
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

// The largest frame a CURVE transport reads (ZMQ_MAXMSGSIZE, checked on the encrypted frame);
// longer envelopes are sent as frames of kMaxFramePayloadBytes, which leaves room for CURVE's
// MESSAGE header, nonce and MAC.
inline constexpr std::size_t kMaxFrameBytes = 256 * 1024;
inline constexpr std::size_t kMaxFramePayloadBytes = kMaxFrameBytes - 256;

struct CurveOptions {
  std::string secret_key_file;  // this node's <name>.key (mode 0600)
  std::string public_keys_dir;  // allow-list: <node name>.pub for every node of the cluster
};

struct RemoteControlOptions {
  std::string bind;             // tcp://HOST:PORT; port 0 or * = any (tests)
  std::string client_keys_dir;  // allow-list: <user>.pub per client key
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
  int max_connections_per_address = 64;
  // The largest body per message type (wire::DecodeLimits); nullptr = max_message_bytes.
  std::size_t (*max_body_bytes)(wire::MsgType type) = nullptr;
  std::optional<CurveOptions> curve;                   // nullopt = plain TCP
  std::optional<RemoteControlOptions> remote_control;  // nullopt = off; needs curve
};

// The remote control socket from control.remote_listen / client_keys_dir; nullopt when off.
std::optional<RemoteControlOptions> remote_control_options(const config::ControlConfig& config);

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
  // Inbound connections (see the contract above).
  std::uint64_t connections_open = 0;     // now, as the socket monitor last reported
  std::uint64_t connections_refused = 0;  // over max_connections_per_address, shut down
  std::uint64_t accept_failures = 0;      // accept() failed (EMFILE, ENFILE, ENOBUFS...)
  std::uint64_t accept_pauses = 0;        // times the ROUTER stopped listening after one
  // Remote control socket (see the contract above).
  std::uint64_t control_received = 0;         // requests returned by receive()
  std::uint64_t control_dropped = 0;          // frames not of the protocol (wrong part count)
  std::uint64_t control_unauthenticated = 0;  // refused client handshakes
  std::uint64_t control_replies_failed = 0;   // replies that could not be queued
  // Per message type, indexed by type_slot(wire::MsgType) (for the metrics endpoint):
  // sent_by_type counts messages send() accepted (handed to ZeroMQ or queued as a first message;
  // a queued one dropped later also counts in send_failures), received_by_type as `received`.
  static constexpr std::size_t kTypeSlots = 128;
  std::array<std::uint64_t, kTypeSlots> sent_by_type{};
  std::array<std::uint64_t, kTypeSlots> received_by_type{};
};

// The TransportStats::*_by_type index of a message type: its number, except that every number
// from kTypeSlots - 1 up shares the last slot, so hostile type numbers cannot grow the counters.
inline std::size_t type_slot(wire::MsgType type) {
  const auto number = static_cast<std::size_t>(type);
  return number < TransportStats::kTypeSlots ? number : TransportStats::kTypeSlots - 1;
}

// Where a message goes: the peer's ROUTER endpoint and, when known, its node name.
struct PeerAddress {
  std::string address;
  std::string name;  // required with CURVE (it selects the server key); may be "" otherwise
};

// The connection to a peer we had sent to dropped (its process most likely died).
struct PeerDisconnect {
  std::string name;     // the peer name the DEALER was created for ("" if sent without one)
  std::string address;  // the peer's ROUTER endpoint, as passed to send(); "" for an inbound one
  TimePoint at;         // steady clock, when receive() saw the event
};

// One request on the remote control socket, from an authenticated client key.
struct ControlRequest {
  std::string route;  // the client's routing id, for send_control_reply()
  std::string user;   // the stem of the client's key file in client_keys_dir
  std::string body;   // the JSON request
};

struct Received {
  std::vector<wire::Envelope> envelopes;
  std::vector<int> readable_fds;  // of the extra fds passed to receive(), those readable
  std::vector<ControlRequest> control_requests;
};

// Messages queued per remote control client connection, each way.
inline constexpr int kControlHwm = 16;

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

  // Queues a reply on the remote control socket; an error when there is none or it is full.
  Status send_control_reply(const std::string& route, const std::string& body);

  std::string bound_endpoint() const;
  // The remote control socket's bound endpoint; "" when off.
  std::string control_endpoint() const;
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
