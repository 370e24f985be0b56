#include "daemon/wire/msgpack_map.h"

#include <array>
#include <exception>
#include <new>
#include <utility>

namespace elastic::wire::internal {

void put_key(Packer& p, std::string_view key) {
  p.pack_str(static_cast<std::uint32_t>(key.size()));
  p.pack_str_body(key.data(), static_cast<std::uint32_t>(key.size()));
}

namespace {

// Strings and bins point into the input instead of being copied into msgpack's zone.
bool reference_everything(msgpack::type::object_type, std::size_t, void*) { return true; }

// The allocation-free walk that parse() runs before msgpack-c (see the header): it reads only
// headers and lengths, so it refuses a bomb after the first values over the budget, in
// microseconds, and never trusts a declared count or length the remaining bytes cannot hold.
class Scanner {
 public:
  Scanner(std::string_view bytes, const ParseLimits& limits, std::string_view what,
          Failure* failure)
      : bytes_(bytes), limits_(limits), what_(what), failure_(failure) {}

  bool run() {
    // Values each open container still expects; open_[0] is the one top-level value.
    std::array<std::uint64_t, kMaxDepth + 1> open{};
    std::size_t level = 0;
    open[0] = 1;
    for (;;) {
      while (open[level] == 0) {
        if (level == 0) return at_end();
        --level;
      }
      --open[level];
      std::uint64_t elements = 0;
      if (!value(&elements)) return false;
      if (elements == kNotContainer) continue;
      if (level + 1 > kMaxDepth) {
        return fail(DecodeError::kOversized,
                    "nests containers deeper than " + std::to_string(kMaxDepth) + " levels");
      }
      open[++level] = elements;
    }
  }

 private:
  static constexpr std::uint64_t kNotContainer = ~std::uint64_t{0};

  bool fail(DecodeError reason, const std::string& problem) {
    *failure_ = {reason, std::string(what_) + " " + problem + "."};
    return false;
  }
  std::size_t left() const { return bytes_.size() - pos_; }

  // Reads an n-byte big-endian number; false (kMalformed) when the input ends first.
  bool number(std::size_t n, std::uint64_t* out) {
    if (left() < n) return truncated();
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<std::uint8_t>(bytes_[pos_ + i]);
    pos_ += n;
    *out = v;
    return true;
  }
  bool truncated() {
    return fail(DecodeError::kMalformed,
                "ends inside a MessagePack value (at byte " + std::to_string(pos_) + ")");
  }
  // Skips `n` payload bytes of a string, bin or ext of at most `limit` bytes.
  bool payload(std::uint64_t n, std::size_t limit, const char* kind) {
    if (n > limit) {
      return fail(DecodeError::kOversized,
                  "has a " + std::string(kind) + " of " + std::to_string(n) +
                      " bytes, more than the limit of " + std::to_string(limit));
    }
    if (n > left()) {
      return fail(DecodeError::kMalformed, "declares a " + std::to_string(n) + "-byte " + kind +
                                               " at byte " + std::to_string(pos_) + " but only " +
                                               std::to_string(left()) + " bytes follow");
    }
    pos_ += static_cast<std::size_t>(n);
    return true;
  }
  // An array of `n` elements or a map of `n` entries: checked against the limits and against
  // the bytes left (every value takes at least one byte) before anything is read.
  bool container(std::uint64_t n, bool map, std::uint64_t* elements) {
    const std::uint64_t limit = map ? kMaxMapEntries : kMaxMembers;
    if (n > limit) {
      return fail(DecodeError::kOversized,
                  std::string("has ") + (map ? "a map of " : "an array of ") + std::to_string(n) +
                      (map ? " entries" : " elements") + ", more than the limit of " +
                      std::to_string(limit));
    }
    *elements = map ? 2 * n : n;
    if (*elements > left()) {
      return fail(DecodeError::kMalformed,
                  std::string("declares ") + (map ? "a map of " : "an array of ") +
                      std::to_string(n) + (map ? " entries" : " elements") + " at byte " +
                      std::to_string(pos_) + " but only " + std::to_string(left()) +
                      " bytes follow");
    }
    if (values_ + *elements > limits_.max_values) return over_budget();
    return true;
  }
  bool over_budget() {
    return fail(DecodeError::kOversized, "holds more than " + std::to_string(limits_.max_values) +
                                             " MessagePack values, the limit for this message");
  }

