#include "daemon/consensus/raft_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

namespace elastic::consensus {
namespace {

constexpr std::string_view kStateMagic = "ELRAFTS1";
constexpr std::string_view kSnapshotMagic = "ELRAFTN1";
constexpr std::string_view kMarkMagic = "ELRAFTM1";
constexpr std::size_t kMarkBytes = 8 + 8 + 8 + 8 + 4;  // magic, seq, index, term, crc
constexpr std::size_t kMarkSlotStride = 64;            // slot k starts at byte 64 * k
constexpr std::uint8_t kRecordEntry = 1;
constexpr std::uint8_t kRecordTruncate = 2;
constexpr std::uint8_t kRecordBase = 3;
constexpr std::size_t kHeaderBytes = 8;
constexpr std::size_t kEntryFixedBytes = 1 + 8 + 8 + 1;

constexpr std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1U) != 0 ? (c >> 1) ^ 0x82F63B78U : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr auto kCrcTable = make_crc_table();

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  }
  return v;
}

std::string errno_text() { return std::strerror(errno); }
std::string join(const std::string& dir, const char* name) { return dir + "/" + name; }
bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Status write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error{"Writing " + path + " failed: " + errno_text() + "."};
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return ok_status();
}

Result<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{"Opening " + path + " failed: " + errno_text() + "."};
  std::string content;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string message = "Reading " + path + " failed: " + errno_text() + ".";
      ::close(fd);
      return Error{message};
    }
    if (n == 0) break;
    content.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return content;
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error{"Opening directory " + dir + " failed: " + errno_text() + "."};
  const int rc = ::fsync(fd);
  const std::string err = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) return Error{"Fsync of directory " + dir + " failed: " + err + "."};
  return ok_status();
}

std::string encode_state(const HardState& hs, const std::vector<NodeId>& voters) {
  std::string out(kStateMagic);
  put_u64(out, hs.term);
  put_u64(out, hs.vote);
  put_u32(out, static_cast<std::uint32_t>(voters.size()));
  for (NodeId v : voters) put_u64(out, v);
  put_u32(out, crc32c(out));
  return out;
}

// tmp + fsync + rename + directory fsync: after a crash the file is either old or new.
Status write_atomically(const std::string& dir, const char* name, std::string_view bytes) {
  const std::string path = join(dir, name);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error{"Creating " + tmp + " failed: " + errno_text() + "."};
  Status written = write_all(fd, bytes, tmp);
  if (written.ok() && ::fsync(fd) != 0) {
    written = Error{"Fsync of " + tmp + " failed: " + errno_text() + "."};
  }
  ::close(fd);
  if (!written.ok()) return written;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error{"Renaming " + tmp + " to " + path + " failed: " + errno_text() + "."};
  }
  return fsync_dir(dir);
}

Status write_state(const std::string& dir, const HardState& hs, const std::vector<NodeId>& voters) {
  return write_atomically(dir, RaftLog::kStateFile, encode_state(hs, voters));
}

std::string encode_snapshot(const Snapshot& snapshot) {
  std::string out(kSnapshotMagic);
  out.reserve(kSnapshotMagic.size() + 32 + 8 * snapshot.voters.size() + snapshot.data.size());
  put_u64(out, snapshot.last_index);
  put_u64(out, snapshot.last_term);
  put_u32(out, static_cast<std::uint32_t>(snapshot.voters.size()));
  for (NodeId v : snapshot.voters) put_u64(out, v);
  put_u64(out, snapshot.data.size());
  out += snapshot.data;
  put_u32(out, crc32c(out));
  return out;
}

