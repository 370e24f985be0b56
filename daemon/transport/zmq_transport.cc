#include "daemon/transport/zmq_transport.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "daemon/control/protocol.h"
#include "daemon/transport/allow_lists.h"
#include "daemon/transport/curve_keys.h"
#include "daemon/transport/inbound_connections.h"
#include "daemon/transport/receive_now.h"
#include "daemon/transport/remote_control.h"
#include "daemon/transport/zap_handler.h"
#include "daemon/wire/codec.h"

namespace elastic::transport {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapDomain = "elastic";
constexpr const char* kMonitorEndpoint = "inproc://elastic.router.monitor";
// At most one log line per interval about envelopes whose claimed sender is not their key's.
constexpr std::chrono::seconds kSpoofLogInterval{10};
// Each DEALER's monitor gets its own inproc name: prefix + a counter that never repeats.
constexpr const char* kPeerMonitorPrefix = "inproc://elastic.peer.monitor.";
// The handshake (not the bare TCP connect) arms a peer's disconnect report; see the header.
constexpr int kPeerMonitorEvents = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED;
// Recorded disconnects an owner has not taken; beyond this the oldest go (still counted), so
// an owner that never calls take_disconnects() cannot grow memory with a flapping peer.
constexpr std::size_t kMaxUntakenDisconnects = 4096;
// Inbound connections whose node is remembered for a disconnect report (more than any cluster's
// open connections; the monitor's events remove entries as connections close).
constexpr std::size_t kMaxInboundNames = 65536;
// First messages to a peer whose connection is not up yet wait here (see the header).
constexpr std::size_t kMaxPendingPerPeer = 64;
// While messages are pending, receive() wakes this often to retry them.
constexpr milliseconds kPendingRetry(5);
// After a failed accept (out of fds) the ROUTER stops listening this long, doubling while
// accepts keep failing within kAcceptCalm of listening again (see the header).
constexpr milliseconds kAcceptPauseFirst(250);
constexpr milliseconds kAcceptPauseMax(5000);
constexpr std::chrono::seconds kAcceptCalm{30};
// ZMTP heartbeat TTL above ~65 s overflows (libzmq#4226).
constexpr int kMaxHeartbeatTtlMs = 65'000;

// A half-open inbound connection (a TCP connect, then no ZMTP greeting) is dropped after this.
constexpr int kHandshakeTimeoutMs = 5000;
// Connection events the ROUTER's monitor may queue (about 100 bytes each).
constexpr int kMonitorQueue = 100'000;
// Log lines about refused connections and failed accepts: at most one per cause per interval,
// so a flood cannot fill the log.
constexpr std::chrono::seconds kConnectionLogInterval{10};

// Counts occurrences and calls `log(count since the last line)` at most once per interval.
class RateLimitedLog {
 public:
  template <typename Log>
  void note(TimePoint now, Log&& log) {
    ++count_;
    if (logged_ != TimePoint{} && now - logged_ < kConnectionLogInterval) return;
    log(count_);
    logged_ = now;
    count_ = 0;
  }

 private:
  TimePoint logged_{};
  std::uint64_t count_ = 0;
};

int to_ms(Duration d) {
  return static_cast<int>(std::clamp<std::int64_t>(duration_cast<milliseconds>(d).count(), 0,
                                                   std::numeric_limits<int>::max()));
}

TimePoint steady_now() { return std::chrono::steady_clock::now(); }

}  // namespace

TransportOptions transport_options(const config::TransportConfig& config, const std::string& name,
                                   std::uint64_t generation, const std::string& cluster_id) {
  TransportOptions options;
  options.bind = config.bind;
  options.advertise = config.advertise;
  options.name = name;
  options.generation = generation;
  options.cluster_id = cluster_id;
  options.send_hwm = config.send_hwm;
  options.max_message_bytes = config.max_message_bytes;
  options.tcp_max_retransmit_timeout = config.tcp_max_retransmit_timeout;
  options.heartbeat_interval = config.heartbeat_interval;
  options.heartbeat_timeout = config.heartbeat_timeout;
  options.idle_peer_close = config.idle_peer_close;
  options.max_connections_per_address = config.max_connections_per_address;
  if (config.curve) options.curve = CurveOptions{config.secret_key_file, config.public_keys_dir};
  return options;
}

