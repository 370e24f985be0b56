// The node generation: a restart counter persisted in the state directory.
//
// Every daemon start calls next_generation() once, before it opens the transport. A restarted
// daemon therefore presents a new (name, generation): its routing id never collides with its
// former self and membership never mistakes it for the old incarnation (research §4.2).
//
// File: `<state_dir>/generation`, one decimal number and a newline. It is replaced atomically
// (write `generation.tmp`, fsync, rename, fsync the directory), so a crash leaves either the old
// or the new value, never a torn one. A missing file counts as generation 0, so the first start
// returns 1. The directory is created (with parents) when missing.
//
// Errors: unreadable or unparseable file, failed writes; the sentence names the path.
// Thread safety: none; one process owns its state directory.
#pragma once

#include <cstdint>
#include <string>

#include "daemon/core/result.h"

namespace elastic::transport {

Result<std::uint64_t> next_generation(const std::string& state_dir);

}  // namespace elastic::transport