Result<Snapshot> decode_snapshot(std::string_view s, const std::string& path) {
  auto corrupt = [&](std::size_t offset, const std::string& why) -> Error {
    return Error{"Raft snapshot " + path + " is corrupt at byte offset " + std::to_string(offset) +
                 ": " + why + "."};
  };
  const std::size_t voters_at = kSnapshotMagic.size() + 8 + 8 + 4;
  if (s.size() < voters_at || s.substr(0, kSnapshotMagic.size()) != kSnapshotMagic) {
    return corrupt(0, "bad magic or too short");
  }
  const std::uint64_t count = get_le(s, voters_at - 4, 4);
  if (count == 0 || count > kMaxVoters) return corrupt(voters_at - 4, "bad voter count");
  const std::size_t length_at = voters_at + 8 * count;
  if (s.size() < length_at + 8 + 4) return corrupt(s.size(), "the file is cut short");
  const std::uint64_t length = get_le(s, length_at, 8);
  if (length != s.size() - length_at - 8 - 4) {
    return corrupt(length_at, "the data length does not match the file size");
  }
  if (crc32c(s.substr(0, s.size() - 4)) != get_le(s, s.size() - 4, 4)) {
    return corrupt(s.size() - 4, "the CRC does not match");
  }
  Snapshot snapshot;
  snapshot.last_index = get_le(s, kSnapshotMagic.size(), 8);
  snapshot.last_term = get_le(s, kSnapshotMagic.size() + 8, 8);
  auto voters = decode_voters(s.substr(voters_at - 4, 4 + 8 * count));
  if (!voters) return corrupt(voters_at, "a zero or duplicate voter id");
  if (snapshot.last_index == 0) return corrupt(kSnapshotMagic.size(), "last index 0");
  snapshot.voters = std::move(*voters);
  snapshot.data = std::string(s.substr(length_at + 8, length));
  return snapshot;
}

std::string encode_entry(const Entry& e) {
  std::string payload;
  payload.reserve(kEntryFixedBytes + e.data.size());
  payload.push_back(static_cast<char>(kRecordEntry));
  put_u64(payload, e.term);
  put_u64(payload, e.index);
  payload.push_back(static_cast<char>(e.type));
  payload += e.data;
  return payload;
}

void frame(std::string& out, const std::string& payload) {
  put_u32(out, static_cast<std::uint32_t>(payload.size()));
  put_u32(out, crc32c(payload));
  out += payload;
}

struct Mark {
  std::uint64_t seq = 0;
  Index index = 0;
  Term term = 0;
};

std::string encode_mark(const Mark& mark) {
  std::string out(kMarkMagic);
  put_u64(out, mark.seq);
  put_u64(out, mark.index);
  put_u64(out, mark.term);
  put_u32(out, crc32c(out));
  return out;
}

// The newer of the two slots that pass their CRC; nullopt when neither does.
std::optional<Mark> decode_mark(std::string_view bytes) {
  std::optional<Mark> best;
  for (std::size_t at : {std::size_t{0}, kMarkSlotStride}) {
    if (bytes.size() < at + kMarkBytes) continue;
    const std::string_view slot = bytes.substr(at, kMarkBytes);
    if (slot.substr(0, kMarkMagic.size()) != kMarkMagic ||
        crc32c(slot.substr(0, kMarkBytes - 4)) != get_le(slot, kMarkBytes - 4, 4)) {
      continue;
    }
    const Mark mark{get_le(slot, 8, 8), get_le(slot, 16, 8), get_le(slot, 24, 8)};
    if (!best || mark.seq > best->seq) best = mark;
  }
  return best;
}

