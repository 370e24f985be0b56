// Internal: the schema-visitor codec. Every map-encoded message lists its fields once, and one
// generic encoder and one generic decoder are driven by that list (as daemon/config/schema.h
// drives the config's reader and writers), so no codec counts map entries or reads a field by
// hand. Built on daemon/wire/msgpack_map.h; include it only from codec .cc files that link
// msgpackc-cxx with MSGPACK_NO_BOOST.
//
// A message type T declares, in T's own namespace (found by argument-dependent lookup, so not
// in an unnamed namespace), in the order of its keys on the wire:
//   template <typename V, Like<T> M> void visit_fields(V& v, M& m) {
//     v.field("p", m.probe);
//     v.field("u", m.updates, kOptional, Items{"member update", kMaxMembers});
//   }
// M is T for decoding and const T for encoding. Optionally, also in T's namespace,
//   void check_fields(MapReader& r, const T& m);
// runs after every field was read without a problem and may r.fail() (an enum's range, a
// rule between fields).
//
// How a value is written and read follows its C++ type:
//   bool                    true/false                  MapReader::boolean
//   unsigned integer        the smallest uint format    MapReader::uint (the type's range)
//   enum                    its underlying value        as its underlying unsigned type
//   std::string             str                         MapReader::str (kMaxNameBytes)
//   std::optional<X>        X when set                  X when the key is present
//   std::vector<E>, E a message type: an array of maps (needs Items)
//   std::map<std::string, E>, E a message type: an array of maps, each with its key (needs
//                           Items, and KeyField or KeyMember)
//   a message type          a nested map (needs Within)
// and these options change it:
//   kOptional        decoding: an absent key keeps the member's value (default: required).
//   When{cond}       written only when cond; decoding: optional.
//   AsBin{max}       a std::string as bin of at most max bytes (more: kOversized).
//   MaxBytes{max}    a std::string of at most max bytes (more: kOversized, not kMalformed).
//   EnumMax{max}     an enum read as uint8; above max: "has key 'k' with an unknown value N".
//   Items{label, max} arrays: at most max elements (more: kOversized); element i's problems
//                    are told as "<label> i of <what>".
//   Within{prefix}   a nested map's problems are told as "<prefix> <what>".
//   KeyField{name, max, check}  std::map: the key is stored first in each element under `name`
//                    (a string of at most max bytes); `check` (may be null) names a problem
//                    with a key; a key twice is "has <label> <key> twice".
//   KeyMember<E>{&E::id}  std::map: the key is that member of the element.
//   Via<C>{}         written by C::pack(Packer&, const X&) and read by
//                    C::read(MapReader&, std::string_view key, Need, X*): for a value with its
//                    own encoding (a duration in nanoseconds) or checks no option expresses.
//
// Decoding never throws: it only walks the parsed object through MapReader, whose first
// problem is kept. Thread safety: functions on values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "daemon/wire/msgpack_map.h"

namespace elastic::wire::internal {

// `M` is `T` or `const T`: the parameter of a visit_fields.
template <typename M, typename T>
concept Like = std::is_same_v<std::remove_const_t<M>, T>;

// ---------------------------------------------------------------------------------------------
// Field options (see the top)

struct OptionalField {};
inline constexpr OptionalField kOptional{};
struct When {
  bool write;
};
struct AsBin {
  std::size_t max = std::numeric_limits<std::size_t>::max();
};
struct MaxBytes {
  std::size_t max;
};
struct EnumMax {
  std::uint8_t max;
};
struct Items {
  const char* label;
  std::size_t max;
};
struct Within {
  const char* prefix;
};
struct KeyField {
  const char* name;
  std::size_t max;
  // The problem with a key ("has a drained node with an invalid name"); nullptr when none.
  const char* (*check)(const std::string& key) = nullptr;
};
template <typename E>
struct KeyMember {
  std::string E::*member;
};
template <typename C>
struct Via {};

namespace schema_detail {

template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};
template <typename T>
struct IsStringMap : std::false_type {};
template <typename T>
struct IsStringMap<std::map<std::string, T>> : std::true_type {};

// The converter of the first Via<C> among the options; void when none.
template <typename... Options>
struct ViaOf {
  using type = void;
};
template <typename C, typename... Rest>
struct ViaOf<Via<C>, Rest...> {
  using type = C;
};
template <typename First, typename... Rest>
struct ViaOf<First, Rest...> : ViaOf<Rest...> {};

// True when an option of type Want is among Options.
template <typename Want, typename... Options>
inline constexpr bool kHas = (std::is_same_v<Options, Want> || ...);

// The first option of type Want; nullptr when none.
template <typename Want, typename... Options>
const Want* option(const Options&... options) {
  const Want* found = nullptr;
  if constexpr (sizeof...(Options) > 0) {
    auto pick = [&found](const auto& o) {
      if constexpr (std::is_same_v<std::decay_t<decltype(o)>, Want>) {
        if (found == nullptr) found = &o;
      }
    };
    (pick(options), ...);
  }
  return found;
}

template <typename T, typename... Options>
bool written(const T& value, const Options&... options) {
  if (const When* when = option<When>(options...)) return when->write;
  if constexpr (IsOptional<T>::value) return value.has_value();
  return true;
}

template <typename T, typename... Options>
Need need_of(const Options&... options) {
  const bool optional = IsOptional<T>::value || option<OptionalField>(options...) != nullptr ||
                        option<When>(options...) != nullptr;
  return optional ? Need::kOptional : Need::kRequired;
}

}  // namespace schema_detail

