// receive_now: one whole (multipart) message from a ZeroMQ socket without waiting, for the
// transport's drain loops, which stop at the first empty poll.
#pragma once

#include <iterator>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace elastic::transport {

// Messages a drain loop takes per wake-up, so one flood cannot starve the owner's other work.
inline constexpr int kMaxReceiveBatch = 1024;

// False when nothing is queued, or the socket reported an error (the drain loop stops either
// way; the next poll tries again).
inline bool receive_now(zmq::socket_t& socket, std::vector<zmq::message_t>& parts) {
  parts.clear();
  try {
    return zmq::recv_multipart(socket, std::back_inserter(parts), zmq::recv_flags::dontwait)
        .has_value();
  } catch (const zmq::error_t&) {
    return false;
  }
}

}  // namespace elastic::transport
