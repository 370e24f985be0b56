// Raft's durable state in a simulated process's storage: the one on-"disk" layout shared by
// every simulator process that runs the real consensus::Raft (RaftProcess, NodeCoreProcess).
//
// The storage map (SimContext::storage(), kept across crash and restart) is the disk, and a
// write is durable as soon as it is made: a crash happens between simulator events, so between
// whole Persist steps, never in the middle of one (torn writes are RaftLog's unit tests' job).
// Key layout:
//   "hard"                          (term, vote), two u64
//   "snapshot"                      the latest snapshot: last_index, last_term, voter count,
//                                   the voters (u64 each), then the snapshot data
//   "log/<index, 16 digits>"        one entry each after the snapshot: term (u64), type (one
//                                   byte), then the entry data
// Every u64 is 8 bytes little-endian. The zero padding keeps the map's order the log's order.
// Ownership: the functions borrow the map for the call. Thread safety: none (the map is one
// simulated node's). Errors: storage is only ever written by persist_raft_state, so a record
// that does not decode (truncated, or a log with a gap) is a broken invariant and aborts loudly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "daemon/consensus/raft.h"

namespace elastic::sim {

// The storage of one simulated node, as SimContext::storage() hands it out.
using SimStorage = std::map<std::string, std::string>;

// Fixed-width fields of the stored records (also usable for a state machine's snapshot data).
void put_u64(std::string& out, std::uint64_t v);
// Aborts if fewer than 8 bytes follow `at`.
std::uint64_t get_u64(const std::string& in, std::size_t at);

// Carries out one Persist step (hard state, snapshot, truncation, appends, in that order).
void persist_raft_state(SimStorage& storage, const consensus::Persist& persist);

// What a restarted node hands to consensus::Raft: the hard state, the snapshot and the log
// entries after it (indices contiguous from the snapshot's last index + 1), each if stored.
consensus::Recovered recover_raft_state(const SimStorage& storage);

}  // namespace elastic::sim