// ---------------------------------------------------------------------------------------------
// Encoding

template <typename... Parts>
void pack_fields(Packer& p, const Parts&... parts);

// The key of a std::map element, written before the element's fields (KeyField).
struct MapKey {
  const KeyField& field;
  const std::string& key;
};
template <typename V>
void visit_fields(V& v, const MapKey& part) {
  v.field(part.field.name, part.key, MaxBytes{part.field.max});
}

template <typename T, typename... Options>
void pack_value(Packer& p, const T& value, const Options&... options) {
  using namespace schema_detail;
  using Converter = typename ViaOf<Options...>::type;
  if constexpr (IsOptional<T>::value) {
    pack_value(p, *value, options...);
  } else if constexpr (!std::is_void_v<Converter>) {
    Converter::pack(p, value);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (value) {
      p.pack_true();
    } else {
      p.pack_false();
    }
  } else if constexpr (std::is_enum_v<T>) {
    static_assert(std::is_unsigned_v<std::underlying_type_t<T>>);
    p.pack_uint64(static_cast<std::uint64_t>(value));
  } else if constexpr (std::is_integral_v<T>) {
    static_assert(std::is_unsigned_v<T>, "the wire carries unsigned integers only");
    p.pack_uint64(value);
  } else if constexpr (std::is_same_v<T, std::string>) {
    const auto size = static_cast<std::uint32_t>(value.size());
    if (option<AsBin>(options...) != nullptr) {
      p.pack_bin(size);
      p.pack_bin_body(value.data(), size);
    } else {
      p.pack_str(size);
      p.pack_str_body(value.data(), size);
    }
  } else if constexpr (IsVector<T>::value) {
    p.pack_array(static_cast<std::uint32_t>(value.size()));
    for (const auto& element : value) pack_value(p, element);
  } else if constexpr (IsStringMap<T>::value) {
    p.pack_array(static_cast<std::uint32_t>(value.size()));
    const KeyField* key_field = option<KeyField>(options...);
    for (const auto& [key, element] : value) {
      if (key_field != nullptr) {
        // The key first, then the element's own fields, in one map.
        pack_fields(p, MapKey{*key_field, key}, element);
      } else {
        pack_fields(p, element);
      }
    }
  } else {
    pack_fields(p, value);
  }
}

class FieldCounter {
 public:
  template <typename T, typename... Options>
  void field(std::string_view, const T& value, const Options&... options) {
    if (schema_detail::written(value, options...)) ++count_;
  }
  std::uint32_t count() const { return count_; }

 private:
  std::uint32_t count_ = 0;
};

class FieldWriter {
 public:
  explicit FieldWriter(Packer& p) : p_(p) {}
  template <typename T, typename... Options>
  void field(std::string_view key, const T& value, const Options&... options) {
    if (!schema_detail::written(value, options...)) return;
    put_key(p_, key);
    pack_value(p_, value, options...);
  }

 private:
  Packer& p_;
};

// Writes the fields of every part, in order, as one map whose size is counted from them.
template <typename... Parts>
void pack_fields(Packer& p, const Parts&... parts) {
  FieldCounter counter;
  (visit_fields(counter, parts), ...);
  p.pack_map(counter.count());
  FieldWriter writer(p);
  (visit_fields(writer, parts), ...);
}

// The bytes of one map holding the fields of every part.
template <typename... Parts>
std::string encode_fields(const Parts&... parts) {
  msgpack::sbuffer buffer;
  Packer p(buffer);
  pack_fields(p, parts...);
  return std::string(buffer.data(), buffer.size());
}

// ---------------------------------------------------------------------------------------------
// Decoding

template <typename T>
void read_fields(MapReader& r, T& message);

// Reads the map `object` into `message`; false (with `failure` set) on the first problem.
template <typename T>
bool read_map(const msgpack::object& object, std::string what, Failure* failure, T& message) {
  MapReader r(object, std::move(what), failure);
  read_fields(r, message);
  return r.ok();
}

