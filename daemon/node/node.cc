#include "daemon/node/node.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "daemon/control/server.h"
#include "daemon/transport/generation.h"
#include "daemon/transport/zmq_transport.h"
#include "daemon/wire/codec.h"

namespace elastic::node {

namespace {

TimePoint clock_now() {
  return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
}

const char* state_name(membership::MemberState state) {
  switch (state) {
    case membership::MemberState::kAlive:
      return "alive";
    case membership::MemberState::kSuspect:
      return "suspect";
    case membership::MemberState::kDead:
      return "dead";
    case membership::MemberState::kLeft:
      return "left";
  }
  return "unknown";
}

// Splits "tcp://HOST:PORT" (HOST may be [v6]); false when it does not look like that.
bool split_endpoint(const std::string& endpoint, std::string& host, std::string& port) {
  constexpr std::string_view kScheme = "tcp://";
  if (endpoint.rfind(kScheme, 0) != 0) return false;
  const std::string rest = endpoint.substr(kScheme.size());
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) return false;
  host = rest.substr(0, colon);
  port = rest.substr(colon + 1);
  return true;
}

bool is_wildcard_host(const std::string& host) {
  return host == "0.0.0.0" || host == "*" || host == "::" || host == "[::]";
}

// Source address the kernel would use to reach host:port (UDP connect sends nothing).
std::string route_source(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return "";
  }
  std::string source;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t length = sizeof(local);
    char text[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr &&
        local.sin_addr.s_addr != htonl(INADDR_ANY)) {
      source = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return source;
}

std::string first_interface_address() {
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) return "";
  std::string address;
  for (ifaddrs* i = interfaces; i != nullptr && address.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) address = text;
  }
  ::freeifaddrs(interfaces);
  return address;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

Seed parse_seed(const std::string& seed) {
  // Node names cannot contain '@' and hosts may not either, so the first '@' splits them.
  const auto at = seed.find('@');
  if (at == std::string::npos) return Seed{.name = "", .endpoint = "tcp://" + seed};
  return Seed{.name = seed.substr(0, at), .endpoint = "tcp://" + seed.substr(at + 1)};
}

std::string derive_advertise_host(const std::vector<std::string>& seeds) {
  std::string host, port;
  if (!seeds.empty() && split_endpoint(parse_seed(seeds.front()).endpoint, host, port)) {
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    const std::string source = route_source(host, port);
    if (!source.empty()) return source;
  }
  const std::string address = first_interface_address();
  return address.empty() ? "127.0.0.1" : address;
}

std::unique_ptr<Node> Node::start(const config::DaemonConfig& config, StartFailure& failure) {
  std::unique_ptr<Node> node(new Node());
  node->config_ = config;
  node->started_ = clock_now();

  // Before ZeroMQ creates its I/O threads: they inherit the mask, so these signals can only be
  // read from the signal fd, never delivered to a random thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) {
    failure = {1, "Cannot block SIGTERM/SIGINT/SIGHUP."};
    return nullptr;
  }
  node->signal_fd_ = ::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (node->signal_fd_ < 0) {
    failure = {1, std::string("Cannot create a signalfd: ") + std::strerror(errno) + "."};
    return nullptr;
  }
  // A client that hangs up mid-reply must not kill the daemon (sends use MSG_NOSIGNAL too).
  ::signal(SIGPIPE, SIG_IGN);

  node->name_ = config.node.name.empty() ? host_name() : config.node.name;
  auto generation = transport::next_generation(config.node.state_dir);
  if (!generation.ok()) {
    failure = {kExitCantCreate, generation.error().message + " (node.state_dir)"};
    return nullptr;
  }
  node->generation_ = *generation;

  // Peers need a dialable address. A wildcard bind gets a derived host; ":0" means "any port".
  transport::TransportOptions options = transport::transport_options(
      config.transport, node->name_, node->generation_, config.node.cluster_id);
  std::string bind_host, bind_port;
  if (split_endpoint(options.bind, bind_host, bind_port)) {
    if (bind_port == "0") bind_port = "*";
    options.bind = "tcp://" + bind_host + ":" + bind_port;
  }
  const bool derive = options.advertise.empty() && is_wildcard_host(bind_host);
  const std::string advertise_host = derive ? derive_advertise_host(config.membership.seeds) : "";
  if (derive && bind_port != "*") options.advertise = "tcp://" + advertise_host + ":" + bind_port;
  auto opened = transport::ZmqTransport::open(options);
  if (opened.ok() && derive && bind_port == "*") {
    // The port is known only once bound: re-bind that port explicitly with the derived address
    // (the transport stamps its advertised address at open).
    std::string host, port;
    if (split_endpoint((*opened)->bound_endpoint(), host, port)) {
      opened.value().reset();
      options.bind = "tcp://" + bind_host + ":" + port;
      options.advertise = "tcp://" + advertise_host + ":" + port;
      opened = transport::ZmqTransport::open(options);
    }
  }
  if (!opened.ok()) {
    failure = {config::kExitUnavailable, opened.error().message + " (transport.bind)"};
    return nullptr;
  }
  node->transport_ = std::move(opened.value());
  node->address_ = node->transport_->advertised_endpoint();

  Node* self = node.get();
  auto server = control::Server::open(
      config.control.socket,
      [self](const control::Request& request, const control::PeerCredentials& peer) {
        return self->handle_control(request, peer);
      });
  if (!server.ok()) {
    failure = {config::kExitUnavailable, server.error().message + " (control.socket)"};
    return nullptr;
  }
  node->control_ = std::move(server.value());

  std::random_device entropy;
  const std::uint64_t seed = (std::uint64_t{entropy()} << 32) ^ entropy() ^ node->generation_;
  node->membership_ = std::make_unique<membership::Membership>(
      membership::Self{node->name_, node->generation_, node->address_}, config.membership, seed,
      clock_now());
  return node;
}