std::optional<RemoteControlOptions> remote_control_options(const config::ControlConfig& config) {
  if (config.remote_listen.empty()) return std::nullopt;
  return RemoteControlOptions{.bind = config.remote_listen,
                              .client_keys_dir = config.client_keys_dir};
}

class ZmqTransport::Impl {
 public:
  struct Peer {
    std::unique_ptr<zmq::socket_t> socket;
    std::string name;
    TimePoint created;
    TimePoint last_send;
    bool connected = false;  // a send has succeeded since the DEALER was created
    std::deque<std::string> pending;
    // Reports this DEALER's connection events. Declared after `socket` so it is destroyed
    // first: a DEALER being closed on purpose can never be read as a disconnect.
    std::unique_ptr<zmq::socket_t> monitor;
    bool handshaken = false;  // a handshake succeeded and no disconnect was reported since
  };

  explicit Impl(TransportOptions options)
      : options_(std::move(options)), inbound_(options_.max_connections_per_address) {
    limits_.max_bytes = static_cast<std::size_t>(options_.max_message_bytes);
    limits_.max_body_bytes = options_.max_body_bytes;
    limits_.cluster_id = options_.cluster_id;
  }

  ~Impl() {
    // Sockets before the context; LINGER 0 and BLOCKY 0 keep this from hanging.
    peers_.clear();
    monitor_.reset();
    router_.reset();
    control_.reset();
    zap_.reset();
    context_.close();
  }

