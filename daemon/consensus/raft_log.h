// RaftLog: the durable state of one voter in its data directory -- the hard state (term, vote,
// voter set) and the append-only log of entries.
//
// Files:
//  - `raft-state`: magic "ELRAFTS1", term u64, vote u64, voter count u32, voters u64 each, then
//    a CRC32C of everything before it (all little-endian). Replaced atomically: written to
//    `raft-state.tmp`, fsync'ed, renamed over, and the directory fsync'ed. Its presence means
//    "bootstrapped": bootstrap() refuses a directory that has it (or a log), because a voter that
//    re-bootstraps forgets its term and vote and can break election safety (libraft.md P8).
//  - `raft-log`: records appended in order, each `len u32 | crc32c(payload) u32 | payload`, the
//    payload being `kind u8` then, for an entry (kind 1): term u64, index u64, type u8, data (any
//    length, no padding); for a truncation (kind 2): from u64, meaning "entries with index >=
//    from are gone". Truncation is a record, not a rewrite, so every write is an append and a
//    crash can only tear the tail. Replay applies records in order; the log must stay contiguous.
// Recovery on open(): a last record cut short (header or payload runs past the end of the file,
// or the very last record's CRC fails: a write torn after the length reached the disk) is cut
// off with ftruncate and the file fsync'ed; repaired_bytes() says how much. A bad CRC or a
// malformed record with more records after it is corruption of fsync'ed data: open() returns an
// Error naming the file and the byte offset, and the node must not start.
// Not yet: snapshots and compaction (the file grows with the log; open() reads it whole).
//
// Ownership: a RaftLog owns its file descriptor. Thread safety: none (one owner). Errors:
// every I/O failure is an Error naming the path; persist() failing leaves the node unable to
// promise durability, so the caller must stop (not retry silently).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/consensus/raft.h"
#include "daemon/core/result.h"

namespace elastic::consensus {

// CRC-32C (Castagnoli, reflected, polynomial 0x82F63B78), table-driven; crc32c("123456789")
// is 0xE3069283.
std::uint32_t crc32c(std::string_view data);

class RaftLog {
 public:
  static constexpr const char* kStateFile = "raft-state";
  static constexpr const char* kLogFile = "raft-log";

  // Creates the durable state of a new voter (term 0, no vote, this voter set). Refuses, with an
  // Error, a directory that already holds Raft state. The directory must exist.
  static Status bootstrap(const std::string& dir, const std::vector<NodeId>& voters);
  // Opens a bootstrapped directory, repairing a torn tail (see above).
  static Result<std::unique_ptr<RaftLog>> open(const std::string& dir);

  ~RaftLog();
  RaftLog(const RaftLog&) = delete;
  RaftLog& operator=(const RaftLog&) = delete;

  const HardState& hard_state() const { return hard_; }
  const std::vector<NodeId>& voters() const { return voters_; }
  const std::vector<Entry>& entries() const { return entries_; }
  Recovered recovered() const { return Recovered{hard_, entries_}; }
  std::uint64_t repaired_bytes() const { return repaired_bytes_; }

  // Carries out Effects::persist in the contract's order; durable when it returns ok.
  Status persist(const Persist& persist);
  Status save_hard_state(const HardState& hard_state);

 private:
  RaftLog(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  Status append_records(const std::string& bytes);

  std::string dir_;
  int fd_ = -1;
  HardState hard_;
  std::vector<NodeId> voters_;
  std::vector<Entry> entries_;
  std::uint64_t repaired_bytes_ = 0;
};

}  // namespace elastic::consensus