Node::~Node() {
  // Control first (it calls back into this Node), then the transport's sockets.
  control_.reset();
  membership_.reset();
  transport_.reset();
  if (signal_fd_ >= 0) ::close(signal_fd_);
}

int Node::run() {
  std::vector<std::string> seeds;
  for (const std::string& entry : config_.membership.seeds) {
    const Seed seed = parse_seed(entry);
    // A seed list shared by every node names this node too; skip it by address or by name.
    if (seed.endpoint == address_ || seed.name == name_) continue;
    if (std::find(seeds.begin(), seeds.end(), seed.endpoint) != seeds.end()) continue;
    seeds.push_back(seed.endpoint);
    if (!seed.name.empty()) seed_names_.emplace(seed.endpoint, seed.name);
  }
  membership::Effects effects;
  membership_->join(clock_now(), seeds, effects);
  carry_out(clock_now(), std::move(effects));
  spdlog::info("elasticd ready: name={} generation={} address={} control={}", name_, generation_,
               address_, control_->path());

  while (!stop_) {
    TimePoint now = clock_now();
    // Wake at least once a second so idle peers get closed even when membership is quiet.
    const TimePoint deadline = std::min(
        {membership_->next_deadline(), control_->next_deadline(), now + std::chrono::seconds(1)});
    const Duration wait = std::max(Duration::zero(), deadline - now);
    transport::Received received = transport_->receive(wait, {control_->fd(), signal_fd_});
    now = clock_now();
    effects = {};
    if (std::find(received.readable_fds.begin(), received.readable_fds.end(), signal_fd_) !=
        received.readable_fds.end()) {
      handle_signals(now, effects);
    }
    control_->process(now);
    deliver(now, received.envelopes, effects);
    if (stop_) break;
    membership_->tick(now, effects);
    carry_out(now, std::move(effects));
    transport_->close_idle(now);
  }
  leave_gracefully();
  spdlog::info("elasticd stopped: name={} generation={}", name_, generation_);
  return 0;
}

void Node::deliver(TimePoint now, std::vector<wire::Envelope>& envelopes,
                   membership::Effects& effects) {
  for (wire::Envelope& envelope : envelopes) {
    auto message = wire::decode_membership(envelope.type, envelope.body);
    if (!message.ok()) {
      // The transport checked the envelope; a body that does not decode is still hostile.
      ++undecodable_bodies_;
      spdlog::debug("dropped a message from {} gen {}: {}", envelope.sender, envelope.generation,
                    message.error().message);
      continue;
    }
    membership_->on_message(now,
                            membership::Inbound{.from = std::move(envelope.sender),
                                                .from_generation = envelope.generation,
                                                .from_address = std::move(envelope.sender_address),
                                                .message = std::move(message.value())},
                            effects);
  }
}

void Node::handle_signals(TimePoint now, membership::Effects& effects) {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    if (info.ssi_signo == SIGHUP) {
      spdlog::warn("SIGHUP received: reload not supported yet; the configuration is unchanged");
    } else {
      spdlog::info("{} received from pid {}: leaving the cluster",
                   info.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", info.ssi_pid);
      stop_ = true;
    }
  }
}

void Node::carry_out(TimePoint now, membership::Effects effects) {
  // A failed send is fed back as unreachable, which may produce more sends (indirect probes);
  // a few rounds settle it, and anything left waits for the next tick.
  for (int round = 0; round < 4; ++round) {
    log_events(effects.events);
    membership::Effects more;
    for (membership::Outgoing& send : effects.sends) {
      wire::Envelope envelope;
      envelope.type = wire::message_type(send.message);
      envelope.body = wire::encode_body(send.message);
      ++sends_attempted_;
      // Membership addresses a seed it has not met yet by address only; CURVE needs its name.
      std::string name = send.to;
      if (name.empty()) {
        const auto seed = seed_names_.find(send.to_address);
        if (seed != seed_names_.end()) name = seed->second;
      }
      const Status sent = transport_->send(
          transport::PeerAddress{.address = send.to_address, .name = std::move(name)},
          std::move(envelope));
      if (!sent.ok()) {
        spdlog::debug("send to {} ({}) failed: {}", send.to.empty() ? "seed" : send.to,
                      send.to_address, sent.error().message);
        membership_->on_unreachable(now, send.to_address, more);
      }
    }
    if (more.sends.empty() && more.events.empty()) return;
    effects = std::move(more);
  }
  log_events(effects.events);
}

