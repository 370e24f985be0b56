#include "daemon/rendezvous/job_table.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <set>
#include <utility>

#include "daemon/rendezvous/msgpack_fields.h"

namespace elastic::rendezvous {

// ---------------------------------------------------------------------------------------------
// Vocabulary (types.h)

const char* to_string(JobState state) {
  switch (state) {
    case JobState::kPending:
      return "pending";
    case JobState::kRendezvous:
      return "rendezvous";
    case JobState::kRunning:
      return "running";
    case JobState::kRecovering:
      return "recovering";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

bool is_terminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

const char* to_string(RoundReason reason) {
  switch (reason) {
    case RoundReason::kSubmitted:
      return "submitted";
    case RoundReason::kMemberLost:
      return "member_lost";
    case RoundReason::kWorkerFailed:
      return "worker_failed";
    case RoundReason::kGrow:
      return "grow";
  }
  return "unknown";
}

std::uint64_t world_size(const RankMap& ranks) {
  std::uint64_t total = 0;
  for (const RankAssignment& r : ranks) total += r.slots;
  return total;
}

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "job table: broken invariant: %s\n", what);
  std::abort();
}

using internal::Failure;
using internal::MapReader;
using internal::Need;
using internal::Packer;
using internal::put_int_duration;
using internal::put_time;
using internal::read_string;
using internal::read_time;
using wire::internal::put_bool;
using wire::internal::put_key;
using wire::internal::put_str;
using wire::internal::put_uint;

constexpr std::size_t kMaxClientIdBytes = wire::kMaxNameBytes;
constexpr std::size_t kMaxJobIdBytes = kMaxJobNameBytes + 24;  // "<name>-<u64>"
constexpr std::size_t kMaxNodeNameBytes = wire::kMaxNameBytes;

// Only ever appended: a number once used keeps its meaning in every Raft log.
enum class Kind : std::uint8_t { kSubmit = 1, kCancel = 2, kOpen = 3, kSet = 4, kDrain = 5 };

ApplyResult rejected(std::string job_id, std::string message) {
  return ApplyResult{ApplyCode::kRejected, std::move(job_id), std::move(message), false};
}

ApplyResult denied(std::string job_id, std::string message) {
  return ApplyResult{ApplyCode::kDenied, std::move(job_id), std::move(message), false};
}

bool negative(WallTime t) { return t.time_since_epoch().count() < 0; }

// Why `node` cannot name a node to drain; "" when it can. Host names only, so a name can be
// printed in a sentence or a table without quoting.
std::string drain_node_problem(const std::string& node) {
  if (node.empty()) return "The node name is empty.";
  if (node.size() > kMaxDrainNodeBytes) {
    return "The node name is " + std::to_string(node.size()) + " bytes long, more than the " +
           std::to_string(kMaxDrainNodeBytes) + " a node name may have.";
  }
  const bool host_name = std::all_of(node.begin(), node.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '_' || ch == '-';
  });
  if (!host_name) {
    return "The node name may hold only letters, digits, '.', '_' and '-', as host names do.";
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Encoding

void pack_rank_map(Packer& p, std::string_view key, const RankMap& ranks) {
  put_key(p, key);
  p.pack_array(static_cast<std::uint32_t>(ranks.size()));
  for (const RankAssignment& r : ranks) {
    // A count of 0 is left out: rank maps without restarts keep the bytes of older daemons.
    p.pack_map(r.restarts != 0 ? 5 : 4);
    put_str(p, "n", r.node);
    put_uint(p, "g", r.generation);
    put_uint(p, "s", r.slots);
    put_uint(p, "f", r.first_rank);
    if (r.restarts != 0) put_uint(p, "rc", r.restarts);
  }
}

void pack_command(Packer& p, const SubmitJob& c) {
  p.pack_map(6);
  put_uint(p, "v", kCommandVersion);
  put_uint(p, "k", static_cast<std::uint8_t>(Kind::kSubmit));
  put_str(p, "ci", c.client_id);
  put_uint(p, "cs", c.client_seq);
  put_key(p, "s");
  internal::pack_job_spec(p, c.spec);
  put_time(p, "at", c.submitted_at);
}
void pack_command(Packer& p, const CancelJob& c) {
  p.pack_map(8);
  put_uint(p, "v", kCommandVersion);
  put_uint(p, "k", static_cast<std::uint8_t>(Kind::kCancel));
  put_str(p, "ci", c.client_id);
  put_uint(p, "cs", c.client_seq);
  put_str(p, "j", c.job_id);
  put_uint(p, "bu", c.by_uid);
  put_bool(p, "ad", c.is_admin);
  put_time(p, "at", c.at);
}
void pack_command(Packer& p, const OpenRound& c) {
  // An unknown failed node is left out (the bytes of older daemons).
  p.pack_map(c.failed_node.empty() ? 10 : 11);
  put_uint(p, "v", kCommandVersion);
  put_uint(p, "k", static_cast<std::uint8_t>(Kind::kOpen));
  put_str(p, "j", c.job_id);
  put_uint(p, "r", c.round);
  put_uint(p, "pr", c.expected_prev_round);
  pack_rank_map(p, "rm", c.ranks);
  put_str(p, "se", c.store_endpoint);
  put_uint(p, "rs", static_cast<std::uint8_t>(c.reason));
  put_str(p, "d", c.detail);
  put_time(p, "at", c.at);
  if (!c.failed_node.empty()) put_str(p, "fn", c.failed_node);
}
void pack_command(Packer& p, const SetJobState& c) {
  p.pack_map(c.failed_node.empty() ? 8 : 9);
  put_uint(p, "v", kCommandVersion);
  put_uint(p, "k", static_cast<std::uint8_t>(Kind::kSet));
  put_str(p, "j", c.job_id);
  put_uint(p, "r", c.round);
  put_uint(p, "st", static_cast<std::uint8_t>(c.state));
  put_uint(p, "ca", static_cast<std::uint8_t>(c.cause));
  put_str(p, "rs", c.reason);
  put_time(p, "at", c.at);
  if (!c.failed_node.empty()) put_str(p, "fn", c.failed_node);
}
void pack_command(Packer& p, const DrainNode& c) {
  p.pack_map(10);
  put_uint(p, "v", kCommandVersion);
  put_uint(p, "k", static_cast<std::uint8_t>(Kind::kDrain));
  put_str(p, "ci", c.client_id);
  put_uint(p, "cs", c.client_seq);
  put_str(p, "n", c.node);
  put_bool(p, "dr", c.drained);
  put_str(p, "rs", c.reason);
  put_uint(p, "bu", c.by_uid);
  put_bool(p, "ad", c.is_admin);
  put_time(p, "at", c.at);
}

// ---------------------------------------------------------------------------------------------
// Decoding

template <typename Enum>
void read_enum(MapReader& r, std::string_view key, std::uint8_t max, Enum* out) {
  std::uint8_t value = 0;
  r.uint(key, &value);
  if (!r.ok()) return;
  if (value > max) {
    r.fail("has key '" + std::string(key) + "' with an unknown value " + std::to_string(value));
    return;
  }
  *out = static_cast<Enum>(value);
}

void read_rank_map(MapReader& r, std::string_view key, RankMap* out) {
  const msgpack::object_array* array = r.array(key, kMaxNodesPerJob, Need::kRequired);
  if (array == nullptr) return;
  for (std::uint32_t i = 0; i < array->size; ++i) {
    MapReader er(array->ptr[i], "rank map entry " + std::to_string(i) + " of " + r.what(),
                 r.failure());
    RankAssignment a;
    read_string(er, "n", kMaxNodeNameBytes, &a.node);
    er.uint("g", &a.generation);
    er.uint("s", &a.slots);
    er.uint("f", &a.first_rank);
    er.uint("rc", &a.restarts, Need::kOptional);
    if (!er.ok()) {
      r.mark_failed();
      return;
    }
    out->push_back(std::move(a));
  }
}

void read_body(MapReader& r, SubmitJob* c) {
  read_string(r, "ci", kMaxClientIdBytes, &c->client_id);
  r.uint("cs", &c->client_seq);
  if (const msgpack::object* spec = r.find("s", Need::kRequired)) {
    if (!internal::read_job_spec(*spec, "the spec of " + r.what(), r.failure(), &c->spec)) {
      r.mark_failed();
    }
  }
  read_time(r, "at", &c->submitted_at);
}
void read_body(MapReader& r, CancelJob* c) {
  read_string(r, "ci", kMaxClientIdBytes, &c->client_id);
  r.uint("cs", &c->client_seq);
  read_string(r, "j", kMaxJobIdBytes, &c->job_id);
  r.uint("bu", &c->by_uid);
  r.boolean("ad", &c->is_admin, Need::kRequired);
  read_time(r, "at", &c->at);
}
void read_body(MapReader& r, OpenRound* c) {
  read_string(r, "j", kMaxJobIdBytes, &c->job_id);
  r.uint("r", &c->round);
  r.uint("pr", &c->expected_prev_round);
  read_rank_map(r, "rm", &c->ranks);
  read_string(r, "se", kMaxEndpointBytes, &c->store_endpoint);
  read_enum(r, "rs", kMaxRoundReason, &c->reason);
  read_string(r, "d", kMaxReasonBytes, &c->detail);
  read_time(r, "at", &c->at);
  read_string(r, "fn", kMaxNodeNameBytes, &c->failed_node, Need::kOptional);
}
void read_body(MapReader& r, SetJobState* c) {
  read_string(r, "j", kMaxJobIdBytes, &c->job_id);
  r.uint("r", &c->round);
  read_enum(r, "st", kMaxJobState, &c->state);
  read_enum(r, "ca", kMaxRoundReason, &c->cause);
  read_string(r, "rs", kMaxReasonBytes, &c->reason);
  read_time(r, "at", &c->at);
  read_string(r, "fn", kMaxNodeNameBytes, &c->failed_node, Need::kOptional);
}
void read_body(MapReader& r, DrainNode* c) {
  read_string(r, "ci", kMaxClientIdBytes, &c->client_id);
  r.uint("cs", &c->client_seq);
  // The wire limit, not kMaxDrainNodeBytes: a too long name decodes and apply() refuses it
  // with a sentence the operator can act on.
  read_string(r, "n", kMaxNodeNameBytes, &c->node);
  r.boolean("dr", &c->drained, Need::kRequired);
  read_string(r, "rs", kMaxReasonBytes, &c->reason);
  r.uint("bu", &c->by_uid);
  r.boolean("ad", &c->is_admin, Need::kRequired);
  read_time(r, "at", &c->at);
}

template <typename T>
Result<Command> read_command(MapReader& r, Failure* failure) {
  T command;
  read_body(r, &command);
  if (!r.ok()) return Error{std::move(failure->message)};
  return Command{std::move(command)};
}

// ---------------------------------------------------------------------------------------------
// Snapshot pieces

void pack_event(Packer& p, const JobEvent& e) {
  p.pack_map(5);
  put_time(p, "at", e.at);
  put_uint(p, "r", e.round);
  put_uint(p, "f", static_cast<std::uint8_t>(e.from));
  put_uint(p, "t", static_cast<std::uint8_t>(e.to));
  put_str(p, "rs", e.reason);
}

void pack_job(Packer& p, const JobRecord& j) {
  p.pack_map(j.failed_node.empty() ? 16 : 17);
  put_str(p, "id", j.id);
  put_key(p, "s");
  internal::pack_job_spec(p, j.spec);
  put_uint(p, "st", static_cast<std::uint8_t>(j.state));
  put_time(p, "sa", j.submitted_at);
  put_time(p, "ss", j.state_since);
  put_str(p, "rs", j.reason);
  put_uint(p, "rc", static_cast<std::uint8_t>(j.recovery_cause));
  put_uint(p, "nr", j.restarts);
  put_uint(p, "r", j.round);
  pack_rank_map(p, "rm", j.ranks);
  put_str(p, "se", j.store_endpoint);
  put_uint(p, "rr", static_cast<std::uint8_t>(j.round_reason));
  put_time(p, "ro", j.round_opened_at);
  put_uint(p, "ci", j.created_index);
  put_uint(p, "ei", j.ended_index);
  put_key(p, "ev");
  p.pack_array(static_cast<std::uint32_t>(j.events.size()));
  for (const JobEvent& e : j.events) pack_event(p, e);
  if (!j.failed_node.empty()) put_str(p, "fn", j.failed_node);
}

bool read_job(const msgpack::object& object, std::string what, Failure* failure, JobRecord* j) {
  MapReader r(object, std::move(what), failure);
  read_string(r, "id", kMaxJobIdBytes, &j->id);
  if (const msgpack::object* spec = r.find("s", Need::kRequired)) {
    if (!internal::read_job_spec(*spec, "the spec of " + r.what(), failure, &j->spec)) {
      r.mark_failed();
    }
  }
  read_enum(r, "st", kMaxJobState, &j->state);
  read_time(r, "sa", &j->submitted_at);
  read_time(r, "ss", &j->state_since);
  read_string(r, "rs", kMaxReasonBytes, &j->reason);
  read_enum(r, "rc", kMaxRoundReason, &j->recovery_cause);
  r.uint("nr", &j->restarts);
  read_string(r, "fn", kMaxNodeNameBytes, &j->failed_node, Need::kOptional);
  r.uint("r", &j->round);
  read_rank_map(r, "rm", &j->ranks);
  read_string(r, "se", kMaxEndpointBytes, &j->store_endpoint);
  read_enum(r, "rr", kMaxRoundReason, &j->round_reason);
  read_time(r, "ro", &j->round_opened_at);
  r.uint("ci", &j->created_index);
  r.uint("ei", &j->ended_index);
  if (const msgpack::object_array* events = r.array("ev", kMaxEventsPerJob, Need::kRequired)) {
    for (std::uint32_t i = 0; i < events->size && r.ok(); ++i) {
      MapReader er(events->ptr[i], "event " + std::to_string(i) + " of " + r.what(), failure);
      JobEvent e;
      read_time(er, "at", &e.at);
      er.uint("r", &e.round);
      read_enum(er, "f", kMaxJobState, &e.from);
      read_enum(er, "t", kMaxJobState, &e.to);
      read_string(er, "rs", kMaxReasonBytes, &e.reason);
      if (!er.ok()) {
        r.mark_failed();
        break;
      }
      j->events.push_back(std::move(e));
    }
  }
  if (r.ok() && is_terminal(j->state) != (j->ended_index != 0)) {
    r.fail("has an end index that does not match its state");
  }
  // Only valid specs become jobs; the planner relies on min_nodes >= 1 and min <= max.
  if (r.ok()) {
    if (Status valid = validate(j->spec); !valid)
      r.fail("has an invalid spec (" + valid.error().message + ")");
  }
  return r.ok();
}

// Checks an OpenRound's rank map against the spec; "" when it is well formed.
std::string rank_map_problem(const RankMap& ranks, const JobSpec& spec) {
  if (ranks.size() < spec.min_nodes || ranks.size() > spec.max_nodes) {
    return "its rank map has " + std::to_string(ranks.size()) + " nodes, outside the job's " +
           std::to_string(spec.min_nodes) + ".." + std::to_string(spec.max_nodes);
  }
  std::set<std::string_view> names;
  std::uint64_t next_rank = 0;
  for (const RankAssignment& r : ranks) {
    if (r.node.empty() || r.node.size() > kMaxNodeNameBytes) {
      return "its rank map has an empty or too long node name";
    }
    if (!names.insert(r.node).second) return "its rank map names node " + r.node + " twice";
    if (r.slots == 0) return "its rank map gives node " + r.node + " no slots";
    if (spec.workers_per_node != 0 && r.slots != spec.workers_per_node) {
      return "its rank map gives node " + r.node + " " + std::to_string(r.slots) +
             " slots, not the job's workers_per_node " + std::to_string(spec.workers_per_node);
    }
    if (r.first_rank != next_rank) {
      return "its rank map starts node " + r.node + " at rank " + std::to_string(r.first_rank) +
             " instead of " + std::to_string(next_rank);
    }
    next_rank += r.slots;
    if (next_rank > std::numeric_limits<std::uint32_t>::max()) {
      return "its rank map has more ranks than fit in 32 bits";
    }
  }
  return "";
}

bool transition_allowed(JobState from, JobState to) {
  switch (to) {
    case JobState::kRunning:
      return from == JobState::kRendezvous;
    case JobState::kRecovering:
    case JobState::kSucceeded:
      return from == JobState::kRendezvous || from == JobState::kRunning;
    case JobState::kFailed:
      return !is_terminal(from);
    default:
      return false;  // pending, rendezvous and cancelled come only from their own commands
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Commands

std::string encode_command(const Command& command) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  std::visit([&p](const auto& c) { pack_command(p, c); }, command);
  return std::string(buffer.data(), buffer.size());
}

Result<Command> decode_command(std::string_view bytes) {
  const std::string what = "The job table command";
  Failure failure;
  msgpack::object_handle handle;
  if (!wire::internal::parse(bytes, {kMaxCommandValues, 0}, what, &handle, &failure)) {
    return Error{std::move(failure.message)};
  }
  MapReader r(handle.get(), what, &failure);
  std::uint32_t version = 0;
  r.uint("v", &version);
  if (r.ok() && version != kCommandVersion) {
    r.fail("has version " + std::to_string(version) + ", this daemon reads version " +
           std::to_string(kCommandVersion));
  }
  std::uint8_t kind = 0;
  r.uint("k", &kind);
  if (!r.ok()) return Error{std::move(failure.message)};
  switch (static_cast<Kind>(kind)) {
    case Kind::kSubmit:
      return read_command<SubmitJob>(r, &failure);
    case Kind::kCancel:
      return read_command<CancelJob>(r, &failure);
    case Kind::kOpen:
      return read_command<OpenRound>(r, &failure);
    case Kind::kSet:
      return read_command<SetJobState>(r, &failure);
    case Kind::kDrain:
      return read_command<DrainNode>(r, &failure);
  }
  r.fail("has an unknown kind " + std::to_string(kind));
  return Error{std::move(failure.message)};
}

// ---------------------------------------------------------------------------------------------
// The table

const JobRecord* JobTable::job(std::string_view id) const {
  const auto it = jobs_.find(std::string(id));
  return it == jobs_.end() ? nullptr : &it->second;
}

ApplyResult JobTable::apply(Index index, std::string_view command_bytes) {
  if (index <= applied_index_) die("apply() with an index not above the last applied one");
  Result<Command> command = decode_command(command_bytes);
  if (!command) {
    applied_index_ = index;
    return ApplyResult{ApplyCode::kMalformed, "", command.error().message, false};
  }
  return apply(index, *command);
}

ApplyResult JobTable::apply(Index index, const Command& command) {
  if (index <= applied_index_) die("apply() with an index not above the last applied one");
  applied_index_ = index;
  return std::visit(
      [&](const auto& c) -> ApplyResult {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, SubmitJob>) {
          return apply_submit(index, c);
        } else if constexpr (std::is_same_v<T, CancelJob>) {
          return apply_cancel(index, c);
        } else if constexpr (std::is_same_v<T, OpenRound>) {
          return apply_open(index, c);
        } else if constexpr (std::is_same_v<T, SetJobState>) {
          return apply_set(index, c);
        } else {
          static_assert(std::is_same_v<T, DrainNode>);
          return apply_drain(index, c);
        }
      },
      command);
}

ApplyResult JobTable::remember(Index index, const std::string& client_id, std::uint64_t seq,
                               ApplyResult result) {
  auto [it, inserted] = clients_.try_emplace(client_id);
  it->second = ClientSession{seq, result.code, result.job_id, result.message, index};
  if (inserted && clients_.size() > kMaxClientSessions) {
    auto oldest = clients_.begin();
    for (auto c = clients_.begin(); c != clients_.end(); ++c) {
      if (c->second.last_index < oldest->second.last_index) oldest = c;
    }
    clients_.erase(oldest);
  }
  return result;
}

namespace {

// The remembered answer when (client_id, seq) was applied already, else nullopt; a refusal
// for a command without a usable client identity.
std::optional<ApplyResult> dedupe(const std::map<std::string, ClientSession>& clients,
                                  const std::string& client_id, std::uint64_t seq) {
  if (client_id.empty() || client_id.size() > kMaxClientIdBytes || seq == 0) {
    return rejected("",
                    "The command has no client id or sequence number, so it could not be "
                    "applied exactly once.");
  }
  const auto it = clients.find(client_id);
  if (it == clients.end() || seq > it->second.last_seq) return std::nullopt;
  return ApplyResult{it->second.code, it->second.job_id, it->second.message, true};
}

}  // namespace

ApplyResult JobTable::apply_submit(Index index, const SubmitJob& c) {
  if (std::optional<ApplyResult> seen = dedupe(clients_, c.client_id, c.client_seq)) {
    return *seen;
  }
  auto refuse = [&](std::string message) {
    return remember(index, c.client_id, c.client_seq, rejected("", std::move(message)));
  };
  if (Status valid = validate(c.spec); !valid) return refuse(valid.error().message);
  if (negative(c.submitted_at)) return refuse("The submission time is before 1970.");
  const auto active = static_cast<std::size_t>(std::count_if(
      jobs_.begin(), jobs_.end(), [](const auto& kv) { return !is_terminal(kv.second.state); }));
  if (active >= kMaxActiveJobs) {
    return refuse("The cluster already has " + std::to_string(active) +
                  " active jobs, the most it keeps; wait for some to finish.");
  }
  ++jobs_created_;
  JobRecord job;
  job.id = c.spec.name + "-" + std::to_string(jobs_created_);
  job.spec = c.spec;
  job.state = JobState::kPending;
  job.submitted_at = c.submitted_at;
  job.state_since = c.submitted_at;
  job.reason = "submitted by " + (c.spec.user.empty() ? std::string() : c.spec.user + " ") +
               "(uid " + std::to_string(c.spec.uid) + ")";
  job.created_index = index;
  job.events.push_back(
      JobEvent{c.submitted_at, 0, JobState::kPending, JobState::kPending, job.reason});
  const std::string id = job.id;
  if (!jobs_.emplace(id, std::move(job)).second) die("a new job id is already taken");
  return remember(index, c.client_id, c.client_seq,
                  ApplyResult{ApplyCode::kApplied, id, "", false});
}

ApplyResult JobTable::apply_cancel(Index index, const CancelJob& c) {
  if (std::optional<ApplyResult> seen = dedupe(clients_, c.client_id, c.client_seq)) {
    return *seen;
  }
  auto refuse = [&](std::string message) {
    return remember(index, c.client_id, c.client_seq, rejected(c.job_id, std::move(message)));
  };
  const auto it = jobs_.find(c.job_id);
  if (it == jobs_.end()) return refuse("There is no job " + c.job_id + ".");
  JobRecord& job = it->second;
  if (is_terminal(job.state)) {
    return refuse("Job " + c.job_id + " has already " +
                  (job.state == JobState::kCancelled ? std::string("been cancelled")
                                                     : std::string(to_string(job.state))) +
                  ".");
  }
  if (!c.is_admin && c.by_uid != job.spec.uid) {
    return remember(index, c.client_id, c.client_seq,
                    denied(c.job_id, "uid " + std::to_string(c.by_uid) + " may not cancel job " +
                                         c.job_id + " of uid " + std::to_string(job.spec.uid) +
                                         "; only its owner or an admin may."));
  }
  if (negative(c.at)) return refuse("The cancel time is before 1970.");
  change_state(index, job, JobState::kCancelled, c.at,
               "cancelled by uid " + std::to_string(c.by_uid) + (c.is_admin ? " (admin)" : ""));
  const std::string id = c.job_id;
  forget_old_terminal_jobs();
  return remember(index, c.client_id, c.client_seq,
                  ApplyResult{ApplyCode::kApplied, id, "", false});
}

ApplyResult JobTable::apply_open(Index index, const OpenRound& c) {
  const auto it = jobs_.find(c.job_id);
  if (it == jobs_.end()) return rejected(c.job_id, "There is no job " + c.job_id + ".");
  JobRecord& job = it->second;
  const std::string round = "round " + std::to_string(c.round) + " of job " + c.job_id;
  if (is_terminal(job.state)) {
    return rejected(c.job_id,
                    "Cannot open " + round + ": the job is " + to_string(job.state) + ".");
  }
  if (c.expected_prev_round != job.round) {
    return rejected(c.job_id, "Cannot open " + round + ": it was decided at round " +
                                  std::to_string(c.expected_prev_round) +
                                  " but the job is at round " + std::to_string(job.round) + ".");
  }
  if (c.round <= job.round) {
    return rejected(c.job_id, "Cannot open " + round + ": round numbers must increase past " +
                                  std::to_string(job.round) + ".");
  }
  if (static_cast<std::uint8_t>(c.reason) > kMaxRoundReason) {
    return rejected(c.job_id, "Cannot open " + round + ": its reason is unknown.");
  }
  if (std::string problem = rank_map_problem(c.ranks, job.spec); !problem.empty()) {
    return rejected(c.job_id, "Cannot open " + round + ": " + problem + ".");
  }
  if (c.store_endpoint.empty() || c.store_endpoint.size() > kMaxEndpointBytes) {
    return rejected(c.job_id,
                    "Cannot open " + round + ": its store endpoint is empty or too long.");
  }
  if (c.detail.size() > kMaxReasonBytes || negative(c.at)) {
    return rejected(c.job_id, "Cannot open " + round +
                                  ": its detail is too long or its time is "
                                  "before 1970.");
  }
  if (c.reason == RoundReason::kWorkerFailed) {
    if (job.restarts >= job.spec.max_restarts) {
      return rejected(c.job_id, "Cannot open " + round + ": the job has used all " +
                                    std::to_string(job.spec.max_restarts) + " restarts.");
    }
    ++job.restarts;
  }
  job.round = c.round;
  job.ranks = c.ranks;
  job.store_endpoint = c.store_endpoint;
  job.round_reason = c.reason;
  job.round_opened_at = c.at;
  job.failed_node.clear();
  std::string reason = "round " + std::to_string(c.round) + " opened (" + to_string(c.reason);
  if (c.reason == RoundReason::kWorkerFailed) {
    reason += ", restart " + std::to_string(job.restarts) + " of " +
              std::to_string(job.spec.max_restarts);
  }
  reason += ")";
  if (!c.detail.empty()) reason += ": " + c.detail;
  change_state(index, job, JobState::kRendezvous, c.at, std::move(reason));
  return ApplyResult{ApplyCode::kApplied, c.job_id, "", false};
}

ApplyResult JobTable::apply_set(Index index, const SetJobState& c) {
  const auto it = jobs_.find(c.job_id);
  if (it == jobs_.end()) return rejected(c.job_id, "There is no job " + c.job_id + ".");
  JobRecord& job = it->second;
  const std::string what = "Job " + c.job_id + " cannot become " + to_string(c.state);
  if (is_terminal(job.state)) {
    return rejected(c.job_id, what + ": it has already " + to_string(job.state) + ".");
  }
  if (c.round != job.round) {
    return rejected(c.job_id, what + " for round " + std::to_string(c.round) +
                                  ": the job is at round " + std::to_string(job.round) + ".");
  }
  if (static_cast<std::uint8_t>(c.state) > kMaxJobState ||
      static_cast<std::uint8_t>(c.cause) > kMaxRoundReason ||
      !transition_allowed(job.state, c.state)) {
    return rejected(c.job_id, what + " from " + to_string(job.state) + ".");
  }
  if (c.reason.size() > kMaxReasonBytes || negative(c.at)) {
    return rejected(c.job_id, what + ": the reason is too long or the time is before 1970.");
  }
  if (c.state == JobState::kRecovering) {
    job.recovery_cause = c.cause;
    job.failed_node = c.cause == RoundReason::kWorkerFailed ? c.failed_node : "";
  }
  change_state(index, job, c.state, c.at, c.reason);
  if (is_terminal(c.state)) forget_old_terminal_jobs();
  return ApplyResult{ApplyCode::kApplied, c.job_id, "", false};
}

ApplyResult JobTable::apply_drain(Index index, const DrainNode& c) {
  if (std::optional<ApplyResult> seen = dedupe(clients_, c.client_id, c.client_seq)) {
    return *seen;
  }
  auto refuse = [&](std::string message) {
    return remember(index, c.client_id, c.client_seq, rejected("", std::move(message)));
  };
  if (!c.is_admin) {
    return remember(index, c.client_id, c.client_seq,
                    denied("", "Only root or members of control.admin_group may drain nodes."));
  }
  if (std::string problem = drain_node_problem(c.node); !problem.empty()) return refuse(problem);
  if (c.reason.size() > kMaxReasonBytes) {
    return refuse("The drain reason is longer than " + std::to_string(kMaxReasonBytes) + " bytes.");
  }
  if (negative(c.at)) return refuse("The drain time is before 1970.");
  const auto it = drained_.find(c.node);
  if (c.drained && it == drained_.end()) {
    if (drained_.size() >= kMaxDrainedNodes) {
      return refuse("The cluster already has " + std::to_string(drained_.size()) +
                    " drained nodes, the most it keeps; undrain some first.");
    }
    drained_.emplace(c.node, NodeDrain{c.reason, c.at, c.by_uid});
  } else if (!c.drained && it != drained_.end()) {
    drained_.erase(it);
  }
  // Otherwise already as asked: the first drain's reason and time stay, so `nodes` keeps
  // saying since when the node has been out of service.
  return remember(index, c.client_id, c.client_seq, ApplyResult{});
}

void JobTable::change_state(Index index, JobRecord& job, JobState to, WallTime at,
                            std::string reason) {
  job.events.push_back(JobEvent{at, job.round, job.state, to, reason});
  if (job.events.size() > kMaxEventsPerJob) job.events.erase(job.events.begin());
  job.state = to;
  job.state_since = at;
  job.reason = std::move(reason);
  if (is_terminal(to)) job.ended_index = index;
}

void JobTable::forget_old_terminal_jobs() {
  std::size_t terminal = 0;
  for (const auto& [id, job] : jobs_) terminal += is_terminal(job.state) ? 1 : 0;
  while (terminal > kMaxTerminalJobs) {
    auto oldest = jobs_.end();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (!is_terminal(it->second.state)) continue;
      if (oldest == jobs_.end() || it->second.ended_index < oldest->second.ended_index) oldest = it;
    }
    jobs_.erase(oldest);
    --terminal;
  }
}

// ---------------------------------------------------------------------------------------------
// Snapshots

std::string JobTable::snapshot() const {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  // "dr" only when a node is drained, so a table without drains snapshots to the same bytes as
  // before drains existed (and restore() of such bytes round-trips exactly).
  p.pack_map(drained_.empty() ? 5 : 6);
  put_uint(p, "v", kSnapshotVersion);
  put_uint(p, "ai", applied_index_);
  put_uint(p, "nj", jobs_created_);
  put_key(p, "jobs");
  p.pack_array(static_cast<std::uint32_t>(jobs_.size()));
  for (const auto& [id, job] : jobs_) pack_job(p, job);
  put_key(p, "cl");
  p.pack_array(static_cast<std::uint32_t>(clients_.size()));
  for (const auto& [id, c] : clients_) {
    p.pack_map(6);
    put_str(p, "id", id);
    put_uint(p, "s", c.last_seq);
    put_uint(p, "c", static_cast<std::uint8_t>(c.code));
    put_str(p, "j", c.job_id);
    put_str(p, "m", c.message);
    put_uint(p, "i", c.last_index);
  }
  if (!drained_.empty()) {
    put_key(p, "dr");
    p.pack_array(static_cast<std::uint32_t>(drained_.size()));
    for (const auto& [node, d] : drained_) {
      p.pack_map(4);
      put_str(p, "n", node);
      put_str(p, "rs", d.reason);
      put_time(p, "at", d.at);
      put_uint(p, "bu", d.by_uid);
    }
  }
  return std::string(buffer.data(), buffer.size());
}

Result<JobTable> JobTable::restore(std::string_view bytes) {
  const std::string what = "The job table snapshot";
  Failure failure;
  msgpack::object_handle handle;
  if (!wire::internal::parse(bytes, {kMaxSnapshotValues, 0}, what, &handle, &failure)) {
    return Error{std::move(failure.message)};
  }
  MapReader r(handle.get(), what, &failure);
  std::uint32_t version = 0;
  r.uint("v", &version);
  if (r.ok() && version != kSnapshotVersion) {
    r.fail("has version " + std::to_string(version) + ", this daemon reads version " +
           std::to_string(kSnapshotVersion));
  }
  JobTable table;
  r.uint("ai", &table.applied_index_);
  r.uint("nj", &table.jobs_created_);
  std::size_t active = 0;
  std::size_t terminal = 0;
  if (const msgpack::object_array* jobs =
          r.array("jobs", kMaxActiveJobs + kMaxTerminalJobs, Need::kRequired)) {
    for (std::uint32_t i = 0; i < jobs->size && r.ok(); ++i) {
      JobRecord job;
      if (!read_job(jobs->ptr[i], "job " + std::to_string(i) + " of " + what, &failure, &job)) {
        r.mark_failed();
        break;
      }
      (is_terminal(job.state) ? terminal : active) += 1;
      const std::string id = job.id;
      if (!table.jobs_.emplace(id, std::move(job)).second) r.fail("has job " + id + " twice");
    }
  }
  if (r.ok() && (active > kMaxActiveJobs || terminal > kMaxTerminalJobs)) {
    r.fail("holds more jobs than a table keeps");
  }
  if (const msgpack::object_array* clients = r.array("cl", kMaxClientSessions, Need::kRequired)) {
    for (std::uint32_t i = 0; i < clients->size && r.ok(); ++i) {
      MapReader cr(clients->ptr[i], "client " + std::to_string(i) + " of " + what, &failure);
      std::string id;
      ClientSession c;
      read_string(cr, "id", kMaxClientIdBytes, &id);
      cr.uint("s", &c.last_seq);
      read_enum(cr, "c", static_cast<std::uint8_t>(ApplyCode::kDenied), &c.code);
      read_string(cr, "j", kMaxJobIdBytes, &c.job_id);
      read_string(cr, "m", wire::kMaxUnknownStringBytes, &c.message);
      cr.uint("i", &c.last_index);
      if (!cr.ok()) {
        r.mark_failed();
        break;
      }
      if (!table.clients_.emplace(id, std::move(c)).second) r.fail("has client " + id + " twice");
    }
  }
  // Optional: snapshots written before drains existed have no "dr", and neither do those of
  // tables without drained nodes.
  if (const msgpack::object_array* drained = r.array("dr", kMaxDrainedNodes, Need::kOptional)) {
    for (std::uint32_t i = 0; i < drained->size && r.ok(); ++i) {
      MapReader dr(drained->ptr[i], "drained node " + std::to_string(i) + " of " + what, &failure);
      std::string node;
      NodeDrain d;
      read_string(dr, "n", kMaxDrainNodeBytes, &node);
      read_string(dr, "rs", kMaxReasonBytes, &d.reason);
      read_time(dr, "at", &d.at);
      dr.uint("bu", &d.by_uid);
      if (!dr.ok()) {
        r.mark_failed();
        break;
      }
      if (!drain_node_problem(node).empty()) {
        r.fail("has a drained node with an invalid name");
      } else if (!table.drained_.emplace(node, std::move(d)).second) {
        r.fail("has drained node " + node + " twice");
      }
    }
  }
  if (!r.ok()) return Error{std::move(failure.message)};
  return table;
}

}  // namespace elastic::rendezvous
