// RemoteControlSocket: the transport's second ROUTER, for elasticctl on login nodes
// (control.remote_listen). A CURVE server with this node's keypair, bound to its own endpoint.
// Its ZAP domain, kControlZapDomain, is answered by the transport's ZapHandler (zap_handler.h)
// from control.client_keys_dir (a ClientAllowList: <user>.pub per client key; add_zap_domain()),
// so the client is named by its key file's stem; that name arrives as ControlRequest::user.
//
// Frames: a client (a DEALER) sends one frame, the JSON request of the local control protocol;
// anything else is dropped and counted (control_dropped). Bounded: MAXMSGSIZE
// control::kMaxRequestBytes, HWM kControlHwm each way, a 5 s handshake limit; refused
// handshakes (ZAP denials, and clients without CURVE, seen by a socket monitor) count in
// control_unauthenticated. Replies go back with reply(route, body) without blocking; a client
// that went away loses its reply silently (no ROUTER_MANDATORY). User -> uid mapping and every
// rule are the control Server's (daemon/control/server.h handle_remote).
//
// Thread safety: none; the transport's thread owns it (ZeroMQ sockets are not shared).
// Errors: open() fails with one sentence naming the config key (client_keys_dir unsafe or
// unreadable, bind failed).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/transport/allow_lists.h"
#include "daemon/transport/zap_handler.h"
#include "daemon/transport/zmq_transport.h"

namespace elastic::transport {

inline constexpr const char* kControlZapDomain = "elastic.control";

class RemoteControlSocket {
 public:
  // Binds options.bind (port 0 = any) in `context`, a CURVE server with `secret_key` (Z85).
  // `stats` must outlive the socket; its control_* counters are kept here.
  static Result<std::unique_ptr<RemoteControlSocket>> open(zmq::context_t& context,
                                                           const RemoteControlOptions& options,
                                                           const std::string& secret_key,
                                                           TransportStats& stats, TimePoint now);
  ~RemoteControlSocket();

  // The two items to poll (the ROUTER, then its monitor), appended to `items`.
  void add_poll_items(std::vector<zmq_pollitem_t>& items) const;
  // After a poll: `ready` points at the two items add_poll_items() appended.
  void on_ready(const zmq_pollitem_t* ready, std::vector<ControlRequest>* out);
  // Adds kControlZapDomain to `zap`, answered from the client keys; refusals count in
  // control_unauthenticated. The socket must outlive `zap`'s use of the domain.
  void add_zap_domain(ZapHandler& zap);
  Status reply(const std::string& route, const std::string& body);
  const std::string& endpoint() const { return bound_; }

 private:
  RemoteControlSocket(const RemoteControlOptions& options, TransportStats& stats)
      : options_(options), stats_(stats), clients_(options.client_keys_dir) {}
  void drain_requests(std::vector<ControlRequest>* out);
  void drain_monitor();

  RemoteControlOptions options_;
  TransportStats& stats_;
  ClientAllowList clients_;
  std::unique_ptr<zmq::socket_t> router_;
  std::unique_ptr<zmq::socket_t> monitor_;  // its refused handshakes
  std::string bound_;
};

}  // namespace elastic::transport
