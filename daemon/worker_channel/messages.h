// The worker channel's messages: what elasticd and a worker it spawned say to each other over
// the socket the Spawner gives the worker (daemon/spawner/spawner.h, "Worker channel"), so a
// healthy worker can be told the next round of its job instead of being killed and restarted.
//
// Framing is the control protocol's (daemon/control/protocol.h): a 4-byte big-endian length,
// then one UTF-8 JSON object of 1..kMaxFrameBytes bytes, so a standard-library-only client
// (python/elastic_worker.py) speaks it too. Every object has "type"; types are only ever
// appended and fields only ever added; decoders ignore unknown fields, and a type they do not
// know decodes to UnknownMessage (a newer peer), which the receiver logs and ignores.
//
//   worker -> daemon
//     {"type":"hello","version":V,"live":true|false}   its first frame; V: the highest version it
//                                                      speaks; live: it can re-form in place
//     {"type":"joined","round":R,"term":T}            it has re-formed into round R of term T
//     {"type":"alive","step":S,"idle_ms":I,"waiting":W}
//                                                      sent every kAlivePeriod by a thread
//                                                      that is not the training thread: S steps
//                                                      done, the last one (or the last sign of
//                                                      work on the next one) I ms ago; W: the
//                                                      training thread waits in a collective
//                                                      (for its peers), not in its own work.
//                                                      Hang detection reads it (worker_liveness.h)
//   daemon -> worker
//     {"type":"round","job":J,"round":R,"term":T,"rank":N,"local_rank":L,"world_size":W,
//      "local_world_size":LW,"group_rank":G,"master_addr":A,"master_port":P,
//      "restart_count":C,"intact":I}                   the next round: re-form into it; I
//                                                      (false if absent): every rank of the
//                                                      worker's current group goes on into it
//                                                      from the step it is at and none failed
//                                                      (a grow of a healthy group), so the group
//                                                      may be left at a step boundary its ranks
//                                                      agree on instead of being aborted at once
//     {"type":"stop","reason":S}                       end now (SIGTERM follows as today)
//
// Progress reports keep their own path ($ELASTIC_CONTROL_SOCKET, trainer/progress.h).
//
// Errors: the decoders and FrameReader never throw on hostile bytes; each bad input is one
// Error sentence saying what is wrong (fuzzed: tests/fuzz/worker_channel_fuzz.cc).
// Thread safety: pure functions over plain values; a FrameReader belongs to one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "daemon/core/result.h"

namespace elastic::worker_channel {

// The version this build speaks. A peer's hello with a higher one is fine (fields are only
// added); with 0 it is not a peer of this protocol.
inline constexpr std::uint64_t kProtocolVersion = 1;
// Real messages are a few hundred bytes; the bound keeps a hostile worker from making the
// daemon buffer without limit.
inline constexpr std::uint32_t kMaxFrameBytes = 64 * 1024;
// The environment variable that carries the worker's descriptor number.
inline constexpr const char* kWorkerFdVariable = "ELASTIC_WORKER_FD";

struct Hello {
  std::uint64_t version = kProtocolVersion;
  bool live = false;
};

struct Joined {
  std::uint64_t round = 0;
  std::uint64_t term = 0;
};

// How often a worker that sends "alive" sends it: a silence of a few periods means its process
// is stopped or frozen (worker_liveness.h).
inline constexpr std::chrono::milliseconds kAlivePeriod{500};

struct Alive {
  std::uint64_t step = 0;     // steps the worker has completed (its training state's step)
  std::uint64_t idle_ms = 0;  // since its step last changed
  bool waiting = false;       // its training thread waits for its peers in a collective
};

// The torchrun-compatible contract of one rank in one round (trainer/worker_env.h reads the
// same values from the environment at exec).
struct RoundOffer {
  std::string job;
  std::uint64_t round = 0;
  std::uint64_t term = 0;
  std::uint32_t rank = 0;
  std::uint32_t local_rank = 0;
  std::uint32_t world_size = 1;
  std::uint32_t local_world_size = 1;
  std::uint32_t group_rank = 0;
  std::string master_addr;
  std::uint32_t master_port = 0;
  std::uint32_t restart_count = 0;
  // The old group is healthy and all of it goes on (see "intact" above). Only a hint of how to
  // leave it: a worker that ignores it aborts the group, which is always correct.
  bool intact = false;
};

struct Stop {
  std::string reason;
};

// A message of a type this build does not know (sent by a newer peer).
struct UnknownMessage {
  std::string type;
};

using WorkerMessage = std::variant<Hello, Joined, Alive, UnknownMessage>;
using DaemonMessage = std::variant<RoundOffer, Stop, UnknownMessage>;

// The JSON object of one message (no frame header).
std::string encode(const WorkerMessage& message);
std::string encode(const DaemonMessage& message);
// Decodes a frame's JSON. An Error names the message and the field: `The worker's "joined"
// message's "round" must be an integer >= 0 (a round number), not a string.`
Result<WorkerMessage> decode_worker_message(std::string_view json);
Result<DaemonMessage> decode_daemon_message(std::string_view json);

// The frame of one JSON object: its length as 4 big-endian bytes, then the object.
std::string frame(std::string_view json);

// Splits a byte stream into frames. Once a frame header is bad (length 0 or above
// kMaxFrameBytes) the stream cannot be resynchronised: every later next() returns the same
// Error, and append() drops its bytes.
class FrameReader {
 public:
  void append(const char* data, std::size_t size);
  // The next complete frame's JSON, nullopt until one is complete, or the Error of a bad header.
  Result<std::optional<std::string>> next();
  // Bytes appended that next() has not returned yet. A caller that drains next() after each
  // append() of at most N bytes holds at most 4 + kMaxFrameBytes + N.
  std::size_t buffered() const { return buffer_.size() - start_; }
  bool broken() const { return !error_.empty(); }

 private:
  std::string buffer_;
  std::size_t start_ = 0;  // consumed prefix of buffer_, dropped when it grows large
  std::string error_;
};

}  // namespace elastic::worker_channel
