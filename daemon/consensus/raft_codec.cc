#include "daemon/consensus/raft_codec.h"

#include <type_traits>
#include <utility>
#include <vector>

#include "daemon/wire/msgpack_schema.h"

namespace elastic::consensus {

using wire::internal::AsBin;
using wire::internal::Like;
using wire::internal::MapReader;
using wire::internal::Need;
using wire::internal::Packer;
using wire::internal::Via;

// ---------------------------------------------------------------------------------------------
// The schema (daemon/wire/msgpack_schema.h): keys in wire order. Every field is required but
// "rs" (the read round), which peers from before read index do not send.

namespace {

// The Raft node ids of every body; written after the body's own keys, read before them.
struct Addressing {
  NodeId from = kNoNode;
  NodeId to = kNoNode;
};
template <typename V, Like<Addressing> M>
void visit_fields(V& v, M& a) {
  v.field("fr", a.from);
  v.field("to", a.to);
}

}  // namespace

template <typename V, Like<Entry> M>
void visit_fields(V& v, M& e) {
  v.field("t", e.term);
  v.field("i", e.index);
  v.field("y", e.type);
  v.field("d", e.data, AsBin{kMaxRaftEntryBytes});
}
void check_fields(MapReader& r, const Entry& e) {
  if (static_cast<std::uint8_t>(e.type) > kMaxEntryType) {
    r.fail("has an unknown entry type " + std::to_string(static_cast<unsigned>(e.type)));
  } else if (e.type == EntryType::kConfig && !decode_voters(e.data)) {
    r.fail("is a config entry whose data is not a valid voter list");
  }
}

namespace {

// AppendEntries' entries: the generic array of maps, plus a bound on their data in all.
struct EntriesField {
  static void pack(Packer& p, const std::vector<Entry>& entries) {
    wire::internal::pack_value(p, entries);
  }
  static void read(MapReader& r, std::string_view key, Need need, std::vector<Entry>* out) {
    const msgpack::object_array* entries = r.array(key, kMaxRaftEntriesPerMessage, need);
    if (entries == nullptr) return;
    // No reserve(): a vector sized from the count would cost far more than its 1-byte elements.
    std::size_t total = 0;
    for (std::uint32_t i = 0; i < entries->size; ++i) {
      Entry e;
      if (!wire::internal::read_map(
              entries->ptr[i], "entry " + std::to_string(i) + " of " + r.what(), r.failure(), e)) {
        r.mark_failed();
        return;
      }
      total += e.data.size();
      if (total > kMaxRaftEntriesTotalBytes) {
        r.fail("carries more than " + std::to_string(kMaxRaftEntriesTotalBytes) +
                   " bytes of entry data",
               wire::DecodeError::kOversized);
        return;
      }
      out->push_back(std::move(e));
    }
  }
};

// A snapshot's voters: unsigned ids, checked the way a config entry is.
struct VotersField {
  static void pack(Packer& p, const std::vector<NodeId>& voters) {
    p.pack_array(static_cast<std::uint32_t>(voters.size()));
    for (NodeId v : voters) p.pack_uint64(v);
  }
  static void read(MapReader& r, std::string_view key, Need need, std::vector<NodeId>* out) {
    const msgpack::object_array* voters = r.array(key, kMaxVoters, need);
    if (voters == nullptr) return;
    std::vector<NodeId> ids;
    for (std::uint32_t i = 0; i < voters->size; ++i) {
      const msgpack::object& o = voters->ptr[i];
      if (o.type != msgpack::type::POSITIVE_INTEGER) {
        r.fail("has a voter id that is not an unsigned integer");
        return;
      }
      ids.push_back(o.via.u64);
    }
    // Re-encoded so that decode_voters judges the list exactly as it judges a config entry.
    auto checked = decode_voters(encode_voters(ids));
    if (!checked) {
      r.fail("has an empty voter list, a zero voter id or a duplicate one");
      return;
    }
    *out = std::move(*checked);
  }
};

}  // namespace

template <typename V, Like<VoteRequest> M>
void visit_fields(V& v, M& m) {
  v.field("pv", m.pre_vote);
  v.field("t", m.term);
  v.field("li", m.last_log_index);
  v.field("lt", m.last_log_term);
}
template <typename V, Like<VoteReply> M>
void visit_fields(V& v, M& m) {
  v.field("pv", m.pre_vote);
  v.field("t", m.term);
  v.field("ok", m.granted);
}
template <typename V, Like<AppendEntries> M>
void visit_fields(V& v, M& m) {
  v.field("t", m.term);
  v.field("pi", m.prev_log_index);
  v.field("pt", m.prev_log_term);
  v.field("c", m.leader_commit);
  // The read round (read index confirmation) came later: an older peer sends none.
  v.field("rs", m.read_round, wire::internal::kOptional);
  v.field("e", m.entries, Via<EntriesField>{});
}
template <typename V, Like<AppendReply> M>
void visit_fields(V& v, M& m) {
  v.field("t", m.term);
  v.field("ok", m.success);
  v.field("m", m.match_index);
  v.field("ci", m.conflict_index);
  v.field("ct", m.conflict_term);
  v.field("rs", m.read_round, wire::internal::kOptional);  // added later, like AppendEntries'
}
template <typename V, Like<InstallSnapshot> M>
void visit_fields(V& v, M& m) {
  v.field("t", m.term);
  v.field("li", m.snapshot.last_index);
  v.field("lt", m.snapshot.last_term);
  v.field("v", m.snapshot.voters, Via<VotersField>{});
  v.field("d", m.snapshot.data, AsBin{kMaxSnapshotBytes});
}
template <typename V, Like<InstallSnapshotReply> M>
void visit_fields(V& v, M& m) {
  v.field("t", m.term);
  v.field("m", m.match_index);
}

namespace {

using wire::DecodeError;
using wire::MsgType;
using wire::internal::Failure;

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
    Addressing addressing;
    T typed;
    wire::internal::read_fields(r, addressing);
    wire::internal::read_fields(r, typed);
    if (r.ok()) return Message{addressing.from, addressing.to, std::move(typed)};
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
  const Addressing addressing{message.from, message.to};
  std::visit([&](const auto& m) { wire::internal::pack_fields(p, m, addressing); }, message.body);
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
