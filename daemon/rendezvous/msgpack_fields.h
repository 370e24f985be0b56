// Internal: MessagePack pieces shared by job_spec.cc and job_table.cc (a JobSpec inside a
// SubmitJob and inside a snapshot's job record; strings longer than the wire's name limit;
// durations and wall times). Include only from .cc files of elastic_rendezvous.
//
// Decoding follows daemon/wire/msgpack_map.h: checks that cannot throw, the first problem is
// kept in the shared Failure and later reads are no-ops. Thread safety: functions on values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/time.h"
#include "daemon/rendezvous/job_spec.h"
#include "daemon/rendezvous/types.h"
#include "daemon/wire/msgpack_map.h"

namespace elastic::rendezvous::internal {

using wire::internal::Failure;
using wire::internal::MapReader;
using wire::internal::Need;
using wire::internal::Packer;

void put_int_duration(Packer& p, std::string_view key, Duration value);
void put_time(Packer& p, std::string_view key, WallTime value);

// A string of at most `max_bytes` (longer: kOversized).
void read_string(MapReader& r, std::string_view key, std::size_t max_bytes, std::string* out,
                 Need need = Need::kRequired);
// A non-negative duration in nanoseconds.
void read_duration(MapReader& r, std::string_view key, Duration* out, Need need = Need::kRequired);
// Milliseconds since the epoch, at most INT64_MAX.
void read_time(MapReader& r, std::string_view key, WallTime* out, Need need = Need::kRequired);

// The spec as a map value (its own map header included).
void pack_job_spec(Packer& p, const JobSpec& spec);
// Reads a spec from the map `object`; false (with `failure` set) on the first problem.
bool read_job_spec(const msgpack::object& object, const std::string& what, Failure* failure,
                   JobSpec* spec);

}  // namespace elastic::rendezvous::internal
