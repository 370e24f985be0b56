// Internal: the MessagePack schema pieces shared by job_spec.cc and job_table_codec.cc: a
// JobSpec's fields (inside a SubmitJob, a snapshot's job record and a RoundStart) and the
// converters for values with an encoding of their own (durations, wall times, a command line,
// an environment). Include only from .cc files of elastic_rendezvous and of the node's own codecs
// (round_report.cc uses the number converters).
//
// Encoding and decoding follow daemon/wire/msgpack_schema.h: checks that cannot throw, the
// first problem is kept in the shared Failure and later reads are no-ops. Thread safety:
// functions on values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/time.h"
#include "daemon/rendezvous/job_spec.h"
#include "daemon/rendezvous/types.h"
#include "daemon/wire/msgpack_schema.h"

namespace elastic::rendezvous {
namespace internal {

using wire::internal::Failure;
using wire::internal::MapReader;
using wire::internal::Need;
using wire::internal::Packer;

// Converters for wire::internal::Via.
// A Duration as whole nanoseconds (a negative one is written as 0; more than the largest
// Duration is "out of range").
struct Nanos {
  static void pack(Packer& p, Duration value);
  static void read(MapReader& r, std::string_view key, Need need, Duration* out);
};
// A WallTime as milliseconds since the epoch (one before it is written as 0; at most
// INT64_MAX).
struct EpochMillis {
  static void pack(Packer& p, WallTime value);
  static void read(MapReader& r, std::string_view key, Need need, WallTime* out);
};
// A signed integer of 32 bits (msgpack int: the schema itself carries unsigned only).
struct Signed32 {
  static void pack(Packer& p, std::int32_t value);
  static void read(MapReader& r, std::string_view key, Need need, std::int32_t* out);
};
// A signed integer of 64 bits (msgpack int).
struct Signed64 {
  static void pack(Packer& p, std::int64_t value);
  static void read(MapReader& r, std::string_view key, Need need, std::int64_t* out);
};
// A double (msgpack float 64, or an integer: msgpack-c writes 1.0 as 1; a float 32 is read
// too).
struct Float {
  static void pack(Packer& p, double value);
  static void read(MapReader& r, std::string_view key, Need need, double* out);
};
// The double a msgpack number holds (float 64 or 32, or an integer: msgpack-c writes 1.0 as 1);
// nullopt for anything else. Float and the job table's number maps read through it.
std::optional<double> number_of(const msgpack::object& v);
// A Float that must be finite (not NaN, not infinite).
struct FiniteFloat {
  static void pack(Packer& p, double value) { Float::pack(p, value); }
  static void read(MapReader& r, std::string_view key, Need need, double* out);
};
// A command line: an array of at most kMaxCommandArgs strings of at most kMaxArgBytes.
struct CommandArgs {
  static void pack(Packer& p, const std::vector<std::string>& args);
  static void read(MapReader& r, std::string_view key, Need need, std::vector<std::string>* out);
};
// An environment: a map of at most kMaxEnvVars names to values, each a bounded string.
struct EnvVars {
  static void pack(Packer& p, const std::map<std::string, std::string>& env);
  static void read(MapReader& r, std::string_view key, Need need,
                   std::map<std::string, std::string>* out);
};

}  // namespace internal

// Keys: n name, c command, e env (map), xe exported_env (map, only when not empty), mn
// min_nodes, mx max_nodes, w workers_per_node, cr checkpoint_root, mr max_restarts, rb
// restart_backoff (ns), lc last_call (ns, optional), ht hang_timeout (ns, only when set; 0 =
// off), wd working_dir, u user, ui uid, gi gid, wm warm (only when true), pr priority (signed,
// only when not 0), pe preemptible (only when true), sm scale (0 fixed, 1 throughput; only when
// not fixed), sg scale_min_gain (float, only when not 0.05), sw scale_window (ns, only when not
// 60 s). All but lc, ht, xe, wm and the scheduling keys are required: a defaulted field would
// silently change a job (the others are optional so that entries written before they existed,
// an export of nothing, the daemon's hang detection, a cold job and the scheduling defaults
// read back as what they meant, and a spec that uses none of them keeps its old bytes).
template <typename V, wire::internal::Like<JobSpec> M>
void visit_fields(V& v, M& s) {
  using wire::internal::EnumMax;
  using wire::internal::MaxBytes;
  using wire::internal::Via;
  using wire::internal::When;
  v.field("n", s.name, MaxBytes{kMaxJobNameBytes});
  v.field("c", s.command, Via<internal::CommandArgs>{});
  v.field("e", s.env, Via<internal::EnvVars>{});
  v.field("xe", s.exported_env, Via<internal::EnvVars>{}, When{!s.exported_env.empty()});
  v.field("mn", s.min_nodes);
  v.field("mx", s.max_nodes);
  v.field("w", s.workers_per_node);
  v.field("cr", s.checkpoint_root, MaxBytes{kMaxPathBytes});
  v.field("mr", s.max_restarts);
  v.field("rb", s.restart_backoff, Via<internal::Nanos>{});
  v.field("lc", s.last_call, Via<internal::Nanos>{});
  v.field("ht", s.hang_timeout, Via<internal::Nanos>{});
  v.field("wd", s.working_dir, MaxBytes{kMaxPathBytes});
  v.field("u", s.user, MaxBytes{kMaxUserBytes});
  v.field("ui", s.uid);
  v.field("gi", s.gid);
  v.field("wm", s.warm, When{s.warm});
  const JobSpec defaults;
  v.field("pr", s.priority, Via<internal::Signed32>{}, When{s.priority != defaults.priority});
  v.field("pe", s.preemptible, When{s.preemptible});
  v.field("sm", s.scale, EnumMax{kMaxScaleMode}, When{s.scale != defaults.scale});
  v.field("sg", s.scale_min_gain, Via<internal::FiniteFloat>{},
          When{s.scale_min_gain != defaults.scale_min_gain});
  v.field("sw", s.scale_window, Via<internal::Nanos>{},
          When{s.scale_window != defaults.scale_window});
}

}  // namespace elastic::rendezvous
