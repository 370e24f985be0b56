#include "daemon/consensus/raft_codec.h"

#include <type_traits>
#include <utility>
#include <vector>

#include "daemon/wire/msgpack_map.h"

namespace elastic::consensus {
namespace {

using wire::DecodeError;
using wire::MsgType;
using wire::internal::Failure;
using wire::internal::MapReader;
using wire::internal::Need;
using wire::internal::Packer;
using wire::internal::put_bin;
using wire::internal::put_bool;
using wire::internal::put_key;
using wire::internal::put_uint;

// ---------------------------------------------------------------------------------------------
// Encoding. Each pack_body writes its fields after the common fr/to pair, so the map size is
// theirs + 2.

constexpr std::uint32_t kCommonFields = 2;

void pack_body(Packer& p, const VoteRequest& m) {
  p.pack_map(kCommonFields + 4);
  put_bool(p, "pv", m.pre_vote);
  put_uint(p, "t", m.term);
  put_uint(p, "li", m.last_log_index);
  put_uint(p, "lt", m.last_log_term);
}
void pack_body(Packer& p, const VoteReply& m) {
  p.pack_map(kCommonFields + 3);
  put_bool(p, "pv", m.pre_vote);
  put_uint(p, "t", m.term);
  put_bool(p, "ok", m.granted);
}
void pack_body(Packer& p, const AppendEntries& m) {
  p.pack_map(kCommonFields + 6);
  put_uint(p, "t", m.term);
  put_uint(p, "pi", m.prev_log_index);
  put_uint(p, "pt", m.prev_log_term);
  put_uint(p, "c", m.leader_commit);
  put_uint(p, "rs", m.read_round);
  put_key(p, "e");
  p.pack_array(static_cast<std::uint32_t>(m.entries.size()));
  for (const Entry& e : m.entries) {
    p.pack_map(4);
    put_uint(p, "t", e.term);
    put_uint(p, "i", e.index);
    put_uint(p, "y", static_cast<std::uint64_t>(e.type));
    put_bin(p, "d", e.data);
  }
}
void pack_body(Packer& p, const InstallSnapshot& m) {
  p.pack_map(kCommonFields + 5);
  put_uint(p, "t", m.term);
  put_uint(p, "li", m.snapshot.last_index);
  put_uint(p, "lt", m.snapshot.last_term);
  put_key(p, "v");
  p.pack_array(static_cast<std::uint32_t>(m.snapshot.voters.size()));
  for (NodeId v : m.snapshot.voters) p.pack_uint64(v);
  put_bin(p, "d", m.snapshot.data);
}
void pack_body(Packer& p, const InstallSnapshotReply& m) {
  p.pack_map(kCommonFields + 2);
  put_uint(p, "t", m.term);
  put_uint(p, "m", m.match_index);
}
void pack_body(Packer& p, const AppendReply& m) {
  p.pack_map(kCommonFields + 6);
  put_uint(p, "t", m.term);
  put_bool(p, "ok", m.success);
  put_uint(p, "m", m.match_index);
  put_uint(p, "ci", m.conflict_index);
  put_uint(p, "ct", m.conflict_term);
  put_uint(p, "rs", m.read_round);
}

// ---------------------------------------------------------------------------------------------
// Decoding

void read_body(MapReader& r, VoteRequest* m) {
  r.boolean("pv", &m->pre_vote, Need::kRequired);
  r.uint("t", &m->term);
  r.uint("li", &m->last_log_index);
  r.uint("lt", &m->last_log_term);
}
void read_body(MapReader& r, VoteReply* m) {
  r.boolean("pv", &m->pre_vote, Need::kRequired);
  r.uint("t", &m->term);
  r.boolean("ok", &m->granted, Need::kRequired);
}
void read_body(MapReader& r, AppendEntries* m) {
  r.uint("t", &m->term);
  r.uint("pi", &m->prev_log_index);
  r.uint("pt", &m->prev_log_term);
  r.uint("c", &m->leader_commit);
  r.uint("rs", &m->read_round, Need::kOptional);  // added later: an older peer sends none
  const msgpack::object_array* entries = r.array("e", kMaxRaftEntriesPerMessage, Need::kRequired);
  if (entries == nullptr) return;
  // No reserve(): a vector sized from the count would cost far more than its 1-byte elements.
  std::size_t total = 0;
  for (std::uint32_t i = 0; i < entries->size; ++i) {
    MapReader er(entries->ptr[i], "entry " + std::to_string(i) + " of " + r.what(), r.failure());
    Entry e;
    std::uint8_t type = 0;
    er.uint("t", &e.term);
    er.uint("i", &e.index);
    er.uint("y", &type);
    er.bin("d", &e.data, Need::kRequired, kMaxRaftEntryBytes);
    if (er.ok() && type > kMaxEntryType) {
      er.fail("has an unknown entry type " + std::to_string(type));
    }
    if (er.ok() && type == static_cast<std::uint8_t>(EntryType::kConfig) &&
        !decode_voters(e.data)) {
      er.fail("is a config entry whose data is not a valid voter list");
    }
    if (!er.ok()) {
      r.mark_failed();
      return;
    }
    total += e.data.size();
    if (total > kMaxRaftEntriesTotalBytes) {
      r.fail(
          "carries more than " + std::to_string(kMaxRaftEntriesTotalBytes) + " bytes of entry data",
          DecodeError::kOversized);
      return;
    }
    e.type = static_cast<EntryType>(type);
    m->entries.push_back(std::move(e));
  }
}
void read_body(MapReader& r, AppendReply* m) {
  r.uint("t", &m->term);
  r.boolean("ok", &m->success, Need::kRequired);
  r.uint("m", &m->match_index);
  r.uint("ci", &m->conflict_index);
  r.uint("ct", &m->conflict_term);
  r.uint("rs", &m->read_round, Need::kOptional);
}

void read_body(MapReader& r, InstallSnapshot* m) {
  r.uint("t", &m->term);
  r.uint("li", &m->snapshot.last_index);
  r.uint("lt", &m->snapshot.last_term);
  const msgpack::object_array* voters = r.array("v", kMaxVoters, Need::kRequired);
  if (voters == nullptr) return;
  // Checked the way a config entry is: re-encode and let decode_voters judge the list.
  std::vector<NodeId> ids;
  for (std::uint32_t i = 0; i < voters->size; ++i) {
    const msgpack::object& o = voters->ptr[i];
    if (o.type != msgpack::type::POSITIVE_INTEGER) {
      r.fail("has a voter id that is not an unsigned integer");
      return;
    }
    ids.push_back(o.via.u64);
  }
  auto checked = decode_voters(encode_voters(ids));
  if (!checked) {
    r.fail("has an empty voter list, a zero voter id or a duplicate one");
    return;
  }
  m->snapshot.voters = std::move(*checked);
  r.bin("d", &m->snapshot.data, Need::kRequired, kMaxSnapshotBytes);
}
void read_body(MapReader& r, InstallSnapshotReply* m) {
  r.uint("t", &m->term);
  r.uint("m", &m->match_index);
}

template <typename T>
Result<Message> decode_as(std::string_view body, const char* name, DecodeError* reason) {
  const std::string what = std::string("The Raft ") + name + " body";
  Failure failure;
  msgpack::object_handle handle;
  // A snapshot's data may be larger than one entry's.
  const std::size_t bin_limit =
      std::is_same_v<T, InstallSnapshot> ? kMaxSnapshotBytes : kMaxRaftEntryBytes;
  // Values: only AppendEntries and InstallSnapshot carry arrays (entries, voters).
  std::size_t max_values = wire::kMaxFixedValues;
  if constexpr (std::is_same_v<T, AppendEntries>) {
    max_values += kMaxRaftEntriesPerMessage * kValuesPerEntry;
  } else if constexpr (std::is_same_v<T, InstallSnapshot>) {
    max_values += kMaxVoters;
  }
  if (wire::internal::parse(body, {max_values, bin_limit}, what, &handle, &failure)) {
    MapReader r(handle.get(), what, &failure);
    Message message;
    r.uint("fr", &message.from);
    r.uint("to", &message.to);
    T typed;
    read_body(r, &typed);
    if (r.ok()) {
      message.body = std::move(typed);
      return message;
    }
  }
  if (reason != nullptr) *reason = failure.reason;
  return Error{std::move(failure.message)};
}

}  // namespace

bool fits_raft_limits(const Message& message) {
  if (const auto* install = std::get_if<InstallSnapshot>(&message.body)) {
    return install->snapshot.data.size() <= kMaxSnapshotBytes &&
           install->snapshot.voters.size() <= kMaxVoters;
  }
  const auto* append = std::get_if<AppendEntries>(&message.body);
  if (append == nullptr) return true;
  if (append->entries.size() > kMaxRaftEntriesPerMessage) return false;
  std::size_t total = 0;
  for (const Entry& e : append->entries) {
    if (e.data.size() > kMaxRaftEntryBytes) return false;
    total += e.data.size();
  }
  return total <= kMaxRaftEntriesTotalBytes;
}

wire::MsgType raft_message_type(const MessageBody& body) {
  struct Visitor {
    MsgType operator()(const VoteRequest&) const { return MsgType::kRaftVoteRequest; }
    MsgType operator()(const VoteReply&) const { return MsgType::kRaftVoteReply; }
    MsgType operator()(const AppendEntries&) const { return MsgType::kRaftAppendEntries; }
    MsgType operator()(const AppendReply&) const { return MsgType::kRaftAppendReply; }
    MsgType operator()(const InstallSnapshot&) const { return MsgType::kRaftInstallSnapshot; }
    MsgType operator()(const InstallSnapshotReply&) const {
      return MsgType::kRaftInstallSnapshotReply;
    }
  };
  return std::visit(Visitor{}, body);
}

std::string encode_raft(const Message& message) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  // The common keys follow the type's own (a map's order carries no meaning).
  std::visit([&p](const auto& m) { pack_body(p, m); }, message.body);
  put_uint(p, "fr", message.from);
  put_uint(p, "to", message.to);
  return std::string(buffer.data(), buffer.size());
}

Result<Message> decode_raft(wire::MsgType type, std::string_view body, DecodeError* reason) {
  switch (type) {
    case MsgType::kRaftVoteRequest:
      return decode_as<VoteRequest>(body, "VoteRequest", reason);
    case MsgType::kRaftVoteReply:
      return decode_as<VoteReply>(body, "VoteReply", reason);
    case MsgType::kRaftAppendEntries:
      return decode_as<AppendEntries>(body, "AppendEntries", reason);
    case MsgType::kRaftAppendReply:
      return decode_as<AppendReply>(body, "AppendReply", reason);
    case MsgType::kRaftInstallSnapshot:
      return decode_as<InstallSnapshot>(body, "InstallSnapshot", reason);
    case MsgType::kRaftInstallSnapshotReply:
      return decode_as<InstallSnapshotReply>(body, "InstallSnapshotReply", reason);
    default:
      break;
  }
  if (reason != nullptr) *reason = DecodeError::kMalformed;
  return Error{"Message type " + std::to_string(static_cast<unsigned>(type)) +
               " is not a Raft message."};
}

}  // namespace elastic::consensus
