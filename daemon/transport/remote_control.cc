#include "daemon/transport/remote_control.h"

#include <spdlog/spdlog.h>

#include <cstdint>
#include <zmq_addon.hpp>

#include "daemon/control/protocol.h"
#include "daemon/transport/receive_now.h"

namespace elastic::transport {
namespace {

constexpr const char* kMonitorEndpoint = "inproc://elastic.control.monitor";
// A handshake that has not finished by then is dropped (slow-loris clients).
constexpr int kHandshakeMs = 5000;

}  // namespace

Result<std::unique_ptr<RemoteControlSocket>> RemoteControlSocket::open(
    zmq::context_t& context, const RemoteControlOptions& options, const std::string& secret_key,
    TransportStats& stats, TimePoint now) {
  std::unique_ptr<RemoteControlSocket> self(new RemoteControlSocket(options, stats));
  if (Status s = self->clients_.load(now); !s.ok()) return s.error();
  std::string bind = options.bind;
  if (bind.size() > 2 && bind.ends_with(":0")) bind.replace(bind.size() - 1, 1, "*");
  try {
    self->router_ = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
    zmq::socket_t& router = *self->router_;
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::sndhwm, kControlHwm);
    router.set(zmq::sockopt::rcvhwm, kControlHwm);
    router.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(control::kMaxRequestBytes));
    router.set(zmq::sockopt::handshake_ivl, kHandshakeMs);
    router.set(zmq::sockopt::curve_server, 1);
    router.set(zmq::sockopt::curve_secretkey, secret_key);
    router.set(zmq::sockopt::zap_domain, kControlZapDomain);
    if (zmq_socket_monitor(
            router.handle(), kMonitorEndpoint,
            ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
      return Error{std::string("Cannot monitor the remote control socket: ") +
                   zmq_strerror(zmq_errno()) + "."};
    }
    self->monitor_ = std::make_unique<zmq::socket_t>(context, zmq::socket_type::pair);
    self->monitor_->set(zmq::sockopt::linger, 0);
    self->monitor_->connect(kMonitorEndpoint);
  } catch (const zmq::error_t& e) {
    return Error{std::string("Cannot set up the remote control socket: ") + e.what() + "."};
  }
  try {
    self->router_->bind(bind);
    self->bound_ = self->router_->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Error{"Cannot bind the remote control socket to " + options.bind + ": " + e.what() +
                 " (control.remote_listen)."};
  }
  spdlog::info("remote control listening on {} ({} client key(s) in {})", self->bound_,
               self->clients_.size(), options.client_keys_dir);
  return self;
}

RemoteControlSocket::~RemoteControlSocket() {
  monitor_.reset();  // the monitor before the socket it watches
  router_.reset();
}

void RemoteControlSocket::add_poll_items(std::vector<zmq_pollitem_t>& items) const {
  items.push_back({router_->handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({monitor_->handle(), 0, ZMQ_POLLIN, 0});
}

void RemoteControlSocket::on_ready(const zmq_pollitem_t* ready, std::vector<ControlRequest>* out) {
  if (ready[1].revents & ZMQ_POLLIN) drain_monitor();
  if (ready[0].revents & ZMQ_POLLIN) drain_requests(out);
}

void RemoteControlSocket::add_zap_domain(ZapHandler& zap) {
  zap.add_domain(kControlZapDomain, &clients_, &stats_.control_unauthenticated,
                 options_.client_keys_dir);
}

// Frames: [routing id, JSON request] from an authenticated client.
void RemoteControlSocket::drain_requests(std::vector<ControlRequest>* out) {
  for (int n = 0; n < kMaxReceiveBatch; ++n) {
    std::vector<zmq::message_t> parts;
    if (!receive_now(*router_, parts)) return;
    if (parts.size() != 2) {
      ++stats_.control_dropped;
      continue;
    }
    // The ZAP handler's user id (the client key's user).
    const char* user = zmq_msg_gets(parts[1].handle(), "User-Id");
    if (user == nullptr || *user == '\0') {  // cannot happen past ZAP; never act without a user
      ++stats_.control_unauthenticated;
      continue;
    }
    ++stats_.control_received;
    out->push_back(
        ControlRequest{.route = parts[0].to_string(), .user = user, .body = parts[1].to_string()});
  }
}

void RemoteControlSocket::drain_monitor() {
  for (;;) {
    std::vector<zmq::message_t> event;
    if (!receive_now(*monitor_, event)) return;
    ++stats_.control_unauthenticated;  // only refused handshakes are monitored
  }
}

Status RemoteControlSocket::reply(const std::string& route, const std::string& body) {
  try {
    if (router_->send(zmq::buffer(route), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
        router_->send(zmq::buffer(body), zmq::send_flags::dontwait)) {
      return ok_status();
    }
  } catch (const zmq::error_t&) {
    // Counted below like a full queue.
  }
  ++stats_.control_replies_failed;
  return Error{"Cannot queue a remote control reply: the client is gone or its queue is full."};
}

}  // namespace elastic::transport
