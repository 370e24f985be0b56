#include "daemon/worker_channel/messages.h"

#include <nlohmann/json.hpp>

#include <limits>

#include "daemon/control/json_fields.h"
#include "daemon/control/protocol.h"

namespace elastic::worker_channel {
namespace {

using nlohmann::json;

// Bounds of the values a round carries: far above any real job, low enough that a hostile or
// broken daemon cannot make a worker allocate or loop on them.
constexpr std::uint64_t kMaxWorld = 1 << 24;
constexpr std::uint64_t kMaxPort = 65535;
constexpr std::size_t kMaxJobBytes = 256;
constexpr std::size_t kMaxAddressBytes = 1024;
constexpr std::size_t kMaxReasonBytes = 4096;
constexpr std::size_t kMaxTypeBytes = 64;
// A step count and an idle time a worker may report: far above any real run (2^53 steps, 10
// years idle), and small enough that time arithmetic on them cannot overflow.
constexpr std::uint64_t kMaxStep = std::uint64_t{1} << 53;
constexpr std::uint64_t kMaxIdleMs = std::uint64_t{10} * 365 * 24 * 3600 * 1000;

// Job ids and reasons come from outside: invalid UTF-8 is replaced instead of throwing.
std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

struct EncodeMessage {
  json operator()(const Hello& m) const {
    return {{"type", "hello"}, {"version", m.version}, {"live", m.live}};
  }
  json operator()(const Joined& m) const {
    return {{"type", "joined"}, {"round", m.round}, {"term", m.term}};
  }
  json operator()(const Alive& m) const {
    return {{"type", "alive"}, {"step", m.step}, {"idle_ms", m.idle_ms}, {"waiting", m.waiting}};
  }
  json operator()(const RoundOffer& m) const {
    return {{"type", "round"},
            {"job", m.job},
            {"round", m.round},
            {"term", m.term},
            {"rank", m.rank},
            {"local_rank", m.local_rank},
            {"world_size", m.world_size},
            {"local_world_size", m.local_world_size},
            {"group_rank", m.group_rank},
            {"master_addr", m.master_addr},
            {"master_port", m.master_port},
            {"restart_count", m.restart_count},
            {"intact", m.intact}};
  }
  json operator()(const Stop& m) const { return {{"type", "stop"}, {"reason", m.reason}}; }
  json operator()(const UnknownMessage& m) const { return {{"type", m.type}}; }
};

// Reads "type" first: every message needs it, and it picks the rest.
std::string read_type(control::JsonFields& fields) {
  std::string type;
  fields.string("type", /*required=*/true, kMaxTypeBytes, "the message type", type);
  return type;
}

void read_u32(control::JsonFields& fields, const char* key, const char* what, std::uint64_t max,
              std::uint32_t& out) {
  std::uint64_t value = out;
  fields.unsigned_number(key, /*required=*/true, what, value, max);
  out = static_cast<std::uint32_t>(value);
}

Result<RoundOffer> read_round(control::JsonFields& fields, const std::string& subject) {
  RoundOffer m;
  fields.string("job", true, kMaxJobBytes, "a job id", m.job);
  fields.unsigned_number("round", true, "a round number", m.round);
  fields.unsigned_number("term", true, "a Raft term", m.term);
  read_u32(fields, "world_size", "the number of ranks", kMaxWorld, m.world_size);
  read_u32(fields, "rank", "a global rank", kMaxWorld, m.rank);
  read_u32(fields, "local_world_size", "the ranks on this node", kMaxWorld, m.local_world_size);
  read_u32(fields, "local_rank", "a rank on this node", kMaxWorld, m.local_rank);
  read_u32(fields, "group_rank", "this node's index in the round", kMaxWorld, m.group_rank);
  fields.string("master_addr", true, kMaxAddressBytes, "the store's host", m.master_addr);
  read_u32(fields, "master_port", "the store's port", kMaxPort, m.master_port);
  read_u32(fields, "restart_count", "the rounds before this one", std::numeric_limits<int>::max(),
           m.restart_count);
  fields.boolean("intact", /*required=*/false, "whether the current group goes on whole", m.intact);
  if (!fields.ok()) return Error{fields.error()};
  if (m.world_size == 0 || m.rank >= m.world_size) {
    return Error{subject + " gives rank " + std::to_string(m.rank) + " of a world of " +
                 std::to_string(m.world_size) + "."};
  }
  if (m.local_world_size == 0 || m.local_world_size > m.world_size ||
      m.local_rank >= m.local_world_size) {
    return Error{subject + " gives local rank " + std::to_string(m.local_rank) + " of " +
                 std::to_string(m.local_world_size) + " on this node in a world of " +
                 std::to_string(m.world_size) + "."};
  }
  if (m.master_port == 0) return Error{subject + " gives no store port (0)."};
  return m;
}

}  // namespace

std::string encode(const WorkerMessage& message) {
  return dump(std::visit(EncodeMessage{}, message));
}

std::string encode(const DaemonMessage& message) {
  return dump(std::visit(EncodeMessage{}, message));
}

Result<WorkerMessage> decode_worker_message(std::string_view text) {
  control::JsonFields fields("The worker's message", text);
  const std::string type = read_type(fields);
  if (!fields.ok()) return Error{fields.error()};
  const std::string subject = "The worker's \"" + type + "\" message";
  control::JsonFields body(subject, text);
  if (type == "hello") {
    Hello m;
    body.unsigned_number("version", true, "the protocol version", m.version);
    body.boolean("live", true, "whether it can re-form in place", m.live);
    if (!body.ok()) return Error{body.error()};
    if (m.version == 0) return Error{subject + " has version 0; the first version is 1."};
    return WorkerMessage(m);
  }
  if (type == "joined") {
    Joined m;
    body.unsigned_number("round", true, "a round number", m.round);
    body.unsigned_number("term", true, "a Raft term", m.term);
    if (!body.ok()) return Error{body.error()};
    return WorkerMessage(m);
  }
  if (type == "alive") {
    Alive m;
    body.unsigned_number("step", true, "the steps it completed", m.step, kMaxStep);
    body.unsigned_number("idle_ms", true, "milliseconds since its last step", m.idle_ms,
                         kMaxIdleMs);
    body.boolean("waiting", true, "whether it waits for its peers", m.waiting);
    if (!body.ok()) return Error{body.error()};
    return WorkerMessage(m);
  }
  return WorkerMessage(UnknownMessage{type});
}

Result<DaemonMessage> decode_daemon_message(std::string_view text) {
  control::JsonFields fields("The daemon's message", text);
  const std::string type = read_type(fields);
  if (!fields.ok()) return Error{fields.error()};
  const std::string subject = "The daemon's \"" + type + "\" message";
  control::JsonFields body(subject, text);
  if (type == "round") {
    Result<RoundOffer> round = read_round(body, subject);
    if (!round.ok()) return round.error();
    return DaemonMessage(std::move(*round));
  }
  if (type == "stop") {
    Stop m;
    body.string("reason", false, kMaxReasonBytes, "why", m.reason);
    if (!body.ok()) return Error{body.error()};
    return DaemonMessage(std::move(m));
  }
  return DaemonMessage(UnknownMessage{type});
}

std::string frame(std::string_view json_text) {
  std::string out = control::frame_header(static_cast<std::uint32_t>(json_text.size()));
  out.append(json_text);
  return out;
}

void FrameReader::append(const char* data, std::size_t size) {
  if (broken()) return;
  // Drop what was consumed before it can pile up; the rest is at most one frame.
  if (start_ > 0 && start_ >= buffer_.size() / 2) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  buffer_.append(data, size);
}

Result<std::optional<std::string>> FrameReader::next() {
  if (broken()) return Error{error_};
  if (buffered() < 4) return std::optional<std::string>();
  const std::uint32_t length =
      control::read_frame_header(reinterpret_cast<const unsigned char*>(buffer_.data() + start_));
  if (length == 0 || length > kMaxFrameBytes) {
    error_ = "a frame announces " + std::to_string(length) + " bytes; a frame holds 1 to " +
             std::to_string(kMaxFrameBytes) + ".";
    buffer_.clear();
    start_ = 0;
    return Error{error_};
  }
  if (buffered() < 4 + std::size_t{length}) return std::optional<std::string>();
  std::string json_text = buffer_.substr(start_ + 4, length);
  start_ += 4 + std::size_t{length};
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  }
  return std::optional<std::string>(std::move(json_text));
}

}  // namespace elastic::worker_channel
