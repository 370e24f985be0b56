// The job table's MessagePack codec: commands (encode_command, decode_command), job records
// and snapshots (JobTable::snapshot, JobTable::restore), apart from the state machine that
// applies them (job_table.cc). Decoding refuses what the state machine could not hold (sizes,
// names, enum values) with one sentence, never throws, and never aborts on hostile bytes.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/job_table_internal.h"
#include "daemon/rendezvous/msgpack_fields.h"

namespace elastic::rendezvous {

using internal::EpochMillis;
using internal::MapReader;
using internal::Need;
using table_internal::kMaxClientIdBytes;
using table_internal::kMaxJobIdBytes;
using table_internal::kMaxNodeNameBytes;
using wire::internal::EnumMax;
using wire::internal::Items;
using wire::internal::KeyField;
using wire::internal::Like;
using wire::internal::MaxBytes;
using wire::internal::Via;
using wire::internal::When;
using wire::internal::Within;

// ---------------------------------------------------------------------------------------------
// The schema (daemon/wire/msgpack_schema.h): keys in the order they are persisted in Raft logs
// and snapshots. Every field is required unless it says otherwise.

namespace {

// Only ever appended: a number once used keeps its meaning in every Raft log.
enum class Kind : std::uint8_t {
  kSubmit = 1,
  kCancel = 2,
  kOpen = 3,
  kSet = 4,
  kDrain = 5,
  kPriority = 6,
  kSuspend = 7,
  kScale = 8,
  kHistory = 9,
};

// A version key that must equal `kVersion`: commands and snapshots of another version are
// refused right after "v" is read, before anything else is looked at.
template <std::uint32_t kVersion>
struct Version {
  static void pack(internal::Packer& p, std::uint32_t version) { p.pack_uint64(version); }
  static void read(MapReader& r, std::string_view key, Need need, std::uint32_t* out) {
    r.uint(key, out, need);
    if (r.ok() && *out != kVersion) {
      r.fail("has version " + std::to_string(*out) + ", this daemon reads version " +
             std::to_string(kVersion));
    }
  }
};

// What every command starts with: the format version and which command follows.
struct CommandHeader {
  std::uint32_t version = kCommandVersion;
  Kind kind = Kind::kSubmit;
};
template <typename V, Like<CommandHeader> M>
void visit_fields(V& v, M& h) {
  v.field("v", h.version, Via<Version<kCommandVersion>>{});
  v.field("k", h.kind);
}

}  // namespace

constexpr Items kRankMap{"rank map entry", kMaxNodesPerJob};
constexpr Within kSpecOf{"the spec of"};

template <typename V, Like<RankAssignment> M>
void visit_fields(V& v, M& a) {
  v.field("n", a.node, MaxBytes{kMaxNodeNameBytes});
  v.field("g", a.generation);
  v.field("s", a.slots);
  v.field("f", a.first_rank);
  // A count of 0 is left out: rank maps without restarts keep the bytes of older daemons.
  v.field("rc", a.restarts, When{a.restarts != 0});
}

// A rank delta's run (rank_delta.h): every key only when not 0 or empty, so a copy is
// {"b", "c", "ri"} and an entry {"n", "g", "s", "rc"}, and any decoded run encodes back to
// itself; which runs mean something is apply()'s question.
template <typename V, Like<RankRun> M>
void visit_fields(V& v, M& run) {
  v.field("b", run.from, When{run.from != 0});
  v.field("c", run.count, When{run.count != 0});
  v.field("ri", run.add_restarts, When{run.add_restarts != 0});
  v.field("n", run.node, MaxBytes{kMaxNodeNameBytes}, When{!run.node.empty()});
  v.field("g", run.generation, When{run.generation != 0});
  v.field("s", run.slots, When{run.slots != 0});
  v.field("rc", run.restarts, When{run.restarts != 0});
}
template <typename V, Like<RankDelta> M>
void visit_fields(V& v, M& d) {
  v.field("br", d.base_round);
  v.field("bn", d.base_size);
  v.field("ru", d.runs, Items{"rank run", kMaxNodesPerJob});
}

template <typename V, Like<SubmitJob> M>
void visit_fields(V& v, M& c) {
  v.field("ci", c.client_id, MaxBytes{kMaxClientIdBytes});
  v.field("cs", c.client_seq);
  v.field("s", c.spec, kSpecOf);
  v.field("at", c.submitted_at, Via<EpochMillis>{});
}
template <typename V, Like<CancelJob> M>
void visit_fields(V& v, M& c) {
  v.field("ci", c.client_id, MaxBytes{kMaxClientIdBytes});
  v.field("cs", c.client_seq);
  v.field("j", c.job_id, MaxBytes{kMaxJobIdBytes});
  v.field("bu", c.by_uid);
  v.field("ad", c.is_admin);
  v.field("at", c.at, Via<EpochMillis>{});
}
template <typename V, Like<OpenRound> M>
void visit_fields(V& v, M& c) {
  v.field("j", c.job_id, MaxBytes{kMaxJobIdBytes});
  v.field("r", c.round);
  v.field("pr", c.expected_prev_round);
  // Required unless the command carries a delta instead (check_fields).
  v.field("rm", c.ranks, kRankMap, When{!c.delta});
  v.field("se", c.store_endpoint, MaxBytes{kMaxEndpointBytes});
  v.field("rs", c.reason, EnumMax{kMaxRoundReason});
  v.field("d", c.detail, MaxBytes{kMaxReasonBytes});
  v.field("at", c.at, Via<EpochMillis>{});
  // An unknown failed node is left out (the bytes of older daemons).
  v.field("fn", c.failed_node, MaxBytes{kMaxNodeNameBytes}, When{!c.failed_node.empty()});
  // The rank map as a delta (job_table.h): only instead of "rm", which older daemons require.
  v.field("dl", c.delta, Within{"the rank delta of"});
}
void check_fields(MapReader& r, const OpenRound& c) {
  if (!c.delta) {
    r.find("rm", Need::kRequired);  // neither: "is missing key 'rm'", as before deltas
  } else if (r.find("rm", Need::kOptional) != nullptr) {
    r.fail("has both a rank map and a rank delta");
  }
}
template <typename V, Like<SetJobState> M>
void visit_fields(V& v, M& c) {
  v.field("j", c.job_id, MaxBytes{kMaxJobIdBytes});
  v.field("r", c.round);
  v.field("st", c.state, EnumMax{kMaxJobState});
  v.field("ca", c.cause, EnumMax{kMaxRoundReason});
  v.field("rs", c.reason, MaxBytes{kMaxReasonBytes});
  v.field("at", c.at, Via<EpochMillis>{});
  v.field("fn", c.failed_node, MaxBytes{kMaxNodeNameBytes}, When{!c.failed_node.empty()});
}
template <typename V, Like<DrainNode> M>
void visit_fields(V& v, M& c) {
  v.field("ci", c.client_id, MaxBytes{kMaxClientIdBytes});
  v.field("cs", c.client_seq);
  // The wire limit, not kMaxDrainNodeBytes: a too long name decodes and apply() refuses it
  // with a sentence the operator can act on.
  v.field("n", c.node, MaxBytes{kMaxNodeNameBytes});
  v.field("dr", c.drained);
  v.field("rs", c.reason, MaxBytes{kMaxReasonBytes});
  v.field("bu", c.by_uid);
  v.field("ad", c.is_admin);
  v.field("at", c.at, Via<EpochMillis>{});
}

template <typename V, Like<SetPriority> M>
void visit_fields(V& v, M& c) {
  v.field("ci", c.client_id, MaxBytes{kMaxClientIdBytes});
  v.field("cs", c.client_seq);
  v.field("j", c.job_id, MaxBytes{kMaxJobIdBytes});
  v.field("p", c.priority, Via<internal::Signed32>{});
  v.field("ce", c.ceiling, Via<internal::Signed32>{});
  v.field("bu", c.by_uid);
  v.field("ad", c.is_admin);
  v.field("at", c.at, Via<EpochMillis>{});
}
template <typename V, Like<SuspendJob> M>
void visit_fields(V& v, M& c) {
  v.field("ci", c.client_id, MaxBytes{kMaxClientIdBytes});
  v.field("cs", c.client_seq);
  v.field("j", c.job_id, MaxBytes{kMaxJobIdBytes});
  v.field("re", c.resume);
  v.field("bu", c.by_uid);
  v.field("ad", c.is_admin);
  v.field("at", c.at, Via<EpochMillis>{});
}

// Throughput scaling's rates: a map of at most kMaxNodesPerJob sizes (unsigned) to samples per
// second (finite numbers; apply() refuses a negative one).
struct ScaleRates {
  using Rates = std::map<std::uint32_t, double>;
  static void pack(internal::Packer& p, const Rates& rates) {
    p.pack_map(static_cast<std::uint32_t>(rates.size()));
    for (const auto& [nodes, rate] : rates) {
      p.pack_uint32(nodes);
      p.pack_double(rate);
    }
  }
  static void read(MapReader& r, std::string_view key, Need need, Rates* out) {
    const msgpack::object* rates = r.find(key, need);
    if (rates == nullptr) return;
    if (rates->type != msgpack::type::MAP || rates->via.map.size > kMaxNodesPerJob) {
      r.fail("has key '" + std::string(key) + "' that is not a map of at most " +
             std::to_string(kMaxNodesPerJob) + " sizes");
      return;
    }
    for (std::uint32_t i = 0; i < rates->via.map.size && r.ok(); ++i) {
      const msgpack::object& k = rates->via.map.ptr[i].key;
      const msgpack::object& v = rates->via.map.ptr[i].val;
      const std::optional<double> number = internal::number_of(v);
      const double rate = number.value_or(0);
      if (k.type != msgpack::type::POSITIVE_INTEGER || k.via.u64 > kMaxNodesPerJob || !number ||
          !std::isfinite(rate)) {
        r.fail("has scale rate " + std::to_string(i) +
               " that is not a node count with a finite number");
        break;
      }
      if (!out->emplace(static_cast<std::uint32_t>(k.via.u64), rate).second) {
        r.fail("has a scale rate for " + std::to_string(k.via.u64) + " nodes twice");
      }
    }
  }
};

template <typename V, Like<ScaleState> M>
void visit_fields(V& v, M& s) {
  v.field("sz", s.size);
  v.field("gd", s.good);
  v.field("st", s.settled);
  v.field("rt", s.rate, Via<ScaleRates>{});
}
constexpr Within kScaleOf{"the scale state of"};
template <typename V, Like<SetScale> M>
void visit_fields(V& v, M& c) {
  v.field("j", c.job_id, MaxBytes{kMaxJobIdBytes});
  v.field("r", c.round);
  v.field("sc", c.state, kScaleOf);
  v.field("rs", c.reason, MaxBytes{kMaxReasonBytes});
  v.field("at", c.at, Via<EpochMillis>{});
}

// History (history.h).
constexpr std::size_t kMaxCauseBytes = 32;

template <typename V, Like<SeriesPoint> M>
void visit_fields(V& v, M& p) {
  v.field("at", p.at, Via<EpochMillis>{});
  v.field("sp", p.samples_per_s, Via<internal::FiniteFloat>{});
  v.field("ls", p.loss, Via<internal::FiniteFloat>{});
}
constexpr Within kPointOf{"a series point of"};
template <typename V, Like<JobPoint> M>
void visit_fields(V& v, M& p) {
  v.field("j", p.job_id, MaxBytes{kMaxJobIdBytes});
  v.field("p", p.point, kPointOf);
}
template <typename V, Like<Incident> M>
void visit_fields(V& v, M& i) {
  v.field("i", i.id);
  v.field("j", i.job, MaxBytes{kMaxJobIdBytes});
  v.field("c", i.cause, MaxBytes{kMaxCauseBytes});
  v.field("n", i.node, MaxBytes{kMaxNodeNameBytes});
  v.field("fr", i.from_round);
  v.field("tr", i.to_round);
  v.field("at", i.at_ms, Via<internal::Signed64>{});
  v.field("dt", i.detected_s, Via<internal::FiniteFloat>{});
  v.field("sp", i.stopped_s, Via<internal::FiniteFloat>{});
  v.field("rz", i.rendezvous_s, Via<internal::FiniteFloat>{});
  v.field("fs", i.first_step_s, Via<internal::FiniteFloat>{});
  v.field("sl", i.steps_lost, Via<internal::Signed64>{});
  v.field("cp", i.complete);
  v.field("tn", i.to_nodes);
  v.field("rf", i.resumed_from, Via<internal::Signed64>{});
  v.field("gu", i.given_up);
  v.field("pr", i.progress_reports);
}
template <typename V, Like<ClusterEvent> M>
void visit_fields(V& v, M& e) {
  v.field("at", e.at_ms, Via<internal::Signed64>{});
  v.field("k", e.kind, MaxBytes{kMaxCauseBytes});
  v.field("n", e.node, MaxBytes{kMaxNodeNameBytes});
  v.field("j", e.job, MaxBytes{kMaxJobIdBytes});
  v.field("d", e.detail, MaxBytes{kMaxReasonBytes});
}
template <typename V, Like<RecordHistory> M>
void visit_fields(V& v, M& c) {
  v.field("pt", c.points, Items{"series point", kMaxHistoryBatch});
  v.field("in", c.incidents, Items{"incident", kMaxHistoryBatch});
  v.field("ev", c.events, Items{"cluster event", kMaxHistoryBatch});
}

// Recovery durations by cause: {cause: {"c": [11 counts], "s": sum, "n": count}}.
struct StatsByCause {
  using Stats = std::map<std::string, RecoveryStats>;
  static void pack(internal::Packer& p, const Stats& stats) {
    p.pack_map(static_cast<std::uint32_t>(stats.size()));
    for (const auto& [cause, s] : stats) {
      p.pack(cause);
      p.pack_map(3);
      p.pack(std::string("c"));
      p.pack_array(static_cast<std::uint32_t>(s.counts.size()));
      for (const std::uint64_t n : s.counts) p.pack_uint64(n);
      p.pack(std::string("s"));
      p.pack_double(s.sum);
      p.pack(std::string("n"));
      p.pack_uint64(s.count);
    }
  }
  static void read(MapReader& r, std::string_view key, Need need, Stats* out) {
    const msgpack::object* stats = r.find(key, need);
    if (stats == nullptr) return;
    if (stats->type != msgpack::type::MAP || stats->via.map.size > 16) {
      r.fail("has key '" + std::string(key) + "' that is not a map of at most 16 causes");
      return;
    }
    out->clear();
    for (std::uint32_t i = 0; i < stats->via.map.size && r.ok(); ++i) {
      const msgpack::object& k = stats->via.map.ptr[i].key;
      const msgpack::object& v = stats->via.map.ptr[i].val;
      RecoveryStats s;
      bool ok = k.type == msgpack::type::STR && k.via.str.size <= kMaxCauseBytes &&
                v.type == msgpack::type::MAP && v.via.map.size == 3;
      for (std::uint32_t f = 0; ok && f < 3; ++f) {
        const msgpack::object& name = v.via.map.ptr[f].key;
        const msgpack::object& value = v.via.map.ptr[f].val;
        const std::string_view field =
            name.type == msgpack::type::STR ? std::string_view(name.via.str.ptr, name.via.str.size)
                                            : std::string_view();
        if (field == "c" && value.type == msgpack::type::ARRAY &&
            value.via.array.size == s.counts.size()) {
          for (std::uint32_t b = 0; ok && b < s.counts.size(); ++b) {
            const msgpack::object& n = value.via.array.ptr[b];
            ok = n.type == msgpack::type::POSITIVE_INTEGER;
            if (ok) s.counts[b] = n.via.u64;
          }
        } else if (field == "s" && value.type != msgpack::type::NEGATIVE_INTEGER &&
                   internal::number_of(value)) {
          s.sum = *internal::number_of(value);
        } else if (field == "n" && value.type == msgpack::type::POSITIVE_INTEGER) {
          s.count = value.via.u64;
        } else {
          ok = false;
        }
      }
      ok = ok && std::isfinite(s.sum);
      if (!ok) {
        r.fail("has recovery durations " + std::to_string(i) +
               " that are not a cause with 11 counts, a sum and a count");
        break;
      }
      if (!out->emplace(std::string(k.via.str.ptr, k.via.str.size), s).second) {
        r.fail("has the recovery durations of one cause twice");
      }
    }
  }
};

template <typename V, Like<History> M>
void visit_fields(V& v, M& h) {
  v.field("in", h.incidents, Items{"incident", kMaxIncidents});
  v.field("ev", h.events, Items{"cluster event", kMaxEvents});
  v.field("st", h.stats, Via<StatsByCause>{});
}
constexpr Within kHistoryOf{"the history of"};

// Snapshot pieces.

template <typename V, Like<JobEvent> M>
void visit_fields(V& v, M& e) {
  v.field("at", e.at, Via<EpochMillis>{});
  v.field("r", e.round);
  v.field("f", e.from, EnumMax{kMaxJobState});
  v.field("t", e.to, EnumMax{kMaxJobState});
  v.field("rs", e.reason, MaxBytes{kMaxReasonBytes});
}

template <typename V, Like<JobRecord> M>
void visit_fields(V& v, M& j) {
  v.field("id", j.id, MaxBytes{kMaxJobIdBytes});
  v.field("s", j.spec, kSpecOf);
  v.field("st", j.state, EnumMax{kMaxJobState});
  v.field("sa", j.submitted_at, Via<EpochMillis>{});
  v.field("ss", j.state_since, Via<EpochMillis>{});
  v.field("rs", j.reason, MaxBytes{kMaxReasonBytes});
  v.field("rc", j.recovery_cause, EnumMax{kMaxRoundReason});
  v.field("nr", j.restarts);
  v.field("r", j.round);
  v.field("rm", j.ranks, kRankMap);
  v.field("se", j.store_endpoint, MaxBytes{kMaxEndpointBytes});
  v.field("rr", j.round_reason, EnumMax{kMaxRoundReason});
  v.field("ro", j.round_opened_at, Via<EpochMillis>{});
  v.field("ci", j.created_index);
  v.field("ei", j.ended_index);
  v.field("ev", j.events, Items{"event", kMaxEventsPerJob});
  v.field("fn", j.failed_node, MaxBytes{kMaxNodeNameBytes}, When{!j.failed_node.empty()});
  // Only when the job was ever requeued: other records keep the bytes of older daemons.
  v.field("pe", j.preemptions, When{j.preemptions != 0});
  // Only for a job that scaled: other records keep the bytes of older daemons.
  v.field("sc", j.scale, kScaleOf, When{j.scale != ScaleState{}});
  v.field("sr", j.series, Items{"series point", kMaxSeriesPoints}, When{!j.series.empty()});
}
void check_fields(MapReader& r, const JobRecord& j) {
  if (is_terminal(j.state) != (j.ended_index != 0)) {
    r.fail("has an end index that does not match its state");
    return;
  }
  // Only valid specs become jobs; the planner relies on min_nodes >= 1 and min <= max.
  if (Status valid = validate(j.spec); !valid) {
    r.fail("has an invalid spec (" + valid.error().message + ")");
  }
}

template <typename V, Like<ClientSession> M>
void visit_fields(V& v, M& c) {
  v.field("s", c.last_seq);
  v.field("c", c.code, EnumMax{static_cast<std::uint8_t>(ApplyCode::kDenied)});
  v.field("j", c.job_id, MaxBytes{kMaxJobIdBytes});
  v.field("m", c.message, MaxBytes{wire::kMaxUnknownStringBytes});
  v.field("i", c.last_index);
}

template <typename V, Like<NodeDrain> M>
void visit_fields(V& v, M& d) {
  v.field("rs", d.reason, MaxBytes{kMaxReasonBytes});
  v.field("at", d.at, Via<EpochMillis>{});
  v.field("bu", d.by_uid);
}

namespace {

// The jobs of a snapshot, by id (each record carries its own id), and no more than a table
// keeps of either kind.
struct SnapshotJobs {
  using Jobs = std::map<std::string, JobRecord>;
  static void pack(internal::Packer& p, const Jobs& jobs) {
    p.pack_array(static_cast<std::uint32_t>(jobs.size()));
    for (const auto& [id, job] : jobs) wire::internal::pack_fields(p, job);
  }
  static void read(MapReader& r, std::string_view key, Need need, Jobs* jobs) {
    wire::internal::read_value(r, key, need, *jobs, Items{"job", kMaxActiveJobs + kMaxTerminalJobs},
                               wire::internal::KeyMember<JobRecord>{&JobRecord::id});
    std::size_t active = 0;
    for (const auto& [id, job] : *jobs) active += is_terminal(job.state) ? 0 : 1;
    if (r.ok() && (active > kMaxActiveJobs || jobs->size() - active > kMaxTerminalJobs)) {
      r.fail("holds more jobs than a table keeps");
    }
  }
};

const char* drained_node_problem(const std::string& node) {
  return table_internal::drain_node_problem(node).empty()
             ? nullptr
             : "has a drained node with an invalid name";
}

// A snapshot: the table's members, by reference (const ones to write it, others to read it).
template <bool kConst>
struct TableImage {
  template <typename T>
  using Ref = std::conditional_t<kConst, const T&, T&>;
  Ref<std::uint32_t> version;
  Ref<Index> applied_index;
  Ref<std::uint64_t> jobs_created;
  Ref<std::map<std::string, JobRecord>> jobs;
  Ref<std::map<std::string, ClientSession>> clients;
  Ref<std::map<std::string, NodeDrain>> drained;
  Ref<History> history;
};
template <typename V, bool kConst>
void visit_fields(V& v, const TableImage<kConst>& t) {
  v.field("v", t.version, Via<Version<kSnapshotVersion>>{});
  v.field("ai", t.applied_index);
  v.field("nj", t.jobs_created);
  v.field("jobs", t.jobs, Via<SnapshotJobs>{});
  v.field("cl", t.clients, Items{"client", kMaxClientSessions}, KeyField{"id", kMaxClientIdBytes});
  // Only when a node is drained, so a table without drains snapshots to the same bytes as
  // before drains existed (and restore() of such bytes round-trips exactly).
  v.field("dr", t.drained, Items{"drained node", kMaxDrainedNodes},
          KeyField{"n", kMaxDrainNodeBytes, &drained_node_problem}, When{!t.drained.empty()});
  // Only once a leader recorded history: a table without it keeps its older bytes.
  v.field("hi", t.history, kHistoryOf, When{t.history != History{}});
}

constexpr Kind kind_of(const SubmitJob&) { return Kind::kSubmit; }
constexpr Kind kind_of(const CancelJob&) { return Kind::kCancel; }
constexpr Kind kind_of(const OpenRound&) { return Kind::kOpen; }
constexpr Kind kind_of(const SetJobState&) { return Kind::kSet; }
constexpr Kind kind_of(const DrainNode&) { return Kind::kDrain; }
constexpr Kind kind_of(const SetPriority&) { return Kind::kPriority; }
constexpr Kind kind_of(const SuspendJob&) { return Kind::kSuspend; }
constexpr Kind kind_of(const SetScale&) { return Kind::kScale; }
constexpr Kind kind_of(const RecordHistory&) { return Kind::kHistory; }

template <typename T>
Result<Command> read_command(MapReader& r, internal::Failure* failure) {
  T command;
  wire::internal::read_fields(r, command);
  if (!r.ok()) return Error{std::move(failure->message)};
  return Command{std::move(command)};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Commands

std::string encode_command(const Command& command) {
  return std::visit(
      [](const auto& c) {
        return wire::internal::encode_fields(CommandHeader{kCommandVersion, kind_of(c)}, c);
      },
      command);
}

std::string encode_command_against(const Command& command, const RankMap& base) {
  std::string full = encode_command(command);
  const auto* open = std::get_if<OpenRound>(&command);
  if (open == nullptr || open->delta) return full;
  std::optional<RankDelta> delta = make_rank_delta(open->expected_prev_round, base, open->ranks);
  if (!delta) return full;
  OpenRound as_delta = *open;
  as_delta.ranks.clear();
  as_delta.delta = std::move(delta);
  std::string smaller = encode_command(as_delta);
  return smaller.size() < full.size() ? smaller : full;
}

Result<Command> decode_command(std::string_view bytes) {
  const std::string what = "The job table command";
  internal::Failure failure;
  msgpack::object_handle handle;
  if (!wire::internal::parse(bytes, {kMaxCommandValues, 0}, what, &handle, &failure)) {
    return Error{std::move(failure.message)};
  }
  MapReader r(handle.get(), what, &failure);
  CommandHeader header;
  wire::internal::read_fields(r, header);
  if (!r.ok()) return Error{std::move(failure.message)};
  switch (header.kind) {
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
    case Kind::kPriority:
      return read_command<SetPriority>(r, &failure);
    case Kind::kSuspend:
      return read_command<SuspendJob>(r, &failure);
    case Kind::kScale:
      return read_command<SetScale>(r, &failure);
    case Kind::kHistory:
      return read_command<RecordHistory>(r, &failure);
  }
  r.fail("has an unknown kind " + std::to_string(static_cast<unsigned>(header.kind)));
  return Error{std::move(failure.message)};
}

// ---------------------------------------------------------------------------------------------
// Snapshots

std::string JobTable::snapshot() const {
  const std::uint32_t version = kSnapshotVersion;
  return wire::internal::encode_fields(
      TableImage<true>{version, applied_index_, jobs_created_, jobs_, clients_, drained_,
                       history_});
}

Result<JobTable> JobTable::restore(std::string_view bytes) {
  const std::string what = "The job table snapshot";
  internal::Failure failure;
  JobTable table;
  std::uint32_t version = 0;
  TableImage<false> image{version,      table.applied_index_, table.jobs_created_,
                          table.jobs_,  table.clients_,       table.drained_,
                          table.history_};
  if (!wire::internal::decode_fields(bytes, {kMaxSnapshotValues, 0}, what, &failure, image)) {
    return Error{std::move(failure.message)};
  }
  table.jobs_index_.index = table.applied_index_;
  return table;
}

}  // namespace elastic::rendezvous
