#include "daemon/worker_channel/endpoint.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace elastic::worker_channel {

WorkerEndpoint::WorkerEndpoint(std::string label, UniqueFd fd)
    : label_(std::move(label)), fd_(std::move(fd)) {
  if (fd_.valid()) ::fcntl(fd_.get(), F_SETFL, ::fcntl(fd_.get(), F_GETFL) | O_NONBLOCK);
}

std::vector<ChannelInput> WorkerEndpoint::read() {
  std::vector<ChannelInput> inputs;
  if (!open()) return inputs;
  std::array<char, 64 * 1024> chunk;
  std::size_t taken = 0;
  while (taken < kReadBudget) {
    const ssize_t n = ::recv(fd_.get(), chunk.data(), chunk.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      ChannelInput closed;
      closed.kind = ChannelInput::Kind::kClosed;
      if (n < 0) closed.error = where() + ": reading failed: " + std::strerror(errno) + ".";
      fd_.reset();
      inputs.push_back(std::move(closed));
      return inputs;
    }
    taken += static_cast<std::size_t>(n);
    if (frames_.broken()) continue;  // nothing to decode any more; keep watching for the end
    frames_.append(chunk.data(), static_cast<std::size_t>(n));
    while (true) {
      Result<std::optional<std::string>> frame = frames_.next();
      if (!frame.ok()) {
        inputs.push_back(
            {ChannelInput::Kind::kBadFrame, {}, where() + ": " + frame.error().message});
        break;
      }
      if (!frame->has_value()) break;
      Result<WorkerMessage> message = decode_worker_message(**frame);
      if (message.ok()) {
        inputs.push_back({ChannelInput::Kind::kMessage, std::move(*message), ""});
      } else {
        inputs.push_back(
            {ChannelInput::Kind::kBadFrame, {}, where() + ": " + message.error().message});
      }
    }
  }
  return inputs;
}

Status WorkerEndpoint::send(const DaemonMessage& message) {
  if (!open()) return Error{where() + " is closed."};
  const std::string bytes = frame(encode(message));
  if (pending_.size() + bytes.size() > kMaxPending) {
    return Error{where() + ": the worker does not read it (" + std::to_string(pending_.size()) +
                 " bytes wait); the message is dropped."};
  }
  pending_ += bytes;
  return flush();
}

Status WorkerEndpoint::flush() {
  while (open() && !pending_.empty()) {
    const ssize_t n =
        ::send(fd_.get(), pending_.data(), pending_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) {
      // The worker's end is gone (EPIPE, ECONNRESET); read() reports the end of file.
      const int error = errno;
      pending_.clear();
      return Error{where() + ": writing failed: " + std::strerror(error) + "."};
    }
    pending_.erase(0, static_cast<std::size_t>(n));
  }
  return ok_status();
}

}  // namespace elastic::worker_channel