// Both slots at once, fsync'ed: a new mark file (bootstrap, or a log from before marks).
Status create_mark(const std::string& dir, Index index, Term term) {
  std::string bytes = encode_mark(Mark{1, index, term});
  bytes.resize(kMarkSlotStride, '\0');
  bytes += encode_mark(Mark{0, index, term});
  return write_atomically(dir, RaftLog::kMarkFile, bytes);
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  std::uint32_t crc = 0xFFFFFFFFU;
  for (char c : data) crc = kCrcTable[(crc ^ static_cast<unsigned char>(c)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFU;
}

Status RaftLog::bootstrap(const std::string& dir, const std::vector<NodeId>& voters) {
  if (exists(join(dir, kStateFile)) || exists(join(dir, kLogFile))) {
    return Error{"Refusing to bootstrap Raft in " + dir +
                 ": it already holds Raft state (a voter bootstraps once; re-add a wiped voter "
                 "through a membership change)."};
  }
  if (voters.empty()) return Error{"Refusing to bootstrap Raft in " + dir + " with no voters."};
  // The log first: a crash before the state file lands leaves a directory open() rejects and
  // bootstrap() refuses, which an operator sees, rather than a half-made voter.
  const std::string log_path = join(dir, kLogFile);
  const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Error{"Creating " + log_path + " failed: " + errno_text() + "."};
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Error{"Fsync of " + log_path + " failed: " + errno_text() + "."};
  if (auto marked = create_mark(dir, 0, 0); !marked.ok()) return marked;
  return write_state(dir, HardState{}, voters);
}

Result<std::unique_ptr<RaftLog>> RaftLog::open(const std::string& dir) {
  const std::string state_path = join(dir, kStateFile);
  const std::string log_path = join(dir, kLogFile);
  if (!exists(state_path)) {
    return Error{"Raft state " + state_path + " does not exist; bootstrap the voter first."};
  }
  auto state = read_file(state_path);
  if (!state.ok()) return state.error();
  const std::string& s = *state;
  const std::size_t fixed = kStateMagic.size() + 8 + 8 + 4;
  if (s.size() < fixed + 4 || s.compare(0, kStateMagic.size(), kStateMagic) != 0) {
    return Error{"Raft state " + state_path + " is malformed (bad magic or too short)."};
  }
  const auto count = get_le(s, kStateMagic.size() + 16, 4);
  if (count > 64 || s.size() != fixed + 8 * count + 4) {
    return Error{"Raft state " + state_path + " is malformed (bad voter count)."};
  }
  if (crc32c(std::string_view(s).substr(0, s.size() - 4)) != get_le(s, s.size() - 4, 4)) {
    return Error{"Raft state " + state_path + " fails its CRC check."};
  }

  const int fd = ::open(log_path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0) return Error{"Opening " + log_path + " failed: " + errno_text() + "."};
  std::unique_ptr<RaftLog> log(new RaftLog(dir, fd));
  log->hard_.term = get_le(s, kStateMagic.size(), 8);
  log->hard_.vote = get_le(s, kStateMagic.size() + 8, 8);
  for (std::uint64_t i = 0; i < count; ++i) {
    log->voters_.push_back(get_le(s, fixed + 8 * i, 8));
  }

  // The snapshot first: whether a damaged record may be a torn tail depends on what the
  // snapshot and the mark already cover.
  const std::string snapshot_path = join(dir, kSnapshotFile);
  if (exists(snapshot_path)) {
    auto bytes = read_file(snapshot_path);
    if (!bytes.ok()) return bytes.error();
    auto snapshot = decode_snapshot(*bytes, snapshot_path);
    if (!snapshot.ok()) return snapshot.error();
    log->snapshot_ = std::move(*snapshot);
  }
  const Index snap = log->base();
  const std::string mark_path = join(dir, kMarkFile);
  std::optional<Mark> mark;
  if (exists(mark_path)) {
    auto bytes = read_file(mark_path);
    if (!bytes.ok()) return bytes.error();
    mark = decode_mark(*bytes);
    if (!mark) {
      return Error{"Raft mark " + mark_path +
                   " is corrupt: neither of its two copies passes its CRC check."};
    }
    log->mark_seq_ = mark->seq;
    log->mark_ = {mark->index, mark->term};
  }
  // The mark names an entry this log held once it was durable; replay must meet it (a later
  // truncation record may still drop it), or the snapshot must cover it.
  bool reached = !mark || mark->index <= snap;
  auto mark_text = [&] {
    return "entry " + std::to_string(mark->index) + " (term " + std::to_string(mark->term) +
           "), which " + mark_path + " records this log held";
  };

  auto content = read_file(log_path);
  if (!content.ok()) return content.error();
  const std::string_view data = *content;
  std::size_t at = 0;
  std::size_t number = 0;  // records from 1, as an operator counts them
  auto corrupt = [&](std::size_t offset, const std::string& why) -> Error {
    return Error{"Raft log " + log_path + " is corrupt at byte offset " + std::to_string(offset) +
                 " (record " + std::to_string(number) + "): " + why + "."};
  };
  auto& entries = log->entries_;
  Index base = 0;  // the log file starts after this index (a base record says otherwise)
  while (at < data.size()) {
    const std::size_t record = at;
    ++number;
    // Why this record cannot be read, when a crash in its write could explain it.
    std::string torn;
    std::size_t len = 0;
    if (data.size() - at < kHeaderBytes) {
      torn = "its header is cut short";
    } else {
      len = get_le(data, at, 4);
      const auto crc = static_cast<std::uint32_t>(get_le(data, at + 4, 4));
      if (data.size() - at - kHeaderBytes < len) {
        torn = "its length " + std::to_string(len) + " runs past the end of the file (" +
               std::to_string(data.size()) + " bytes)";
      } else if (crc32c(data.substr(at + kHeaderBytes, len)) != crc) {
        // Only the last record can be torn (the final write tore after its length reached
        // the disk); a bad CRC with records after it is damage to fsync'ed data.
        if (at + kHeaderBytes + len != data.size()) {
          return corrupt(record, "the record's CRC does not match");
        }
        torn = "the CRC of the last record does not match";
      }
    }
    if (!torn.empty()) {
      // A torn tail never holds an entry the mark names: the mark moves only after fdatasync.
      if (!reached) {
        return corrupt(record, torn + ", but " + mark_text() +
                                   ", lies beyond it: this is damage, not a torn last write");
      }
      break;
    }
    const std::string_view payload = data.substr(at + kHeaderBytes, len);
    at += kHeaderBytes + len;
    if (payload.empty()) return corrupt(record, "empty record");
    const auto kind = static_cast<std::uint8_t>(payload[0]);
    if (kind == kRecordEntry) {
      if (payload.size() < kEntryFixedBytes) return corrupt(record, "short entry record");
      Entry e;
      e.term = get_le(payload, 1, 8);
      e.index = get_le(payload, 9, 8);
      const auto type = static_cast<std::uint8_t>(payload[17]);
      if (type > kMaxEntryType) {
        return corrupt(record, "unknown entry type " + std::to_string(type));
      }
      e.type = static_cast<EntryType>(type);
      e.data = std::string(payload.substr(kEntryFixedBytes));
      if (e.type == EntryType::kConfig && !decode_voters(e.data)) {
        return corrupt(record, "a config entry without a valid voter list");
      }
      if (e.index != base + entries.size() + 1) {
        return corrupt(record, "entry index " + std::to_string(e.index) + " where " +
                                   std::to_string(base + entries.size() + 1) + " was expected");
      }
      if (!entries.empty() && e.term < entries.back().term) {
        return corrupt(record, "entry terms decrease");
      }
      if (mark && e.index == mark->index && e.term == mark->term) reached = true;
      entries.push_back(std::move(e));
    } else if (kind == kRecordTruncate) {
      if (payload.size() != 9) return corrupt(record, "malformed truncation record");
      const std::uint64_t from = get_le(payload, 1, 8);
      if (from <= base) return corrupt(record, "truncation at or below the log's start");
      if (from <= base + entries.size()) entries.resize(from - 1 - base);
    } else if (kind == kRecordBase) {
      if (payload.size() != 9) return corrupt(record, "malformed base record");
      if (record != 0) return corrupt(record, "a base record that is not the first record");
      base = get_le(payload, 1, 8);
    } else {
      return corrupt(record, "unknown record kind " + std::to_string(kind));
    }
  }
  if (!reached) {
    // Whole records are missing from the end (a file cut at a record boundary, or an older
    // copy put in its place): acknowledged entries are gone, and no torn write explains it.
    return Error{"Raft log " + log_path + " ends at index " +
                 std::to_string(base + entries.size()) + " after " + std::to_string(number) +
                 " records (" + std::to_string(data.size()) + " bytes), but " + mark_text() +
                 ": entries it made durable are missing (the file was cut short or replaced)."};
  }
  if (at < data.size()) {
    log->repaired_bytes_ = data.size() - at;
    if (::ftruncate(fd, static_cast<off_t>(at)) != 0 || ::fsync(fd) != 0) {
      return Error{"Cutting the torn tail of " + log_path + " at byte " + std::to_string(at) +
                   " failed: " + errno_text() + "."};
    }
  }

  // The log entries the snapshot does not cover.
  if (base > snap) {
    return corrupt(0, "the log starts after index " + std::to_string(base) +
                          " but the snapshot ends at " + std::to_string(snap));
  }
  if (!mark) {
    // A directory from before marks: start one at what the (just fsync'ed) log holds.
    if (::fdatasync(fd) != 0) {
      return Error{"Fdatasync of " + log_path + " failed: " + errno_text() + "."};
    }
    const auto [index, term] = log->last();
    if (auto created = create_mark(dir, index, term); !created.ok()) return created.error();
    log->mark_seq_ = 1;
    log->mark_ = {index, term};
    log->mark_was_missing_ = true;
  }
  const int mark_fd = ::open(mark_path.c_str(), O_RDWR | O_CLOEXEC);
  if (mark_fd < 0) return Error{"Opening " + mark_path + " failed: " + errno_text() + "."};
  log->mark_fd_ = mark_fd;
  if (base != snap) {
    // A crash between writing a snapshot and rewriting the log (or a log from before the first
    // snapshot): keep only a suffix that continues the snapshot, and make the file say so.
    if (snap < base + entries.size() + 1 && snap > base &&
        entries[snap - base - 1].term == log->snapshot_->last_term) {
      entries.erase(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(snap - base));
    } else {
      entries.clear();
    }
    if (auto rewritten = log->rewrite_log(snap, entries); !rewritten.ok()) {
      return rewritten.error();
    }
  }
  return log;
}

std::vector<NodeId> RaftLog::current_voters() const {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->type == EntryType::kConfig) return *decode_voters(it->data);  // checked on open
  }
  return snapshot_ ? snapshot_->voters : voters_;
}

