// JsonFields: reads the fields of one JSON object that came from outside the daemon (a control
// request, a round report from another daemon) into typed values, so no handler ever asks
// nlohmann::json for a type the sender did not send (that throws, and an exception in a
// handler would stop the daemon).
//
// Reads go in a row; the first problem becomes error() and every later read is a no-op, so a
// decoder reads all its fields and checks ok() once. Sentences name the subject, the field and
// what it must be: `The events request's "job" must be a string (a job id), not a number.`
// A null field counts as absent; an empty optional string leaves `out` as it was; unknown
// fields are ignored.
//
// Errors: never throws, whatever the text (bad JSON, deep nesting, huge numbers).
// Thread safety: one object per thread.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

namespace elastic::control {

class JsonFields {
 public:
  // `subject` names the object in sentences ("The events request"); `text` is its JSON.
  JsonFields(std::string subject, std::string_view text);
  ~JsonFields();
  JsonFields(const JsonFields&) = delete;
  JsonFields& operator=(const JsonFields&) = delete;

  // A string of 1..max_bytes bytes; `what` says what it names ("a job id").
  void string(const char* key, bool required, std::size_t max_bytes, const char* what,
              std::string& out);
  // An integer in [0, max].
  void unsigned_number(const char* key, bool required, const char* what, std::uint64_t& out,
                       std::uint64_t max = std::numeric_limits<std::uint64_t>::max());
  // Any integer that fits an int64.
  void signed_number(const char* key, bool required, const char* what, std::int64_t& out);
  // true or false.
  void boolean(const char* key, bool required, const char* what, bool& out);
  // A JSON object, written back as compact JSON text (invalid UTF-8 replaced).
  void object(const char* key, const char* what, std::string& out);

  // True when the object has `key` with a non-null value (false once an error was found).
  bool has(const char* key) const;
  void fail(std::string sentence);
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  const nlohmann::json* find(const char* key, bool required, const std::string& expected);
  std::string field(const char* key) const;
  void wrong_type(const char* key, const std::string& expected, const nlohmann::json& value);

  std::string subject_;
  std::unique_ptr<nlohmann::json> object_;
  std::string error_;
};

}  // namespace elastic::control