  // Reads one value's header and skips its payload; a container's element count goes to
  // *elements (kNotContainer otherwise).
  bool value(std::uint64_t* elements) {
    *elements = kNotContainer;
    if (++values_ > limits_.max_values) return over_budget();
    if (left() == 0) return truncated();
    const auto b = static_cast<std::uint8_t>(bytes_[pos_++]);
    std::uint64_t n = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) return true;
    if (b <= 0x8f) return container(b & 0x0f, true, elements);
    if (b <= 0x9f) return container(b & 0x0f, false, elements);
    if (b <= 0xbf) return payload(b & 0x1f, kMaxUnknownStringBytes, "string");
    switch (b) {
      case 0xc4:
      case 0xc5:
      case 0xc6:  // bin 8/16/32
        return number(std::size_t{1} << (b - 0xc4), &n) && payload(n, limits_.max_bin_bytes, "bin");
      case 0xc7:
      case 0xc8:
      case 0xc9:  // ext 8/16/32: length, then a type byte
        return number(std::size_t{1} << (b - 0xc7), &n) && payload(1, 1, "ext type") &&
               payload(n, kMaxUnknownStringBytes, "ext");
      case 0xca:
      case 0xce:
      case 0xd2:
        return payload(4, 4, "number");
      case 0xcb:
      case 0xcf:
      case 0xd3:
        return payload(8, 8, "number");
      case 0xcc:
      case 0xd0:
        return payload(1, 1, "number");
      case 0xcd:
      case 0xd1:
        return payload(2, 2, "number");
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8:  // fixext 1/2/4/8/16, plus the type byte
        return payload(1 + (std::size_t{1} << (b - 0xd4)), 17, "ext");
      case 0xd9:
      case 0xda:
      case 0xdb:  // str 8/16/32
        return number(std::size_t{1} << (b - 0xd9), &n) &&
               payload(n, kMaxUnknownStringBytes, "string");
      case 0xdc:
      case 0xdd:  // array 16/32
        return number(b == 0xdc ? 2 : 4, &n) && container(n, false, elements);
      case 0xde:
      case 0xdf:  // map 16/32
        return number(b == 0xde ? 2 : 4, &n) && container(n, true, elements);
      default:  // 0xc1, never used
        return fail(DecodeError::kMalformed,
                    "has the reserved byte 0xc1 at byte " + std::to_string(pos_ - 1));
    }
  }

  bool at_end() {
    if (pos_ == bytes_.size()) return true;
    return fail(DecodeError::kMalformed,
                "has " + std::to_string(left()) + " trailing bytes after its MessagePack value");
  }

  std::string_view bytes_;
  const ParseLimits& limits_;
  std::string_view what_;
  Failure* failure_;
  std::size_t pos_ = 0;
  std::uint64_t values_ = 0;
};

}  // namespace

bool parse(std::string_view bytes, const ParseLimits& limits, std::string_view what,
           msgpack::object_handle* out, Failure* failure) {
  if (!Scanner(bytes, limits, what, failure).run()) return false;
  const msgpack::unpack_limit limit(kMaxMembers, kMaxMapEntries, kMaxUnknownStringBytes,
                                    limits.max_bin_bytes, kMaxUnknownStringBytes, kMaxDepth);
  std::size_t offset = 0;
  try {
    *out =
        msgpack::unpack(bytes.data(), bytes.size(), offset, &reference_everything, nullptr, limit);
  } catch (const msgpack::size_overflow& e) {
    *failure = {DecodeError::kOversized,
                std::string(what) + " exceeds a size limit (" + e.what() + ")."};
    return false;
  } catch (const std::bad_alloc&) {
    *failure = {DecodeError::kOversized, std::string(what) + " needs too much memory to decode."};
    return false;
  } catch (const std::exception& e) {
    *failure = {DecodeError::kMalformed,
                std::string(what) + " is not valid MessagePack (" + e.what() + ")."};
    return false;
  } catch (...) {
    *failure = {DecodeError::kMalformed, std::string(what) + " is not valid MessagePack."};
    return false;
  }
  if (offset != bytes.size()) {
    *failure = {DecodeError::kMalformed, std::string(what) + " has " +
                                             std::to_string(bytes.size() - offset) +
                                             " trailing bytes after its MessagePack value."};
    return false;
  }
  return true;
}