Status RaftLog::rewrite_log(Index base, const std::vector<Entry>& entries) {
  // The new file may lack the entry the mark names (an installed snapshot replaced a
  // conflicting log): first move the mark, durably, to the snapshot (already on disk), which
  // the old file and the new one both satisfy, so a crash around the rename cannot strand it.
  if (auto s = write_mark({base, snapshot_->last_term}, true); !s.ok()) return s;
  std::string bytes;
  std::string payload(1, static_cast<char>(kRecordBase));
  put_u64(payload, base);
  frame(bytes, payload);
  for (const Entry& e : entries) frame(bytes, encode_entry(e));
  if (auto s = write_atomically(dir_, kLogFile, bytes); !s.ok()) return s;
  const std::string path = join(dir_, kLogFile);
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0) return Error{"Reopening " + path + " failed: " + errno_text() + "."};
  ::close(fd_);
  fd_ = fd;
  if (!entries.empty()) return write_mark({entries.back().index, entries.back().term}, false);
  return ok_status();
}

std::pair<Index, Term> RaftLog::last() const {
  if (!entries_.empty()) return {entries_.back().index, entries_.back().term};
  return {base(), snapshot_ ? snapshot_->last_term : 0};
}

Status RaftLog::write_mark(std::pair<Index, Term> mark, bool durable) {
  if (mark == mark_ && !durable) return ok_status();
  const std::string path = join(dir_, kMarkFile);
  const Mark next{mark_seq_ + 1, mark.first, mark.second};
  const std::string bytes = encode_mark(next);
  // The other slot keeps the previous mark, so a write torn by a power cut loses only this one.
  const auto at = static_cast<off_t>(kMarkSlotStride * (next.seq & 1U));
  if (::pwrite(mark_fd_, bytes.data(), bytes.size(), at) != static_cast<ssize_t>(bytes.size())) {
    return Error{"Writing " + path + " failed: " + errno_text() + "."};
  }
  if (durable && ::fdatasync(mark_fd_) != 0) {
    return Error{"Fdatasync of " + path + " failed: " + errno_text() + "."};
  }
  mark_seq_ = next.seq;
  mark_ = mark;
  return ok_status();
}

