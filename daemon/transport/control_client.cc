#include "daemon/transport/control_client.h"

#include <zmq.h>

#include <atomic>
#include <cstring>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "daemon/transport/curve_keys.h"

namespace elastic::transport {

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds_text(std::chrono::milliseconds timeout) {
  const auto tenths = (timeout.count() + 50) / 100;
  return std::to_string(tenths / 10) + (tenths % 10 ? "." + std::to_string(tenths % 10) : "") +
         " s";
}

}  // namespace

Result<std::string> call_remote(const RemoteControlClient& client, const control::Request& request,
                                std::chrono::milliseconds timeout, RemoteFailure* failure) {
  RemoteFailure ignored;
  RemoteFailure& kind = failure ? *failure : ignored;
  kind = RemoteFailure::kBadSetup;
  Result<CurveKeyPair> own = load_curve_secret_key(client.client_key_file);
  if (!own.ok()) return Error{own.error().message + " (--client-key)"};
  Result<std::string> server = load_curve_public_key(client.server_key_file);
  if (!server.ok()) return Error{server.error().message + " (--server-key)"};

  // One monitor name per call, so calls in one process never share it.
  static std::atomic<std::uint64_t> calls{0};
  const std::string monitor_endpoint = "inproc://elastic.control.client." + std::to_string(++calls);
  const std::string body = control::encode_request(request);
  const auto deadline = Clock::now() + timeout;
  try {
    zmq::context_t context;
    context.set(zmq::ctxopt::blocky, 0);
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(control::kMaxReplyBytes));
    socket.set(zmq::sockopt::curve_serverkey, *server);
    socket.set(zmq::sockopt::curve_publickey, own->public_key);
    socket.set(zmq::sockopt::curve_secretkey, own->secret_key);
    if (zmq_socket_monitor(socket.handle(), monitor_endpoint.c_str(),
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
      return Error{std::string("Cannot monitor the remote control connection: ") +
                   zmq_strerror(zmq_errno()) + "."};
    }
    zmq::socket_t monitor(context, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(monitor_endpoint);
    try {
      socket.connect(client.endpoint);
    } catch (const zmq::error_t& e) {
      return Error{"Cannot connect to " + client.endpoint + ": " + e.what() +
                   " (--connect wants tcp://HOST:PORT)."};
    }
    // Queued until the handshake is done (no IMMEDIATE), so nothing is lost while connecting.
    socket.send(zmq::buffer(body), zmq::send_flags::dontwait);

    bool handshaken = false;
    kind = RemoteFailure::kNoAnswer;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      zmq_pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                {monitor.handle(), 0, ZMQ_POLLIN, 0}};
      if (zmq_poll(items, 2, left.count()) < 0 && zmq_errno() != EINTR) break;
      if (items[1].revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> event;
        if (zmq::recv_multipart(monitor, std::back_inserter(event), zmq::recv_flags::dontwait) &&
            !event.empty() && event[0].size() >= sizeof(std::uint16_t) + sizeof(std::uint32_t)) {
          std::uint16_t id = 0;
          std::uint32_t value = 0;
          std::memcpy(&id, event[0].data(), sizeof id);
          std::memcpy(&value, static_cast<const char*>(event[0].data()) + sizeof id, sizeof value);
          if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) handshaken = true;
          if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            kind = RemoteFailure::kRefused;
            return Error{"The daemon at " + client.endpoint + " refused this client key (" +
                         client.client_key_file +
                         "): its public key is not in the daemon's control.client_keys_dir "
                         "(ZAP status " +
                         std::to_string(value) + ")."};
          }
          if (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            kind = RemoteFailure::kRefused;
            return Error{"The CURVE handshake with " + client.endpoint +
                         " failed: is --server-key (" + client.server_key_file +
                         ") the public key of the daemon listening there?"};
          }
        }
      }
      if (items[0].revents & ZMQ_POLLIN) {
        zmq::message_t reply;
        if (socket.recv(reply, zmq::recv_flags::dontwait)) {
          kind = RemoteFailure::kNone;
          return reply.to_string();
        }
      }
    }
    if (handshaken) {
      return Error{"The daemon at " + client.endpoint +
                   " accepted this client key but did not answer within " + seconds_text(timeout) +
                   "."};
    }
    return Error{"The daemon at " + client.endpoint +
                 " did not accept this client key (or did not answer) within " +
                 seconds_text(timeout) +
                 "; is the key's .pub in its control.client_keys_dir, is --server-key its "
                 "public key, and is control.remote_listen reachable from here?"};
  } catch (const zmq::error_t& e) {
    kind = RemoteFailure::kBadSetup;
    return Error{"Cannot set up the remote control connection to " + client.endpoint + ": " +
                 e.what() + "."};
  }
}

}  // namespace elastic::transport
