#include "tests/sim/raft_storage.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace elastic::sim {
namespace {

using consensus::Entry;
using consensus::EntryType;
using consensus::Index;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "raft sim storage: %s\n", what.c_str());
  std::abort();
}

std::string log_key(Index index) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "log/%016" PRIu64, index);
  return buffer;
}

// The first key after every log key: '0' follows '/'.
constexpr const char* kLogEnd = "log0";

std::string encode_snapshot(const consensus::Snapshot& s) {
  std::string out;
  put_u64(out, s.last_index);
  put_u64(out, s.last_term);
  put_u64(out, s.voters.size());
  for (auto v : s.voters) put_u64(out, v);
  out += s.data;
  return out;
}

consensus::Snapshot decode_snapshot(const std::string& bytes) {
  consensus::Snapshot s;
  s.last_index = get_u64(bytes, 0);
  s.last_term = get_u64(bytes, 8);
  const std::uint64_t count = get_u64(bytes, 16);
  // get_u64 checks every voter's bytes, so the data offset is within the record.
  for (std::uint64_t i = 0; i < count; ++i) s.voters.push_back(get_u64(bytes, 24 + 8 * i));
  s.data = bytes.substr(24 + 8 * count);
  return s;
}

}  // namespace

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(const std::string& in, std::size_t at) {
  if (at > in.size() || in.size() - at < 8) die("a stored record is truncated");
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  }
  return v;
}

void persist_raft_state(SimStorage& storage, const consensus::Persist& persist) {
  if (persist.hard_state) {
    std::string v;
    put_u64(v, persist.hard_state->term);
    put_u64(v, persist.hard_state->vote);
    storage["hard"] = std::move(v);
  }
  if (persist.snapshot) {
    storage["snapshot"] = encode_snapshot(*persist.snapshot);
    storage.erase(storage.lower_bound("log/"),
                  storage.upper_bound(log_key(persist.snapshot->last_index)));
  }
  if (persist.truncate_from) {
    storage.erase(storage.lower_bound(log_key(*persist.truncate_from)),
                  storage.lower_bound(kLogEnd));
  }
  for (const auto& e : persist.append) {
    std::string v;
    put_u64(v, e.term);
    v.push_back(static_cast<char>(e.type));
    v += e.data;
    storage[log_key(e.index)] = std::move(v);
  }
}

consensus::Recovered recover_raft_state(const SimStorage& storage) {
  consensus::Recovered recovered;
  if (auto it = storage.find("hard"); it != storage.end()) {
    recovered.hard_state = consensus::HardState{get_u64(it->second, 0), get_u64(it->second, 8)};
  }
  if (auto it = storage.find("snapshot"); it != storage.end()) {
    recovered.snapshot = decode_snapshot(it->second);
  }
  const Index base = recovered.snapshot ? recovered.snapshot->last_index : 0;
  for (auto it = storage.lower_bound("log/"); it != storage.lower_bound(kLogEnd); ++it) {
    const std::string& v = it->second;
    Entry e;
    e.term = get_u64(v, 0);
    if (v.size() < 9) die("a stored log entry is truncated");
    e.index = base + recovered.log.size() + 1;
    e.type = static_cast<EntryType>(v[8]);
    e.data = v.substr(9);
    if (it->first != log_key(e.index)) die("the stored log is not contiguous at " + it->first);
    recovered.log.push_back(std::move(e));
  }
  return recovered;
}

}  // namespace elastic::sim
