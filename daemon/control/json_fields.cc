#include "daemon/control/json_fields.h"

#include <nlohmann/json.hpp>

namespace elastic::control {

using nlohmann::json;

JsonFields::JsonFields(std::string subject, std::string_view text)
    : subject_(std::move(subject)), object_(std::make_unique<json>()) {
  // parse() does not throw with allow_exceptions = false; the catch is for allocation failures
  // inside it on hostile input.
  try {
    *object_ = json::parse(text, nullptr, /*allow_exceptions=*/false);
  } catch (const std::exception&) {
    *object_ = json(json::value_t::discarded);
  }
  if (!object_->is_object()) fail(subject_ + " is not a JSON object.");
}

JsonFields::~JsonFields() = default;

void JsonFields::string(const char* key, bool required, std::size_t max_bytes, const char* what,
                        std::string& out) {
  const std::string expected = std::string("a string (") + what + ")";
  const json* value = find(key, required, expected);
  if (value == nullptr) return;
  if (!value->is_string()) return wrong_type(key, expected, *value);
  const auto& text = value->get_ref<const std::string&>();
  if (text.empty()) {
    if (required) fail(field(key) + " must not be empty.");
    return;
  }
  if (text.size() > max_bytes) {
    return fail(field(key) + " is longer than " + std::to_string(max_bytes) + " bytes.");
  }
  out = text;
}

void JsonFields::unsigned_number(const char* key, bool required, const char* what,
                                 std::uint64_t& out, std::uint64_t max) {
  const std::string range = max == std::numeric_limits<std::uint64_t>::max()
                                ? "an integer >= 0"
                                : "an integer from 0 to " + std::to_string(max);
  const std::string expected = range + " (" + what + ")";
  const json* value = find(key, required, expected);
  if (value == nullptr) return;
  if (!value->is_number()) return wrong_type(key, expected, *value);
  // -1 parses as a signed integer and 1.5 as a float: out of range, not of the wrong type.
  if (!value->is_number_unsigned() || value->get<std::uint64_t>() > max) {
    return fail(field(key) + " must be " + expected + ".");
  }
  out = value->get<std::uint64_t>();
}

void JsonFields::signed_number(const char* key, bool required, const char* what,
                               std::int64_t& out) {
  const std::string expected = std::string("an integer (") + what + ")";
  const json* value = find(key, required, expected);
  if (value == nullptr) return;
  if (!value->is_number()) return wrong_type(key, expected, *value);
  if (value->is_number_float() ||
      (value->is_number_unsigned() &&
       value->get<std::uint64_t>() >
           static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))) {
    return fail(field(key) + " must be " + expected + " that fits 64 bits.");
  }
  out = value->get<std::int64_t>();
}

void JsonFields::boolean(const char* key, bool required, const char* what, bool& out) {
  const std::string expected = std::string("true or false (") + what + ")";
  const json* value = find(key, required, expected);
  if (value == nullptr) return;
  if (!value->is_boolean()) return wrong_type(key, expected, *value);
  out = value->get<bool>();
}

void JsonFields::object(const char* key, const char* what, std::string& out) {
  const std::string expected = std::string("an object (") + what + ")";
  const json* value = find(key, /*required=*/true, expected);
  if (value == nullptr) return;
  if (!value->is_object()) return wrong_type(key, expected, *value);
  out = value->dump(-1, ' ', false, json::error_handler_t::replace);
}

bool JsonFields::has(const char* key) const {
  if (!error_.empty()) return false;
  const auto it = object_->find(key);
  return it != object_->end() && !it->is_null();
}

void JsonFields::fail(std::string sentence) {
  if (error_.empty()) error_ = std::move(sentence);
}

const json* JsonFields::find(const char* key, bool required, const std::string& expected) {
  if (!error_.empty()) return nullptr;
  const auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) {
    if (required) fail(subject_ + " needs \"" + key + "\": " + expected + ".");
    return nullptr;
  }
  return &*it;
}

std::string JsonFields::field(const char* key) const { return subject_ + "'s \"" + key + "\""; }

void JsonFields::wrong_type(const char* key, const std::string& expected, const json& value) {
  const std::string type = value.type_name();
  const bool vowel = type == "array" || type == "object";
  fail(field(key) + " must be " + expected + ", not " + (vowel ? "an " : "a ") + type + ".");
}

}  // namespace elastic::control
