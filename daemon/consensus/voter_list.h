// The voter-list encoding that kConfig entries, InstallSnapshot and the raft-snapshot file share:
// count u32, then each id u64, all little-endian.
//
// Header-only on purpose: the wire codec (and the fuzz target that builds it alone) needs it
// without linking the Raft core. decode_voters accepts only a non-empty list of at most
// kMaxVoters distinct non-zero ids, returns it sorted, and never throws or reads out of bounds
// on hostile bytes. Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace elastic::consensus {

inline constexpr std::size_t kMaxVoters = 64;

inline std::string encode_voters(const std::vector<std::uint64_t>& voters) {
  std::string out;
  auto put = [&out](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(voters.size(), 4);
  for (std::uint64_t v : voters) put(v, 8);
  return out;
}

inline std::optional<std::vector<std::uint64_t>> decode_voters(std::string_view bytes) {
  auto get = [bytes](std::size_t at, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) {
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
    }
    return v;
  };
  if (bytes.size() < 4) return std::nullopt;
  const std::uint64_t count = get(0, 4);
  if (count == 0 || count > kMaxVoters || bytes.size() != 4 + 8 * count) return std::nullopt;
  std::vector<std::uint64_t> voters;
  for (std::uint64_t i = 0; i < count; ++i) voters.push_back(get(4 + 8 * i, 8));
  std::sort(voters.begin(), voters.end());
  if (voters.front() == 0) return std::nullopt;
  if (std::adjacent_find(voters.begin(), voters.end()) != voters.end()) return std::nullopt;
  return voters;
}

}  // namespace elastic::consensus
