// Internal: the map-encoded MessagePack building blocks shared by the wire codecs.
//
// Not a public API. The schema-visitor codec (daemon/wire/msgpack_schema.h) is built on it, and
// every codec uses that, so every body on the wire is packed and checked the same way (STYLE.md
// rule 5) while daemon/wire stays free of any subsystem's types.
// Include it only from .cc files that link msgpackc-cxx with MSGPACK_NO_BOOST.
//
// Decoding contract: parse() runs msgpack-c with an unpack_limit and catches everything it
// throws; MapReader then walks the object tree with checks that cannot throw. Strings and bins
// reference the input (no copy into msgpack's zone), so `bytes` must outlive the handle.
// The first problem is kept as a Failure (class + one sentence); later reads are no-ops.
//
// Thread safety: free functions on values; a MapReader belongs to one decode call.
#pragma once

#include <msgpack.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "daemon/wire/codec.h"

namespace elastic::wire::internal {

// ---------------------------------------------------------------------------------------------
// Encoding

using Packer = msgpack::packer<msgpack::sbuffer>;

// A map key. The values and the map sizes come from the schema (msgpack_schema.h).
void put_key(Packer& p, std::string_view key);

// ---------------------------------------------------------------------------------------------
// Decoding

struct Failure {
  DecodeError reason = DecodeError::kMalformed;
  std::string message;
};

// What one parse may hold, chosen by each decoder from what its message can legitimately carry.
// Every MessagePack value counts one toward max_values: a container, each array element, each
// map key and each map value. msgpack-c allocates a 24-byte object for every element of an array
// or map as soon as it reads the header, so without this budget 60 MB of one-byte elements cost
// 1.4 GB; with it a decode never holds more than about 24 * max_values bytes, whatever the input.
struct ParseLimits {
  std::size_t max_values;
  std::size_t max_bin_bytes;  // one bin value (strings and ext: kMaxUnknownStringBytes)
};

// Parses exactly one MessagePack value spanning all of `bytes`. First a scan that allocates
// nothing walks the bytes (stopping at the first problem): more than limits.max_values values,
// an array over kMaxMembers elements, a map over kMaxMapEntries, a string or ext over
// kMaxUnknownStringBytes, a bin over limits.max_bin_bytes or nesting over kMaxDepth is
// kOversized; a length or element count that the remaining bytes cannot hold, a reserved byte
// or trailing bytes are kMalformed. Only bytes that passed it reach msgpack-c (which keeps its
// own unpack_limit as a backstop; anything it throws is caught). `what` starts the error
// sentence ("The envelope").
bool parse(std::string_view bytes, const ParseLimits& limits, std::string_view what,
           msgpack::object_handle* out, Failure* failure);

enum class Need { kRequired, kOptional };

// Reads fields of one map. The first problem is kept; later reads are no-ops, so a decoder
// reads every field and checks ok() once.
class MapReader {
 public:
  MapReader(const msgpack::object& object, std::string what, Failure* failure);

  bool ok() const { return !failed_; }
  const std::string& what() const { return what_; }
  Failure* failure() const { return failure_; }

  // The value of `key`; nullptr when absent (an error when required).
  const msgpack::object* find(std::string_view key, Need need);

  template <typename T>
  void uint(std::string_view key, T* out, Need need = Need::kRequired) {
    static_assert(std::is_unsigned_v<T>);
    std::uint64_t value = 0;
    if (uint_value(key, need, std::numeric_limits<T>::max(), &value)) {
      *out = static_cast<T>(value);
    }
  }

  // A string of at most kMaxNameBytes.
  void str(std::string_view key, std::string* out, Need need = Need::kRequired);
  // A string of at most `max_bytes`; longer is kOversized (str's is kMalformed), in the same
  // sentence.
  void bounded_str(std::string_view key, std::string* out, Need need, std::size_t max_bytes);
  // Binary data of at most `max_bytes` (beyond that kOversized).
  void bin(std::string_view key, std::string* out, Need need = Need::kRequired,
           std::size_t max_bytes = std::numeric_limits<std::size_t>::max());
  void boolean(std::string_view key, bool* out, Need need = Need::kOptional);
  // The array under `key` (nullptr when absent or on error); more than `max_elements` elements
  // is kOversized.
  const msgpack::object_array* array(std::string_view key, std::size_t max_elements,
                                     Need need = Need::kOptional);

  void fail(const std::string& problem, DecodeError reason = DecodeError::kMalformed);
  // Marks this reader failed after a nested reader (sharing the Failure) recorded the problem.
  void mark_failed() { failed_ = true; }

 private:
  bool uint_value(std::string_view key, Need need, std::uint64_t max, std::uint64_t* out);
  void string_value(std::string_view key, std::string* out, Need need, std::size_t max_bytes,
                    DecodeError too_long);

  std::string what_;
  Failure* failure_;
  const msgpack::object_map* map_ = nullptr;
  bool failed_ = false;
};

}  // namespace elastic::wire::internal
