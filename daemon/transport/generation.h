// The node generation: a restart counter persisted in the state directory.
//
// Every daemon start reserves the next generation before it opens the transport (the routing
// id carries it), and commits it only once everything has opened. A restarted daemon therefore
// presents a new (name, generation): its routing id never collides with its former self and
// membership never mistakes it for the old incarnation (research §4.2). A start that failed
// before the commit (port in use, unreadable keys, unwritable data_dir) never ran -- it sent
// nothing -- so its retry gets the same number, and a new voter whose first start failed still
// counts as new (consensus_host.h bootstraps Raft only at generation 1).
//
// File: `<state_dir>/generation`, one decimal number and a newline. reserve_generation() writes
// the next value to `generation.tmp` and fsyncs it (so an unwritable state directory fails
// before anything opens); commit_generation() renames it over `generation` and fsyncs the
// directory, so a crash leaves either the old or the new value, never a torn one. A missing
// file counts as generation 0, so the first start gets 1. The directory is created (with
// parents) when missing. A leftover generation.tmp is overwritten by the next reservation.
//
// Errors: unreadable or unparseable file, failed writes; the sentence names the path.
// Thread safety: none; one process owns its state directory.
#pragma once

#include <cstdint>
#include <string>

#include "daemon/core/result.h"

namespace elastic::transport {

// The generation this start will run as; the file still holds the previous one.
Result<std::uint64_t> reserve_generation(const std::string& state_dir);
// Makes the reserved generation the node's (call once after reserve_generation()).
Status commit_generation(const std::string& state_dir);
// reserve_generation() then commit_generation(): for callers with nothing to open in between.
Result<std::uint64_t> next_generation(const std::string& state_dir);

}  // namespace elastic::transport