template <typename T, typename... Options>
void read_value(MapReader& r, std::string_view key, Need need, T& value,
                const Options&... options) {
  using namespace schema_detail;
  using Converter = typename ViaOf<Options...>::type;
  if constexpr (IsOptional<T>::value) {
    if (r.find(key, Need::kOptional) == nullptr) return;
    typename T::value_type present{};
    read_value(r, key, Need::kRequired, present, options...);
    if (r.ok()) value = std::move(present);
  } else if constexpr (!std::is_void_v<Converter>) {
    Converter::read(r, key, need, &value);
  } else if constexpr (std::is_same_v<T, bool>) {
    r.boolean(key, &value, need);
  } else if constexpr (std::is_enum_v<T>) {
    using Underlying = std::underlying_type_t<T>;
    if (const EnumMax* max = option<EnumMax>(options...)) {
      if (r.find(key, need) == nullptr) return;
      std::uint8_t number = 0;
      r.uint(key, &number, need);
      if (!r.ok()) return;
      if (number > max->max) {
        r.fail("has key '" + std::string(key) + "' with an unknown value " +
               std::to_string(number));
        return;
      }
      value = static_cast<T>(number);
    } else {
      auto number = static_cast<Underlying>(value);
      r.uint(key, &number, need);
      value = static_cast<T>(number);
    }
  } else if constexpr (std::is_integral_v<T>) {
    r.uint(key, &value, need);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (const AsBin* bin = option<AsBin>(options...)) {
      r.bin(key, &value, need, bin->max);
    } else if (const MaxBytes* max = option<MaxBytes>(options...)) {
      r.bounded_str(key, &value, need, max->max);
    } else {
      r.str(key, &value, need);
    }
  } else if constexpr (IsVector<T>::value) {
    static_assert(kHas<Items, Options...>, "an array field needs Items");
    const Items* items = option<Items>(options...);
    const msgpack::object_array* array = r.array(key, items->max, need);
    if (array == nullptr) return;
    // No reserve(): a vector sized from the count would cost far more than 1-byte elements.
    value.clear();
    for (std::uint32_t i = 0; i < array->size; ++i) {
      typename T::value_type element{};
      if (!read_map(array->ptr[i], items->label + (" " + std::to_string(i)) + " of " + r.what(),
                    r.failure(), element)) {
        r.mark_failed();
        return;
      }
      value.push_back(std::move(element));
    }
  } else if constexpr (IsStringMap<T>::value) {
    using Element = typename T::mapped_type;
    static_assert(kHas<Items, Options...>, "a map field needs Items");
    static_assert(kHas<KeyField, Options...> || kHas<KeyMember<Element>, Options...>,
                  "a map field needs KeyField or KeyMember");
    const Items* items = option<Items>(options...);
    const KeyField* key_field = option<KeyField>(options...);
    const KeyMember<Element>* key_member = option<KeyMember<Element>>(options...);
    const msgpack::object_array* array = r.array(key, items->max, need);
    if (array == nullptr) return;
    for (std::uint32_t i = 0; i < array->size && r.ok(); ++i) {
      MapReader er(array->ptr[i], items->label + (" " + std::to_string(i)) + " of " + r.what(),
                   r.failure());
      std::string element_key;
      Element element{};
      if (key_field != nullptr) {
        er.bounded_str(key_field->name, &element_key, Need::kRequired, key_field->max);
      }
      read_fields(er, element);
      if (!er.ok()) {
        r.mark_failed();
        return;
      }
      if (key_member != nullptr) element_key = element.*(key_member->member);
      const char* problem = key_field != nullptr && key_field->check != nullptr
                                ? key_field->check(element_key)
                                : nullptr;
      if (problem != nullptr) {
        r.fail(problem);
      } else if (!value.emplace(element_key, std::move(element)).second) {
        r.fail("has " + std::string(items->label) + " " + element_key + " twice");
      }
    }
  } else {
    static_assert(kHas<Within, Options...>, "a nested map needs Within");
    const Within* within = option<Within>(options...);
    const msgpack::object* object = r.find(key, need);
    if (object == nullptr) return;
    if (!read_map(*object, within->prefix + (" " + r.what()), r.failure(), value)) {
      r.mark_failed();
    }
  }
}

class FieldReader {
 public:
  explicit FieldReader(MapReader& r) : r_(r) {}
  template <typename T, typename... Options>
  void field(std::string_view key, T& value, const Options&... options) {
    read_value(r_, key, schema_detail::need_of<T>(options...), value, options...);
  }

 private:
  MapReader& r_;
};

// Reads the fields of `message` from the map of `r`, then its check_fields when it has one.
template <typename T>
void read_fields(MapReader& r, T& message) {
  FieldReader reader(r);
  visit_fields(reader, message);
  if constexpr (requires { check_fields(r, std::as_const(message)); }) {
    if (r.ok()) check_fields(r, std::as_const(message));
  }
}

// Parses `bytes` within `limits` and reads one map into `message`. `what` starts the error
// sentences ("The Ping body").
template <typename T>
bool decode_fields(std::string_view bytes, const ParseLimits& limits, const std::string& what,
                   Failure* failure, T& message) {
  msgpack::object_handle handle;
  if (!parse(bytes, limits, what, &handle, failure)) return false;
  return read_map(handle.get(), what, failure, message);
}

}  // namespace elastic::wire::internal