void Node::log_events(const std::vector<membership::MemberEvent>& events) {
  for (const membership::MemberEvent& event : events) {
    auto [it, inserted] = logged_states_.try_emplace({event.name, event.generation}, event.state);
    const char* old_state = inserted ? "none" : state_name(it->second);
    it->second = event.state;
    spdlog::info("member {} gen {}: {} -> {} ({})", event.name, event.generation, old_state,
                 state_name(event.state), event.address);
  }
}

void Node::leave_gracefully() {
  membership::Effects effects;
  TimePoint now = clock_now();
  membership_->leave(now, effects);
  carry_out(now, std::move(effects));
  // Keep serving (peers may probe us and learn we left) until every queued send has gone to
  // ZeroMQ or failed, or kLeaveFlush passes.
  const TimePoint deadline = now + kLeaveFlush;
  while (true) {
    const transport::TransportStats stats = transport_->stats();
    if (stats.sent + stats.send_failures >= sends_attempted_) break;
    now = clock_now();
    if (now >= deadline) {
      spdlog::warn("leaving: {} messages still queued after {} ms; dropping them",
                   sends_attempted_ - stats.sent - stats.send_failures, kLeaveFlush.count());
      break;
    }
    transport::Received received =
        transport_->receive(std::min<Duration>(deadline - now, std::chrono::milliseconds(20)));
    now = clock_now();
    effects = {};
    deliver(now, received.envelopes, effects);
    carry_out(now, std::move(effects));
  }
}

control::SelfInfo Node::self_info(TimePoint now) const {
  return control::SelfInfo{.name = name_,
                           .generation = generation_,
                           .address = address_,
                           .cluster_id = config_.node.cluster_id,
                           .uptime_s = to_ms(now - started_) / 1000.0};
}

std::string Node::handle_control(const control::Request& request,
                                 const control::PeerCredentials& peer) {
  spdlog::debug("control request \"{}\" from pid {} uid {} gid {}", request.verb, peer.pid,
                peer.uid, peer.gid);
  const TimePoint now = clock_now();
  if (request.verb == "nodes") {
    control::NodesReply reply;
    reply.self = self_info(now);
    for (const membership::MemberView& member : membership_->members()) {
      reply.members.push_back(control::MemberRow{
          .name = member.name,
          .state = state_name(member.state),
          .incarnation = member.incarnation,
          .generation = member.generation,
          .address = member.address,
          .last_heard_ms_ago =
              member.last_heard == TimePoint{} ? -1.0 : to_ms(now - member.last_heard),
          .state_since_ms_ago = to_ms(now - member.state_since)});
    }
    const membership::Stats& s = membership_->stats();
    reply.stats = control::MembershipCounters{.probes = s.probes,
                                              .probe_timeouts = s.probe_timeouts,
                                              .indirect_probes = s.indirect_probes,
                                              .nacks_received = s.nacks_received,
                                              .suspicions = s.suspicions,
                                              .deaths = s.deaths,
                                              .refutations = s.refutations,
                                              .messages_sent = s.messages_sent,
                                              .messages_received = s.messages_received,
                                              .local_health = s.local_health};
    const transport::TransportStats t = transport_->stats();
    reply.transport =
        control::TransportCounters{.sent = t.sent,
                                   .received = t.received,
                                   .send_failures = t.send_failures,
                                   .dropped_malformed = t.dropped_malformed,
                                   .dropped_oversized = t.dropped_oversized,
                                   .dropped_wrong_version = t.dropped_wrong_version,
                                   .dropped_wrong_cluster = t.dropped_wrong_cluster,
                                   .dropped_unauthenticated = t.dropped_unauthenticated,
                                   .dropped_undecodable = undecodable_bodies_,
                                   .peers_opened = t.peers_opened,
                                   .peers_closed = t.peers_closed,
                                   .open_peers = transport_->open_peers()};
    return control::encode_reply(reply);
  }
  if (request.verb == "status") {
    control::StatusReply reply;
    reply.self = self_info(now);
    for (const membership::MemberView& member : membership_->members()) {
      switch (member.state) {
        case membership::MemberState::kAlive:
          ++reply.alive;
          break;
        case membership::MemberState::kSuspect:
          ++reply.suspect;
          break;
        case membership::MemberState::kDead:
          ++reply.dead;
          break;
        case membership::MemberState::kLeft:
          ++reply.left;
          break;
      }
    }
    return control::encode_reply(reply);
  }
  return control::encode_error_reply("Unknown request \"" + request.verb +
                                     "\"; this daemon answers \"nodes\" and \"status\".");
}

}  // namespace elastic::node