RaftLog::~RaftLog() {
  if (fd_ >= 0) ::close(fd_);
  if (mark_fd_ >= 0) ::close(mark_fd_);
}

Status RaftLog::append_records(const std::string& bytes) {
  const std::string path = join(dir_, kLogFile);
  if (auto s = write_all(fd_, bytes, path); !s.ok()) return s;
  if (::fdatasync(fd_) != 0)
    return Error{"Fdatasync of " + path + " failed: " + errno_text() + "."};
  return ok_status();
}

Status RaftLog::save_hard_state(const HardState& hard_state) {
  if (auto s = write_state(dir_, hard_state, voters_); !s.ok()) return s;
  hard_ = hard_state;
  return ok_status();
}

Status RaftLog::persist(const Persist& p) {
  if (p.hard_state) {
    if (auto s = save_hard_state(*p.hard_state); !s.ok()) return s;
  }
  if (p.truncate_from && *p.truncate_from <= (p.snapshot ? p.snapshot->last_index : base())) {
    return Error{"Raft log truncation in " + dir_ + " from index " +
                 std::to_string(*p.truncate_from) + " reaches into the snapshot."};
  }
  if (p.snapshot) {
    // The snapshot is durable before any entry it covers is dropped; then the log is rewritten
    // whole (it is short after a compaction), which also carries out truncate and append.
    const Snapshot& snap = *p.snapshot;
    if (snap.last_index <= base()) {
      return Error{"Raft snapshot in " + dir_ + " at index " + std::to_string(snap.last_index) +
                   " is not newer than the stored one at " + std::to_string(base()) + "."};
    }
    if (auto s = write_atomically(dir_, kSnapshotFile, encode_snapshot(snap)); !s.ok()) return s;
    std::vector<Entry> entries;
    for (const Entry& e : entries_) {
      if (e.index > snap.last_index) entries.push_back(e);
    }
    // An entry at the snapshot's last index with another term: the log is replaced (the same
    // rule open() applies after a crash right here).
    if (snap.last_index > base() + entries_.size() ||
        entries_[snap.last_index - base() - 1].term != snap.last_term) {
      entries.clear();
    }
    if (p.truncate_from)
      std::erase_if(entries, [&](const Entry& e) { return e.index >= *p.truncate_from; });
    for (const Entry& e : p.append) {
      if (e.index != snap.last_index + entries.size() + 1) {
        return Error{"Raft log append out of order in " + dir_ + ": index " +
                     std::to_string(e.index) + " after " +
                     std::to_string(snap.last_index + entries.size()) + "."};
      }
      entries.push_back(e);
    }
    snapshot_ = snap;
    if (auto s = rewrite_log(snap.last_index, entries); !s.ok()) return s;
    entries_ = std::move(entries);
    return ok_status();
  }
  std::string bytes;
  std::size_t size = base() + entries_.size();
  if (p.truncate_from && *p.truncate_from <= size) {
    std::string payload(1, static_cast<char>(kRecordTruncate));
    put_u64(payload, *p.truncate_from);
    frame(bytes, payload);
    size = *p.truncate_from - 1;
  }
  for (const Entry& e : p.append) {
    if (e.index != size + 1) {
      return Error{"Raft log append out of order in " + dir_ + ": index " +
                   std::to_string(e.index) + " after " + std::to_string(size) + "."};
    }
    frame(bytes, encode_entry(e));
    ++size;
  }
  if (bytes.empty()) return ok_status();
  if (auto s = append_records(bytes); !s.ok()) return s;
  if (p.truncate_from && *p.truncate_from <= base() + entries_.size()) {
    entries_.resize(*p.truncate_from - 1 - base());
  }
  for (const Entry& e : p.append) entries_.push_back(e);
  // After the fdatasync, never before: the mark must not name an entry a crash could tear.
  // Not synced itself: a mark lost in a power cut only lags, which open() accepts.
  if (p.append.empty()) return ok_status();  // a truncation alone: replay still meets the mark
  return write_mark(last(), false);
}

Status RaftLog::remove_file(const std::string& name) {
  const std::string path = dir_ + "/" + name;
  if (name.empty() || name.find('/') != std::string::npos) {
    return Error{"cannot remove \"" + name + "\" from " + dir_ + ": not a file name"};
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Error{"cannot remove " + path + ": " + std::strerror(errno)};
  }
  return ok_status();
}

}  // namespace elastic::consensus
