// WorkerEndpoint: the daemon's end of one worker's channel (messages.h), the thin I/O shell
// around the socket the Spawner returned for the worker (spawner::Spawned::channel). It turns
// the bytes the worker wrote into ChannelInputs for the worker's pure WorkerLink
// (worker_link.h) and writes the messages the link returns. It decides nothing.
//
// Reading: read() takes what the socket holds (at most kReadBudget bytes per call, so a chatty
// worker cannot starve the loop; the descriptor stays readable and the next call continues),
// splits it into frames and decodes each. A frame that is not of the protocol (bad length, not
// JSON, a field of the wrong type) is one kBadFrame input whose sentence names the worker and
// what was wrong; the worker is not killed for it. After a bad length the stream cannot be
// resynchronised: later bytes are read and dropped, so end of file is still seen. End of file
// (the worker exited, or closed its end) or a read error is one kClosed input, after which the
// descriptor is closed and open() is false.
//
// Writing: send() writes at once what the socket takes and keeps the rest (at most
// kMaxPending bytes) for flush(), which the caller runs when fd() is writable while
// wants_write(). Nothing blocks (the socket is non-blocking) and SIGPIPE is never raised.
//
// Ownership: owns the descriptor. Thread safety: none; the daemon's loop thread.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/unique_fd.h"
#include "daemon/worker_channel/messages.h"

namespace elastic::worker_channel {

struct ChannelInput {
  enum class Kind { kMessage, kBadFrame, kClosed };
  Kind kind = Kind::kClosed;
  WorkerMessage message;  // kMessage
  // kBadFrame: "worker <label>'s channel: <what was wrong>"; kClosed: "" at end of file, else
  // the read error's sentence.
  std::string error;
};

class WorkerEndpoint {
 public:
  static constexpr std::size_t kReadBudget = 1 << 20;
  static constexpr std::size_t kMaxPending = 1 << 20;

  // `label` names the worker in errors ("fmnist-1 rank 3"); `fd` is its channel socket, made
  // non-blocking here.
  WorkerEndpoint(std::string label, UniqueFd fd);

  // The descriptor to poll (readable; writable too while wants_write()); -1 once closed.
  int fd() const { return fd_.get(); }
  bool open() const { return fd_.valid(); }
  bool wants_write() const { return open() && !pending_.empty(); }
  const std::string& label() const { return label_; }

  // What the worker sent since the last call, in order; a kClosed input is always the last.
  std::vector<ChannelInput> read();
  // Frames `message` and writes it (see Writing). An Error when the channel is closed, the
  // worker's end is gone, or more than kMaxPending bytes would wait (a worker that does not
  // read): the message is then dropped.
  Status send(const DaemonMessage& message);
  // Writes what waits, as far as the socket takes it.
  Status flush();

 private:
  std::string where() const { return "worker " + label_ + "'s channel"; }

  std::string label_;
  UniqueFd fd_;
  FrameReader frames_;
  std::string pending_;
};

}  // namespace elastic::worker_channel
