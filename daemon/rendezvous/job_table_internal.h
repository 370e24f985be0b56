// What the job table's state machine (job_table.cc) and its MessagePack codec
// (job_table_codec.cc: commands, records, snapshots) share. Not part of the API.
#pragma once

#include <cstddef>
#include <string>

#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/msgpack_fields.h"

namespace elastic::rendezvous::table_internal {

inline constexpr std::size_t kMaxClientIdBytes = wire::kMaxNameBytes;
inline constexpr std::size_t kMaxJobIdBytes = kMaxJobNameBytes + 24;  // "<name>-<u64>"
inline constexpr std::size_t kMaxNodeNameBytes = wire::kMaxNameBytes;

// Why `node` cannot name a node to drain; "" when it can. Host names only, so a name can be
// printed in a sentence or a table without quoting.
std::string drain_node_problem(const std::string& node);

}  // namespace elastic::rendezvous::table_internal