  Status open() {
    if (options_.name.empty()) return Error{"The transport needs a node name."};
    if (options_.name.size() > 200) {
      return Error{"The node name '" + options_.name + "' is longer than 200 bytes."};
    }
    if (options_.send_hwm <= 0 || options_.max_message_bytes <= 0) {
      return Error{"transport.send_hwm and transport.max_message_bytes must be positive."};
    }
    routing_id_ = options_.name + "/" + std::to_string(options_.generation);
    try {
      context_.set(zmq::ctxopt::blocky, 0);
      if (options_.curve) {
        if (Status s = load_keys(); !s.ok()) return s;
        zap_handler_.add_domain(kZapDomain, &*node_keys_, &stats_.dropped_unauthenticated,
                                options_.curve->public_keys_dir);
        zap_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::rep);
        zap_->set(zmq::sockopt::linger, 0);
        zap_->bind(kZapEndpoint);
      }
      router_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::router);
      apply_common_options(*router_);
      router_->set(zmq::sockopt::router_mandatory, 1);
      router_->set(zmq::sockopt::router_handover, 1);
      if (options_.curve) {
        router_->set(zmq::sockopt::curve_server, 1);
        router_->set(zmq::sockopt::curve_secretkey, own_keys_.secret_key);
        router_->set(zmq::sockopt::zap_domain, kZapDomain);
      }
      // Half-open connections (a connect and then nothing) hold an fd only this long.
      router_->set(zmq::sockopt::handshake_ivl, kHandshakeTimeoutMs);
      // One monitor (a socket has at most one): accepts and disconnects for the per-address
      // cap and failed accepts, and with CURVE the clients refused before ZAP is asked (wrong
      // mechanism, garbage), which show up only here.
      const int curve_events = options_.curve ? ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                                    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                              : 0;
      if (zmq_socket_monitor(router_->handle(), kMonitorEndpoint,
                             ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPT_FAILED |
                                 curve_events) != 0) {
        return Error{std::string("Cannot monitor the transport's ROUTER socket: ") +
                     zmq_strerror(zmq_errno()) + "."};
      }
      monitor_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::pair);
      monitor_->set(zmq::sockopt::linger, 0);
      // A connect flood queues two events per connection between two receive() calls; a lost
      // ACCEPTED would let that connection past the cap (the default queue is 1,000).
      monitor_->set(zmq::sockopt::rcvhwm, kMonitorQueue);
      monitor_->connect(kMonitorEndpoint);
    } catch (const zmq::error_t& e) {
      return Error{std::string("Cannot set up the transport's ZeroMQ sockets: ") + e.what() + "."};
    }
    try {
      router_->bind(options_.bind);
      bound_ = router_->get(zmq::sockopt::last_endpoint);
      const std::size_t colon = bound_.rfind(':');
      if (colon != std::string::npos) bound_port_ = std::atoi(bound_.c_str() + colon + 1);
    } catch (const zmq::error_t& e) {
      return Error{"Cannot bind the transport to " + options_.bind +
                   " (transport.bind): " + e.what() + "."};
    }
    if (options_.remote_control) return open_control();
    return ok_status();
  }

  // The remote control ROUTER (remote_control.h); called after the CURVE keys are loaded.
  Status open_control() {
    if (!options_.curve) {
      return Error{
          "Remote control (control.remote_listen) needs transport.curve = true: it "
          "serves this node's CURVE keypair to clients."};
    }
    Result<std::unique_ptr<RemoteControlSocket>> opened = RemoteControlSocket::open(
        context_, *options_.remote_control, own_keys_.secret_key, stats_, steady_now());
    if (!opened.ok()) return opened.error();
    control_ = std::move(opened).value();
    control_->add_zap_domain(zap_handler_);
    return ok_status();
  }

  Status load_keys() {
    Result<CurveKeyPair> own = load_curve_secret_key(options_.curve->secret_key_file);
    if (!own.ok()) return Error{own.error().message + " (transport.secret_key_file)"};
    own_keys_ = *own;
    node_keys_.emplace(options_.curve->public_keys_dir);
    return node_keys_->load(steady_now());
  }

  void apply_common_options(zmq::socket_t& socket) const {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndhwm, options_.send_hwm);
    socket.set(zmq::sockopt::rcvhwm, options_.send_hwm);
    // Per frame (see frame_bytes()).
    socket.set(zmq::sockopt::maxmsgsize,
               static_cast<std::int64_t>(options_.curve ? kMaxFrameBytes : frame_bytes()));
    socket.set(zmq::sockopt::tcp_maxrt, to_ms(options_.tcp_max_retransmit_timeout));
    socket.set(zmq::sockopt::heartbeat_ivl, to_ms(options_.heartbeat_interval));
    socket.set(zmq::sockopt::heartbeat_timeout, to_ms(options_.heartbeat_timeout));
    socket.set(zmq::sockopt::heartbeat_ttl,
               std::min(to_ms(options_.heartbeat_timeout), kMaxHeartbeatTtlMs));
  }

  Result<Peer*> peer_for(const PeerAddress& address, TimePoint now) {
    auto it = peers_.find(address.address);
    if (it != peers_.end() && (!options_.curve || it->second.name == address.name)) {
      // A DEALER first opened for a seed (address only) learns its node's name from the first
      // named send, so a dropped connection can be attributed (job-tier fast detection).
      if (!address.name.empty()) it->second.name = address.name;
      return &it->second;
    }
    if (it != peers_.end()) close_peer(it);  // the same address now belongs to another node
    std::string server_key;
    if (options_.curve) {
      if (address.name.empty()) {
        return Error{"Cannot send to " + address.address +
                     " with CURVE on without the peer's node name (configure seeds as "
                     "name@host:port)."};
      }
      std::optional<std::string> key = node_keys_->public_key_of(address.name, now);
      if (!key) {
        return Error{"Cannot send to node " + address.name + " at " + address.address +
                     ": its public key " + address.name + ".pub is not in " +
                     options_.curve->public_keys_dir + "."};
      }
      server_key = *key;
    }
    Peer peer;
    peer.name = address.name;
    peer.created = now;
    peer.last_send = now;
    try {
      peer.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
      apply_common_options(*peer.socket);
      peer.socket->set(zmq::sockopt::routing_id, routing_id_);
      peer.socket->set(zmq::sockopt::immediate, 1);
      peer.socket->set(zmq::sockopt::sndtimeo, 0);
      peer.socket->set(zmq::sockopt::reconnect_ivl, 100);
      peer.socket->set(zmq::sockopt::reconnect_ivl_max, 5000);
      if (options_.curve) {
        peer.socket->set(zmq::sockopt::curve_serverkey, server_key);
        peer.socket->set(zmq::sockopt::curve_publickey, own_keys_.public_key);
        peer.socket->set(zmq::sockopt::curve_secretkey, own_keys_.secret_key);
      }
      const std::string monitor_endpoint = kPeerMonitorPrefix + std::to_string(++monitors_);
      if (zmq_socket_monitor(peer.socket->handle(), monitor_endpoint.c_str(), kPeerMonitorEvents) !=
          0) {
        return Error{"Cannot monitor the connection to " + address.address + ": " +
                     zmq_strerror(zmq_errno()) + "."};
      }
      peer.monitor = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::pair);
      peer.monitor->set(zmq::sockopt::linger, 0);
      peer.monitor->connect(monitor_endpoint);
      peer.socket->connect(address.address);
    } catch (const zmq::error_t& e) {
      return Error{"Cannot connect to " + address.address + ": " + e.what() + "."};
    }
    ++stats_.peers_opened;
    return &peers_.emplace(address.address, std::move(peer)).first->second;
  }

  void close_peer(std::map<std::string, Peer>::iterator it) {
    stats_.send_failures += it->second.pending.size();
    peers_.erase(it);
    ++stats_.peers_closed;
  }

  // With CURVE, a peer that has not finished its handshake can make a socket read at most one
  // frame of kMaxFrameBytes, and longer envelopes travel as several frames, which ZeroMQ
  // delivers only from authenticated peers. Without CURVE (a loopback-only daemon) nobody is
  // authenticated, so an envelope is one frame of up to max_message_bytes and a stranger cannot
  // make the socket hold an unending multi-frame message.
  std::size_t frame_bytes() const {
    return options_.curve ? kMaxFramePayloadBytes
                          : static_cast<std::size_t>(options_.max_message_bytes);
  }

  // One envelope as frames of at most frame_bytes(). Once ZeroMQ took the first frame it takes
  // the rest (its high-water mark counts whole messages), so a send is all or nothing.
  bool try_send(Peer& peer, const std::string& bytes) {
    try {
      std::size_t offset = 0;
      do {
        const std::size_t n = std::min(frame_bytes(), bytes.size() - offset);
        const bool last = offset + n == bytes.size();
        const zmq::send_flags flags =
            last ? zmq::send_flags::dontwait : zmq::send_flags::dontwait | zmq::send_flags::sndmore;
        if (!peer.socket->send(zmq::buffer(bytes.data() + offset, n), flags)) {
          return false;  // only the first frame can be refused (a full queue)
        }
        offset += n;
      } while (offset < bytes.size());
      peer.connected = true;
      ++stats_.sent;
      return true;
    } catch (const zmq::error_t&) {
      // Any other send error is a failure of this message alone.
    }
    return false;
  }

  // Sends queued first messages in order; drops them once the connect grace has passed.
  void flush(Peer& peer, TimePoint now) {
    while (!peer.pending.empty() && try_send(peer, peer.pending.front())) peer.pending.pop_front();
    if (!peer.pending.empty() && now - peer.created >= options_.heartbeat_timeout) {
      stats_.send_failures += peer.pending.size();
      peer.pending.clear();
    }
  }

  Status send(const PeerAddress& address, wire::Envelope envelope) {
    const TimePoint now = steady_now();
    envelope.version = wire::kProtocolVersion;
    envelope.cluster_id = options_.cluster_id;
    envelope.sender = options_.name;
    envelope.generation = options_.generation;
    envelope.sender_address = advertised();
    envelope.seq = ++seq_;
    envelope.leader_hint = leader_hint_;
    envelope.leader_term = leader_term_;
    std::string bytes = wire::encode_envelope(envelope);
    if (bytes.size() > static_cast<std::size_t>(options_.max_message_bytes)) {
      ++stats_.send_failures;
      return Error{"Cannot send a " + std::to_string(bytes.size()) + "-byte message to " +
                   address.address + ": transport.max_message_bytes is " +
                   std::to_string(options_.max_message_bytes) + "."};
    }
    Result<Peer*> found = peer_for(address, now);
    if (!found.ok()) {
      ++stats_.send_failures;
      return found.error();
    }
    Peer& peer = **found;
    peer.last_send = now;
    flush(peer, now);
    if (peer.pending.empty() && try_send(peer, bytes)) {
      ++stats_.sent_by_type[type_slot(envelope.type)];
      return ok_status();
    }
    if (!peer.connected && now - peer.created < options_.heartbeat_timeout &&
        peer.pending.size() < kMaxPendingPerPeer) {
      peer.pending.push_back(std::move(bytes));
      ++stats_.sent_by_type[type_slot(envelope.type)];
      return ok_status();
    }
    ++stats_.send_failures;
    return Error{"Cannot send to " + address.address +
                 ": the peer is unreachable or its queue is full."};
  }

  bool any_pending() const {
    return std::any_of(peers_.begin(), peers_.end(),
                       [](const auto& p) { return !p.second.pending.empty(); });
  }

  Received receive(Duration max_wait, const std::vector<int>& extra_fds) {
    Received result;
    // Clamped so a caller's "forever" (Duration::max()) cannot overflow the deadline.
    const TimePoint deadline =
        steady_now() + std::clamp<Duration>(max_wait, Duration::zero(), std::chrono::hours(24));
    const std::uint64_t disconnects_before = stats_.disconnects;
    std::vector<zmq_pollitem_t> items;
    std::vector<std::pair<const std::string*, Peer*>> monitored;  // parallel to their items
    for (;;) {
      items.clear();
      monitored.clear();
      items.push_back({router_->handle(), 0, ZMQ_POLLIN, 0});
      const std::size_t zap_item = items.size();
      if (zap_) items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
      const std::size_t monitor_item = items.size();
      if (monitor_) items.push_back({monitor_->handle(), 0, ZMQ_POLLIN, 0});
      const std::size_t control_item = items.size();
      if (control_) control_->add_poll_items(items);
      const std::size_t first_peer_monitor = items.size();
      for (auto& [address, peer] : peers_) {
        items.push_back({peer.monitor->handle(), 0, ZMQ_POLLIN, 0});
        monitored.emplace_back(&address, &peer);
      }
      const std::size_t first_fd = items.size();
      for (int fd : extra_fds) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});

      TimePoint now = steady_now();
      resume_listening(now);
      Duration wait = std::max(deadline - now, Duration::zero());
      if (any_pending()) wait = std::min<Duration>(wait, kPendingRetry);
      if (!listening_) wait = std::min<Duration>(wait, std::max(resume_at_ - now, Duration{}));
      // Round up, so a short wait does not become a busy loop of zero-timeout polls.
      const long timeout_ms =
          duration_cast<milliseconds>(wait + milliseconds(1) - Duration(1)).count();
      const int rc = zmq_poll(items.data(), static_cast<int>(items.size()), timeout_ms);
      if (rc > 0) {
        if (zap_ && (items[zap_item].revents & ZMQ_POLLIN)) serve_zap();
        if (monitor_ && (items[monitor_item].revents & ZMQ_POLLIN)) drain_monitor();
        if (control_) control_->on_ready(&items[control_item], &result.control_requests);
        for (std::size_t i = 0; i < monitored.size(); ++i) {
          if (items[first_peer_monitor + i].revents & ZMQ_POLLIN) {
            drain_peer_monitor(*monitored[i].first, *monitored[i].second);
          }
        }
        if (items[0].revents & ZMQ_POLLIN) drain_router(&result.envelopes);
        for (std::size_t i = first_fd; i < items.size(); ++i) {
          if (items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR))
            result.readable_fds.push_back(items[i].fd);
        }
      }
      now = steady_now();
      for (auto& [address, peer] : peers_) {
        if (!peer.pending.empty()) flush(peer, now);
      }
      if (!result.envelopes.empty() || !result.readable_fds.empty() ||
          !result.control_requests.empty() || stats_.disconnects > disconnects_before ||
          now >= deadline) {
        break;
      }
    }
    return result;
  }

  void drain_router(std::vector<wire::Envelope>* out) {
    for (int n = 0; n < kMaxReceiveBatch; ++n) {
      std::vector<zmq::message_t> parts;
      if (!receive_now(*router_, parts)) return;
      // [routing id, envelope in one or more frames]; anything else is not our protocol.
      if (parts.size() < 2) {
        ++stats_.dropped_malformed;
        continue;
      }
      const zmq::message_t& payload = parts[1];
      std::string joined;  // the frames of a multi-frame envelope, in order
      std::string_view bytes(static_cast<const char*>(payload.data()), payload.size());
      if (parts.size() > 2) {
        if (!options_.curve) {  // only authenticated peers send several frames
          ++stats_.dropped_malformed;
          continue;
        }
        std::size_t total = 0;
        for (std::size_t i = 1; i < parts.size(); ++i) total += parts[i].size();
        if (total > static_cast<std::size_t>(options_.max_message_bytes)) {
          ++stats_.dropped_oversized;
          continue;
        }
        joined.reserve(total);
        for (std::size_t i = 1; i < parts.size(); ++i) {
          joined.append(static_cast<const char*>(parts[i].data()), parts[i].size());
        }
        bytes = joined;
      }
      wire::DecodeError reason = wire::DecodeError::kMalformed;
      Result<wire::Envelope> envelope = wire::decode_envelope(bytes, limits_, &reason);
      if (!envelope.ok()) {
        count_drop(reason);
        continue;
      }
      if (options_.curve) {
        const std::string key_name = authenticated_name(payload);
        if (key_name != envelope->sender) {
          note_spoofed_sender(key_name, envelope->sender);  // an allowed key posing as another
          continue;
        }
      }
      ++stats_.received;
      ++stats_.received_by_type[type_slot(envelope->type)];
      // Which node this connection speaks for, for its disconnect report (see the header).
      // ZMQ_SRCFD is deprecated in libzmq 4.3 but still the only way from a message to its
      // connection; the monitor's DISCONNECTED names the same descriptor.
      const int fd = zmq_msg_get(payload.handle(), ZMQ_SRCFD);
      if (fd >= 0 && !envelope->sender.empty() &&
          (inbound_names_.size() < kMaxInboundNames || inbound_names_.contains(fd))) {
        inbound_names_[fd] = envelope->sender;
      }
      out->push_back(std::move(envelope).value());
    }
  }

  Status send_control_reply(const std::string& route, const std::string& body) {
    if (!control_) return Error{"There is no remote control socket (control.remote_listen)."};
    return control_->reply(route, body);
  }

  // Counts (dropped_unauthenticated) and logs, at most once per kSpoofLogInterval, an envelope
  // whose claimed sender is not the node its connection's key belongs to.
  void note_spoofed_sender(const std::string& key_name, const std::string& claimed) {
    ++stats_.dropped_unauthenticated;
    ++spoofed_since_log_;
    const TimePoint now = steady_now();
    if (spoof_logged_ != TimePoint{} && now - spoof_logged_ < kSpoofLogInterval) return;
    spdlog::warn(
        "dropped {} message(s) whose sender did not match their CURVE key (last: key of node "
        "{} claimed to be {}); a node key may only speak for its own node",
        spoofed_since_log_, key_name, claimed);
    spoof_logged_ = now;
    spoofed_since_log_ = 0;
  }

  static std::string authenticated_name(const zmq::message_t& message) {
    // The ZAP handler's user id; absent (nullptr) without CURVE.
    const char* user = zmq_msg_gets(message.handle(), "User-Id");
    return user == nullptr ? std::string() : std::string(user);
  }

  void count_drop(wire::DecodeError reason) {
    switch (reason) {
      case wire::DecodeError::kMalformed:
        ++stats_.dropped_malformed;
        break;
      case wire::DecodeError::kOversized:
        ++stats_.dropped_oversized;
        break;
      case wire::DecodeError::kWrongVersion:
        ++stats_.dropped_wrong_version;
        break;
      case wire::DecodeError::kWrongCluster:
        ++stats_.dropped_wrong_cluster;
        break;
    }
  }

  // Answers every queued ZAP request with zap_handler_ (zap_handler.h says what it accepts).
  void serve_zap() {
    for (;;) {
      std::vector<zmq::message_t> request;
      if (!receive_now(*zap_, request)) return;
      std::vector<std::string_view> frames;
      frames.reserve(request.size());
      for (const zmq::message_t& frame : request) frames.push_back(frame.to_string_view());
      const ZapAnswer answer = zap_handler_.answer(frames, steady_now());
      std::array<zmq::const_buffer, std::tuple_size_v<decltype(answer.reply)>> reply;
      for (std::size_t i = 0; i < reply.size(); ++i) reply[i] = zmq::buffer(answer.reply[i]);
      try {
        zmq::send_multipart(*zap_, reply, zmq::send_flags::dontwait);
      } catch (const zmq::error_t&) {
        return;
      }
    }
  }

  // The ROUTER's monitor: [event id (u16) + value (u32), endpoint]; the value is the
  // connection's fd for ACCEPTED and DISCONNECTED, the errno for ACCEPT_FAILED.
  void drain_monitor() {
    for (;;) {
      std::vector<zmq::message_t> event;
      if (!receive_now(*monitor_, event)) return;
      if (event.empty() || event[0].size() < sizeof(std::uint16_t) + sizeof(std::uint32_t)) {
        continue;
      }
      std::uint16_t id = 0;
      std::uint32_t value = 0;
      std::memcpy(&id, event[0].data(), sizeof(id));
      std::memcpy(&value, static_cast<const char*>(event[0].data()) + sizeof(id), sizeof(value));
      switch (id) {
        case ZMQ_EVENT_ACCEPTED:
          inbound_names_.erase(static_cast<int>(value));  // the number of a closed connection
          admit(static_cast<int>(value));
          break;
        case ZMQ_EVENT_DISCONNECTED: {
          inbound_.disconnected(static_cast<int>(value));
          const auto named = inbound_names_.find(static_cast<int>(value));
          if (named != inbound_names_.end()) {
            record_disconnect(named->second, "");
            inbound_names_.erase(named);
          }
          break;
        }
        case ZMQ_EVENT_ACCEPT_FAILED:
          ++stats_.accept_failures;
          accept_log_.note(steady_now(), [&](std::uint64_t n) {
            spdlog::error(
                "transport: cannot accept connections on {}: {} ({} time(s) since the last "
                "line; {} inbound connections open): stopped listening for a while (the "
                "inbound connections are dropped; peers reconnect); raise the open file limit "
                "(LimitNOFILE) or find who opens them",
                bound_, std::strerror(static_cast<int>(value)), n, inbound_.open());
          });
          pause_listening(steady_now());
          break;
        default:  // with CURVE: a refused handshake
          ++stats_.dropped_unauthenticated;
          break;
      }
      stats_.connections_open = inbound_.open();
    }
  }

  // ZeroMQ retries a failed accept at once for as long as the listening socket is readable, so
  // out of fds (EMFILE) it would spin. Instead the ROUTER stops listening: unbinding closes the
  // listening socket and every connection accepted through it (peers' DEALERs reconnect on
  // their own), which gives the fds back; resume_listening() binds the same endpoint again
  // after the pause. Pauses double while accepts keep failing soon after each resume.
  void pause_listening(TimePoint now) {
    if (!listening_) return;
    accept_pause_ = (accept_pause_ > Duration::zero() && now - listened_at_ < kAcceptCalm)
                        ? std::min<Duration>(2 * accept_pause_, kAcceptPauseMax)
                        : Duration(kAcceptPauseFirst);
    try {
      router_->unbind(bound_);
    } catch (const zmq::error_t& e) {
      spdlog::error("transport: cannot stop listening on {} after a failed accept: {}", bound_,
                    e.what());
      return;
    }
    listening_ = false;
    resume_at_ = now + accept_pause_;
    ++stats_.accept_pauses;
  }

  void resume_listening(TimePoint now) {
    if (listening_ || now < resume_at_) return;
    try {
      router_->bind(bound_);
      listening_ = true;
      listened_at_ = now;
    } catch (const zmq::error_t& e) {
      resume_at_ = now + accept_pause_;
      listen_log_.note(now, [&](std::uint64_t) {
        spdlog::error("transport: cannot listen on {} again: {}; retrying every {} ms", bound_,
                      e.what(), duration_cast<milliseconds>(accept_pause_).count());
      });
    }
  }

  // A connection the ROUTER accepted on `fd`: counted, or shut down when its address is over
  // max_connections_per_address. The fd is checked to still be one of the ROUTER's connections
  // (local port = the bound port) first: by the time the event is read it may have closed and
  // its number gone to another socket, which must not be touched.
  void admit(int fd) {
    const std::string address = peer_address_key(fd);
    if (address.empty() || local_port(fd) != bound_port_) return;
    if (inbound_.accepted(fd, address)) return;
    ::shutdown(fd, SHUT_RDWR);  // libzmq reads the close and reports DISCONNECTED
    ++stats_.connections_refused;
    refuse_log_.note(steady_now(), [&](std::uint64_t n) {
      spdlog::warn(
          "transport: refused {} connection(s) over transport.max_connections_per_address = {} "
          "since the last line (last from {}, which holds {})",
          n, options_.max_connections_per_address, address, inbound_.open_from(address));
    });
  }

  // Monitor events are [event id (u16) + value (u32), endpoint]; only the id matters here.
  void drain_peer_monitor(const std::string& address, Peer& peer) {
    for (;;) {
      std::vector<zmq::message_t> event;
      if (!receive_now(*peer.monitor, event)) return;
      if (event.empty() || event[0].size() < sizeof(std::uint16_t)) continue;
      std::uint16_t id = 0;
      std::memcpy(&id, event[0].data(), sizeof(id));
      if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        peer.handshaken = true;
      } else if (id == ZMQ_EVENT_DISCONNECTED && peer.handshaken) {
        peer.handshaken = false;  // one report per connection; the next handshake re-arms
        record_disconnect(peer.name, address);
      }
    }
  }

  void record_disconnect(const std::string& name, const std::string& address) {
    if (disconnects_.size() >= kMaxUntakenDisconnects) disconnects_.erase(disconnects_.begin());
    disconnects_.push_back(PeerDisconnect{name, address, steady_now()});
    ++stats_.disconnects;
  }

  std::vector<PeerDisconnect> take_disconnects() {
    std::vector<PeerDisconnect> taken;
    taken.swap(disconnects_);
    return taken;
  }

  void close_idle(TimePoint now) {
    for (auto it = peers_.begin(); it != peers_.end();) {
      if (now - it->second.last_send >= options_.idle_peer_close) {
        close_peer(it++);
      } else {
        ++it;
      }
    }
  }

  std::string advertised() const {
    return options_.advertise.empty() ? bound_ : options_.advertise;
  }

  TransportOptions options_;
  wire::DecodeLimits limits_;
  std::string routing_id_;
  zmq::context_t context_;
  std::unique_ptr<zmq::socket_t> router_;
  std::unique_ptr<zmq::socket_t> zap_;
  std::unique_ptr<zmq::socket_t> monitor_;  // the ROUTER's connection events
  InboundConnections inbound_;
  int bound_port_ = -1;  // of bound_; -1 for a non-TCP bind
  RateLimitedLog refuse_log_;
  RateLimitedLog accept_log_;
  RateLimitedLog listen_log_;  // binding again after a pause failed
  bool listening_ = true;      // false while paused after a failed accept
  TimePoint listened_at_{};    // the last resume
  TimePoint resume_at_{};
  Duration accept_pause_{};                       // the last pause
  std::unique_ptr<RemoteControlSocket> control_;  // null when off
  std::string bound_;
  CurveKeyPair own_keys_;
  std::optional<NodeAllowList> node_keys_;  // set with CURVE
  TimePoint spoof_logged_{};                // the last spoofed-sender log line
  std::uint64_t spoofed_since_log_ = 0;
  std::map<std::string, Peer> peers_;        // by address
  std::uint64_t monitors_ = 0;               // peer monitors created so far
  std::vector<PeerDisconnect> disconnects_;  // recorded, not yet taken
  std::map<int, std::string> inbound_names_;  // inbound connection fd -> the node it speaks for
  std::uint64_t seq_ = 0;
  std::string leader_hint_;  // stamped on every envelope (gossip hint)
  std::uint64_t leader_term_ = 0;
  TransportStats stats_;
  // Requests outside the node and control domains count as refused node handshakes.
  ZapHandler zap_handler_{&stats_.dropped_unauthenticated};
};