MapReader::MapReader(const msgpack::object& object, std::string what, Failure* failure)
    : what_(std::move(what)), failure_(failure) {
  if (object.type != msgpack::type::MAP) {
    fail("is not a map");
    return;
  }
  map_ = &object.via.map;
  for (std::uint32_t i = 0; i < map_->size; ++i) {
    if (map_->ptr[i].key.type != msgpack::type::STR) {
      fail("has a key that is not a string");
      return;
    }
  }
}

const msgpack::object* MapReader::find(std::string_view key, Need need) {
  if (failed_) return nullptr;
  for (std::uint32_t i = 0; i < map_->size; ++i) {
    const msgpack::object_str& k = map_->ptr[i].key.via.str;
    if (std::string_view(k.ptr, k.size) == key) return &map_->ptr[i].val;
  }
  if (need == Need::kRequired) fail("lacks the required key '" + std::string(key) + "'");
  return nullptr;
}

bool MapReader::uint_value(std::string_view key, Need need, std::uint64_t max, std::uint64_t* out) {
  const msgpack::object* v = find(key, need);
  if (v == nullptr) return false;
  if (v->type != msgpack::type::POSITIVE_INTEGER) {
    fail("has key '" + std::string(key) + "' that is not a non-negative integer");
    return false;
  }
  if (v->via.u64 > max) {
    fail("has key '" + std::string(key) + "' out of range (" + std::to_string(v->via.u64) + ")");
    return false;
  }
  *out = v->via.u64;
  return true;
}

void MapReader::str(std::string_view key, std::string* out, Need need) {
  string_value(key, out, need, kMaxNameBytes, DecodeError::kMalformed);
}

void MapReader::bounded_str(std::string_view key, std::string* out, Need need,
                            std::size_t max_bytes) {
  string_value(key, out, need, max_bytes, DecodeError::kOversized);
}

void MapReader::string_value(std::string_view key, std::string* out, Need need,
                             std::size_t max_bytes, DecodeError too_long) {
  const msgpack::object* v = find(key, need);
  if (v == nullptr) return;
  if (v->type != msgpack::type::STR) {
    fail("has key '" + std::string(key) + "' that is not a string");
    return;
  }
  if (v->via.str.size > max_bytes) {
    fail("has key '" + std::string(key) + "' longer than " + std::to_string(max_bytes) + " bytes",
         too_long);
    return;
  }
  out->assign(v->via.str.ptr, v->via.str.size);
}

void MapReader::bin(std::string_view key, std::string* out, Need need, std::size_t max_bytes) {
  const msgpack::object* v = find(key, need);
  if (v == nullptr) return;
  if (v->type != msgpack::type::BIN) {
    fail("has key '" + std::string(key) + "' that is not binary");
    return;
  }
  if (v->via.bin.size > max_bytes) {
    fail("has key '" + std::string(key) + "' of " + std::to_string(v->via.bin.size) +
             " bytes, more than the limit of " + std::to_string(max_bytes),
         DecodeError::kOversized);
    return;
  }
  out->assign(v->via.bin.ptr, v->via.bin.size);
}

void MapReader::boolean(std::string_view key, bool* out, Need need) {
  const msgpack::object* v = find(key, need);
  if (v == nullptr) return;
  if (v->type != msgpack::type::BOOLEAN) {
    fail("has key '" + std::string(key) + "' that is not a boolean");
    return;
  }
  *out = v->via.boolean;
}

const msgpack::object_array* MapReader::array(std::string_view key, std::size_t max_elements,
                                              Need need) {
  const msgpack::object* v = find(key, need);
  if (v == nullptr) return nullptr;
  if (v->type != msgpack::type::ARRAY) {
    fail("has key '" + std::string(key) + "' that is not an array");
    return nullptr;
  }
  if (v->via.array.size > max_elements) {
    fail("has more than " + std::to_string(max_elements) + " entries in '" + std::string(key) + "'",
         DecodeError::kOversized);
    return nullptr;
  }
  return &v->via.array;
}

void MapReader::fail(const std::string& problem, DecodeError reason) {
  if (failed_) return;
  failed_ = true;
  *failure_ = {reason, what_ + " " + problem + "."};
}

}  // namespace elastic::wire::internal
