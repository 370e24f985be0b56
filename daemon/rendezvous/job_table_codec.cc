// The job table's MessagePack codec: commands (encode_command, decode_command), job records
// and snapshots (JobTable::snapshot, JobTable::restore), apart from the state machine that
// applies them (job_table.cc). Decoding refuses what the state machine could not hold (sizes,
// names, enum values) with one sentence, never throws, and never aborts on hostile bytes.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <set>
#include <utility>

#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/job_table_internal.h"
#include "daemon/rendezvous/msgpack_fields.h"

namespace elastic::rendezvous {
namespace {

using internal::Failure;
using internal::MapReader;
using internal::Need;
using internal::Packer;
using internal::put_int_duration;
using internal::put_time;
using internal::read_string;
using internal::read_time;
using table_internal::drain_node_problem;
using table_internal::kMaxClientIdBytes;
using table_internal::kMaxJobIdBytes;
using table_internal::kMaxNodeNameBytes;
using wire::internal::put_bool;
using wire::internal::put_key;
using wire::internal::put_str;
using wire::internal::put_uint;

// Only ever appended: a number once used keeps its meaning in every Raft log.
enum class Kind : std::uint8_t { kSubmit = 1, kCancel = 2, kOpen = 3, kSet = 4, kDrain = 5 };

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