Result<std::unique_ptr<ZmqTransport>> ZmqTransport::open(const TransportOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  if (Status s = impl->open(); !s.ok()) return s.error();
  return std::unique_ptr<ZmqTransport>(new ZmqTransport(std::move(impl)));
}

ZmqTransport::ZmqTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ZmqTransport::~ZmqTransport() = default;

Status ZmqTransport::send(const PeerAddress& peer, wire::Envelope envelope) {
  return impl_->send(peer, std::move(envelope));
}
Received ZmqTransport::receive(Duration max_wait, const std::vector<int>& extra_fds) {
  return impl_->receive(max_wait, extra_fds);
}
void ZmqTransport::close_idle(TimePoint now) { impl_->close_idle(now); }
std::vector<PeerDisconnect> ZmqTransport::take_disconnects() { return impl_->take_disconnects(); }

void ZmqTransport::set_leader_hint(std::string leader, std::uint64_t term) {
  impl_->leader_hint_ = std::move(leader);
  impl_->leader_term_ = term;
}
std::string ZmqTransport::bound_endpoint() const { return impl_->bound_; }
std::string ZmqTransport::control_endpoint() const {
  return impl_->control_ ? impl_->control_->endpoint() : std::string();
}
Status ZmqTransport::send_control_reply(const std::string& route, const std::string& body) {
  return impl_->send_control_reply(route, body);
}
std::string ZmqTransport::advertised_endpoint() const { return impl_->advertised(); }
std::size_t ZmqTransport::open_peers() const { return impl_->peers_.size(); }
TransportStats ZmqTransport::stats() const { return impl_->stats_; }

}  // namespace elastic::transport
