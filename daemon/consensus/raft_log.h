// RaftLog: the durable state of one voter in its data directory -- the hard state (term, vote,
// bootstrap voter set), the latest snapshot and the append-only log of entries after it.
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
//    from are gone"; for a base (kind 3, only as the first record): index u64, meaning "the log
//    starts after this index" (absent: after 0). Truncation is a record, not a rewrite, so
//    every write is an append and a crash can only tear the tail. Replay applies records in
//    order; the log must stay contiguous.
//  - `raft-snapshot` (absent until the first snapshot): magic "ELRAFTN1", last_index u64,
//    last_term u64, voter count u32, voters u64 each, data length u64, data, then a CRC32C of
//    everything before it. Replaced atomically like raft-state (via `raft-snapshot.tmp`).
// A persist() with a snapshot (compaction, or an InstallSnapshot) writes the snapshot file
// first, then rewrites the log as a base record plus the entries after the snapshot into
// `raft-log.tmp` (fsync, rename, directory fsync) -- so the file stops growing with history.
// A crash between those steps leaves a new snapshot beside the old log: open() drops the log
// entries the snapshot covers, and the whole log if its entry at the snapshot's last index has
// another term (an installed snapshot replaced a conflicting log). Leftover .tmp files are
// ignored and overwritten.
//  - `raft-mark`: the log's high-water mark, "this log held entry (index, term) once it was
//    durable", so open() can tell a torn last write from lost acknowledged entries. Two 64-byte
//    slots, each magic "ELRAFTM1", seq u64, index u64, term u64, CRC32C of the 32 bytes before
//    it; the valid slot with the higher seq counts. persist() rewrites the other slot in place
//    after the log's fdatasync (never before), without a sync of its own: a mark lost in a
//    power cut only lags, which is safe. Before a rewrite of the log file (which may drop the
//    marked entry) it is moved to the snapshot and fdatasync'ed. bootstrap() creates it; a
//    directory from before marks gets one at open() (mark_was_missing()).
// The voter set in raft-state is the bootstrap list and never changes; current_voters() is
// derived from the snapshot and the log's config entries, like the Raft core does.
// Recovery on open(): only the last record may be torn. A last record cut short (header or
// payload runs past the end of the file, or the very last record's CRC fails: a write torn
// after the length reached the disk) is cut off with ftruncate and the file fsync'ed, provided
// the records before it already meet the mark; repaired_bytes() says how much. Everything else
// is damage to fsync'ed data and open() returns an Error naming the file, the byte offset and
// the record number (from 1), and the node must not start: a bad CRC or a malformed record with
// more records after it; an unreadable record (e.g. a length running past the end) before the
// marked entry; a log that ends before the marked entry (cut at a record boundary, or an older
// copy); a mark file whose two slots both fail their CRC.
// A snapshot file that is short, malformed or fails its CRC is corruption (it was fsync'ed
// before it replaced the old one): an Error naming the file and the byte offset.
//
// Ownership: a RaftLog owns its file descriptor. Thread safety: none (one owner). Errors:
// every I/O failure is an Error naming the path; persist() failing leaves the node unable to
// promise durability, so the caller must stop (not retry silently).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/consensus/raft.h"
#include "daemon/core/result.h"

namespace elastic::consensus {

// CRC-32C (Castagnoli, reflected, polynomial 0x82F63B78), table-driven; crc32c("123456789")
// is 0xE3069283.
std::uint32_t crc32c(std::string_view data);

class RaftLog final : public RaftStore {
 public:
  static constexpr const char* kStateFile = "raft-state";
  static constexpr const char* kLogFile = "raft-log";
  static constexpr const char* kSnapshotFile = "raft-snapshot";
  static constexpr const char* kMarkFile = "raft-mark";

  // Creates the durable state of a new voter (term 0, no vote, this voter set). Refuses, with an
  // Error, a directory that already holds Raft state. The directory must exist.
  static Status bootstrap(const std::string& dir, const std::vector<NodeId>& voters);
  // Opens a bootstrapped directory, repairing a torn tail (see above).
  static Result<std::unique_ptr<RaftLog>> open(const std::string& dir);

  ~RaftLog() override;
  RaftLog(const RaftLog&) = delete;
  RaftLog& operator=(const RaftLog&) = delete;

  const HardState& hard_state() const { return hard_; }
  // The bootstrap voter set (pass it to the Raft constructor).
  const std::vector<NodeId>& voters() const { return voters_; }
  // The config in force: the last config entry of the log, else the snapshot's, else voters().
  std::vector<NodeId> current_voters() const;
  // The entries after the snapshot (from 1 without one).
  const std::vector<Entry>& entries() const { return entries_; }
  const std::optional<Snapshot>& snapshot() const { return snapshot_; }
  Recovered recovered() const { return Recovered{hard_, entries_, snapshot_}; }
  std::uint64_t repaired_bytes() const { return repaired_bytes_; }
  // True when open() found no raft-mark (a directory from before marks) and started one: this
  // open could not check the log for lost entries.
  bool mark_was_missing() const { return mark_was_missing_; }

  // Carries out Effects::persist in the contract's order; durable when it returns ok.
  Status persist(const Persist& persist) override;
  Status remove_file(const std::string& name) override;
  Status save_hard_state(const HardState& hard_state);

 private:
  RaftLog(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  Status append_records(const std::string& bytes);
  Status rewrite_log(Index base, const std::vector<Entry>& entries);
  Index base() const { return snapshot_ ? snapshot_->last_index : 0; }
  // The last entry of the log (or the snapshot's, or (0, 0)).
  std::pair<Index, Term> last() const;
  Status write_mark(std::pair<Index, Term> mark, bool durable);

  std::string dir_;
  int fd_ = -1;
  int mark_fd_ = -1;
  std::uint64_t mark_seq_ = 0;
  std::pair<Index, Term> mark_{0, 0};
  bool mark_was_missing_ = false;
  HardState hard_;
  std::vector<NodeId> voters_;
  std::optional<Snapshot> snapshot_;
  std::vector<Entry> entries_;
  std::uint64_t repaired_bytes_ = 0;
};

}  // namespace elastic::consensus
