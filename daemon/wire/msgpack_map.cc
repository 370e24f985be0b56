#include "daemon/wire/msgpack_map.h"

#include <exception>
#include <new>
#include <utility>

namespace elastic::wire::internal {

void put_key(Packer& p, std::string_view key) {
  p.pack_str(static_cast<std::uint32_t>(key.size()));
  p.pack_str_body(key.data(), static_cast<std::uint32_t>(key.size()));
}
void put_str(Packer& p, std::string_view key, const std::string& value) {
  put_key(p, key);
  p.pack_str(static_cast<std::uint32_t>(value.size()));
  p.pack_str_body(value.data(), static_cast<std::uint32_t>(value.size()));
}
void put_uint(Packer& p, std::string_view key, std::uint64_t value) {
  put_key(p, key);
  p.pack_uint64(value);
}
void put_bool(Packer& p, std::string_view key, bool value) {
  put_key(p, key);
  if (value) {
    p.pack_true();
  } else {
    p.pack_false();
  }
}
void put_bin(Packer& p, std::string_view key, std::string_view value) {
  put_key(p, key);
  p.pack_bin(static_cast<std::uint32_t>(value.size()));
  p.pack_bin_body(value.data(), static_cast<std::uint32_t>(value.size()));
}

namespace {
// Strings and bins point into the input instead of being copied into msgpack's zone.
bool reference_everything(msgpack::type::object_type, std::size_t, void*) { return true; }
}  // namespace

bool parse(std::string_view bytes, std::size_t bin_limit, std::string_view what,
           msgpack::object_handle* out, Failure* failure) {
  const msgpack::unpack_limit limit(kMaxMembers, kMaxMapEntries, kMaxUnknownStringBytes, bin_limit,
                                    kMaxUnknownStringBytes, kMaxDepth);
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
  const msgpack::object* v = find(key, need);
  if (v == nullptr) return;
  if (v->type != msgpack::type::STR) {
    fail("has key '" + std::string(key) + "' that is not a string");
    return;
  }
  if (v->via.str.size > kMaxNameBytes) {
    fail("has key '" + std::string(key) + "' longer than " + std::to_string(kMaxNameBytes) +
         " bytes");
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
