#include "daemon/config/config.h"

#include <grp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <toml.hpp>
#include <utility>

#include "daemon/config/rules.h"
#include "daemon/config/schema.h"
#include "daemon/config/toml_text.h"
#include "daemon/core/duration.h"

namespace elastic::config {
namespace {

// ---- small text helpers -------------------------------------------------------------------

// The text of a --set argument inside an error label: as typed, except that control characters
// are escaped so that the label stays on one line.
std::string printable(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      const std::string escaped = quote(std::string_view(&c, 1));
      out += escaped.substr(1, escaped.size() - 2);
    } else {
      out += c;
    }
  }
  return out;
}

// ---- the key table ------------------------------------------------------------------------

struct KeyCollector {
  std::vector<std::string> sections;
  std::vector<std::string> full_keys;
  void section(const char* name) { sections.emplace_back(name); }
  template <typename T>
  void field(const char* key, const T&) {
    full_keys.push_back(sections.back() + "." + key);
  }
};

const KeyCollector& key_table() {
  static const KeyCollector* const table = [] {
    auto* collector = new KeyCollector;
    const DaemonConfig defaults;
    visit_config(defaults, *collector);
    return collector;
  }();
  return *table;
}

bool is_section(std::string_view name) {
  const auto& sections = key_table().sections;
  return std::find(sections.begin(), sections.end(), name) != sections.end();
}

std::string section_list() {
  std::string list;
  for (const auto& section : key_table().sections) list += (list.empty() ? "" : ", ") + section;
  return list;
}

// The full key whose own name is closest to `leaf` (an exact match first), searching the given
// section only, or every section when `section` is empty. "" when nothing is close enough.
std::string closest_key(std::string_view section, std::string_view leaf) {
  std::string best;
  std::size_t best_distance = typo_budget(leaf) + 1;
  for (const auto& key : key_table().full_keys) {
    const std::string_view candidate(key);
    const auto dot = candidate.find('.');
    if (!section.empty() && candidate.substr(0, dot) != section) continue;
    const std::size_t d = edit_distance(leaf, candidate.substr(dot + 1));
    if (d < best_distance) best_distance = d, best = key;
  }
  return best;
}

// Why `name` is not a setting, with the most likely intended one. A name with a dot is a key:
// a close spelling in its section, else the same name in another section (a key under the
// wrong header), else a close spelling anywhere. A name without a dot is a section when
// `is_table`, else a key written outside any section.
std::string unknown_reason(std::string_view name, bool is_table) {
  const auto dot = name.find('.');
  if (dot == std::string_view::npos && is_table) {
    std::string best;
    std::size_t best_distance = typo_budget(name) + 1;
    for (const auto& section : key_table().sections) {
      const std::size_t d = edit_distance(name, section);
      if (d < best_distance) best_distance = d, best = section;
    }
    if (!best.empty()) return "unknown section (did you mean [" + best + "]?)";
    return "unknown section (sections are " + section_list() + ")";
  }
  if (dot == std::string_view::npos) {
    const std::string best = closest_key("", name);
    if (!best.empty()) return "unknown top-level key (did you mean " + best + "?)";
    return "unknown top-level key (settings belong in a section: " + section_list() + ")";
  }
  const std::string_view section = name.substr(0, dot);
  const std::string_view leaf = name.substr(dot + 1);
  std::string best = is_section(section) ? closest_key(section, leaf) : std::string();
  if (best.empty()) best = closest_key("", leaf);
  if (!best.empty()) return "unknown key (did you mean " + best + "?)";
  if (!is_section(section)) return "unknown key (sections are " + section_list() + ")";
  return "unknown key";
}

// ---- reading one TOML value into one field ------------------------------------------------
// Each returns the reason when the value does not fit, leaving `out` unchanged.

using Problem = std::optional<std::string>;

Problem read(const toml::value& v, std::string& out) {
  if (!v.is_string()) return "expected a string, got " + describe(v);
  out = v.as_string().str;
  return std::nullopt;
}

Problem read(const toml::value& v, bool& out) {
  if (!v.is_boolean()) return "expected a boolean (true or false), got " + describe(v);
  out = v.as_boolean();
  return std::nullopt;
}

Problem read(const toml::value& v, int& out) {
  if (!v.is_integer()) return "expected an integer, got " + describe(v);
  const std::int64_t value = v.as_integer();
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return std::to_string(value) + " is out of range (at most " +
           std::to_string(std::numeric_limits<int>::max()) + ")";
  }
  out = static_cast<int>(value);
  return std::nullopt;
}

Problem read(const toml::value& v, std::int64_t& out) {
  if (!v.is_integer()) return "expected an integer, got " + describe(v);
  out = v.as_integer();
  return std::nullopt;
}

Problem read(const toml::value& v, Duration& out) {
  if (!v.is_string()) {
    return "expected a duration string such as \"500ms\" or \"30s\", got " + describe(v);
  }
  auto parsed = parse_duration(v.as_string().str);
  if (!parsed.ok()) return parsed.error().message;
  out = *parsed;
  return std::nullopt;
}

Problem read(const toml::value& v, std::vector<std::string>& out) {
  if (!v.is_array()) return "expected an array of strings, got " + describe(v);
  std::vector<std::string> values;
  const auto& array = v.as_array();
  for (std::size_t i = 0; i < array.size(); ++i) {
    if (!array[i].is_string()) {
      return "expected an array of strings, but element " + std::to_string(i + 1) + " is " +
             describe(array[i]);
    }
    values.push_back(array[i].as_string().str);
  }
  out = std::move(values);
  return std::nullopt;
}

Problem read(const toml::value& v, GpuSelection& out) {
  constexpr const char* kExpected = "expected \"auto\" or an array of GPU indices such as [0, 1]";
  if (v.is_string()) {
    if (v.as_string().str != "auto") return std::string(kExpected) + ", got " + describe(v);
    out = GpuSelection{};
    return std::nullopt;
  }
  if (!v.is_array()) return std::string(kExpected) + ", got " + describe(v);
  GpuSelection selection{.detect = false, .indices = {}};
  const auto& array = v.as_array();
  for (std::size_t i = 0; i < array.size(); ++i) {
    int index = 0;
    if (!array[i].is_integer() || read(array[i], index)) {
      return std::string(kExpected) + ", but element " + std::to_string(i + 1) + " is " +
             describe(array[i]);
    }
    selection.indices.push_back(index);
  }
  out = std::move(selection);
  return std::nullopt;
}

// ---- [limits.users.NAME] and [limits.groups.NAME] ------------------------------------------

// One problem of a limits table: "alice.max_nodes" (or "alice" for the entry itself), the value
// it concerns (for its line) and why.
struct EntryProblem {
  std::string key;
  const toml::value* where;
  std::string reason;
};

// The gid of group `name`; nullopt when this host knows no such group.
std::optional<std::uint32_t> group_id(const std::string& name) {
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(16 * 1024);
  // ERANGE: a group with very many members; grow the buffer a few times.
  for (int attempt = 0; attempt < 4; ++attempt) {
    const int rc = ::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (rc != ERANGE) break;
    buffer.resize(buffer.size() * 4);
  }
  if (found == nullptr) return std::nullopt;
  return static_cast<std::uint32_t>(found->gr_gid);
}

// Reads a table of entries ({ alice = { max_nodes = 4 } }) into `out` (replacing it), resolving
// group names when `groups`. Every problem is returned; a broken entry is left out.
std::vector<EntryProblem> read_limit_entries(const toml::value& table, bool groups,
                                             std::map<std::string, LimitEntry>& out) {
  std::vector<EntryProblem> problems;
  const char* kind = groups ? "groups" : "users";
  if (!table.is_table()) {
    problems.push_back({"", &table,
                        std::string("expected a table of ") + (groups ? "group" : "user") +
                            " names, each with max_nodes and max_running_jobs, got " +
                            describe(table)});
    return problems;
  }
  std::map<std::string, LimitEntry> entries;
  for (const auto& [name, entry_value] : in_file_order(table.as_table())) {
    const std::string shown = quote(name).substr(1, quote(name).size() - 2);
    if (!entry_value->is_table()) {
      problems.push_back({shown, entry_value,
                          std::string("expected a table ([limits.") + kind + "." + shown +
                              "]) with max_nodes and max_running_jobs, got " +
                              describe(*entry_value)});
      continue;
    }
    LimitEntry entry;
    bool ok = true;
    for (const auto& [key, value] : in_file_order(entry_value->as_table())) {
      int* field = key == "max_nodes"          ? &entry.max_nodes
                   : key == "max_running_jobs" ? &entry.max_running_jobs
                                               : nullptr;
      const std::string full = shown + "." + quote(key).substr(1, quote(key).size() - 2);
      if (field == nullptr) {
        problems.push_back(
            {full, value, "unknown key (an entry has max_nodes and max_running_jobs)"});
        ok = false;
      } else if (Problem problem = read(*value, *field)) {
        problems.push_back({full, value, *problem});
        ok = false;
      } else if (*field < 0) {
        problems.push_back(
            {full, value, "must be at least 0 (got " + std::to_string(*field) + ")"});
        ok = false;
      }
    }
    if (groups && ok) {
      if (const auto gid = group_id(name)) {
        entry.gid = *gid;
      } else {
        problems.push_back(
            {shown, entry_value, "there is no group " + quote(name) + " on this host"});
        ok = false;
      }
    }
    if (ok) entries.emplace(name, entry);
  }
  out = std::move(entries);
  return problems;
}

Problem first_problem(const std::vector<EntryProblem>& problems) {
  if (problems.empty()) return std::nullopt;
  const EntryProblem& p = problems.front();
  return (p.key.empty() ? "" : p.key + ": ") + p.reason;
}

Problem read(const toml::value& v, UserLimits& out) {
  return first_problem(read_limit_entries(v, false, out.entries));
}
Problem read(const toml::value& v, GroupLimits& out) {
  return first_problem(read_limit_entries(v, true, out.entries));
}

template <typename Enum, std::size_t N>
Problem read_enum(const toml::value& v, Enum& out, const Enum (&values)[N]) {
  std::string names;
  for (Enum e : values) names += (names.empty() ? "" : ", ") + std::string(to_string(e));
  if (!v.is_string()) return "expected one of " + names + ", got " + describe(v);
  for (Enum e : values) {
    if (v.as_string().str == to_string(e)) {
      out = e;
      return std::nullopt;
    }
  }
  return quote(v.as_string().str) + " is not one of " + names;
}

constexpr LogLevel kLogLevels[] = {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo,
                                   LogLevel::kWarn, LogLevel::kError};
constexpr LogFormat kLogFormats[] = {LogFormat::kText, LogFormat::kJson};

Problem read(const toml::value& v, LogLevel& out) { return read_enum(v, out, kLogLevels); }
Problem read(const toml::value& v, LogFormat& out) { return read_enum(v, out, kLogFormats); }

// For --set: whether to take the raw text as a string rather than the TOML value it parsed as.
// Only for keys whose values are written as strings, so `--set node.name=123` names node "123".
bool prefer_text(const toml::value& v, const std::string&) { return !v.is_string(); }
bool prefer_text(const toml::value& v, const Duration&) { return !v.is_string(); }
bool prefer_text(const toml::value& v, const LogLevel&) { return !v.is_string(); }
bool prefer_text(const toml::value& v, const LogFormat&) { return !v.is_string(); }
bool prefer_text(const toml::value& v, const GpuSelection&) {
  return !v.is_string() && !v.is_array();
}
template <typename T>
bool prefer_text(const toml::value&, const T&) {
  return false;
}

// Finds `section.key` and reads `value` into it.
struct Assign {
  std::string_view wanted_section;
  std::string_view wanted_key;
  const toml::value* value = nullptr;  // null: the --set text is not a TOML value
  const std::string* text = nullptr;   // the raw --set text, null for a file
  std::string_view current_section;
  bool found = false;
  Problem problem;

  void section(const char* name) { current_section = name; }
  template <typename T>
  void field(const char* key, T& out) {
    if (found || current_section != wanted_section || wanted_key != key) return;
    found = true;
    toml::value as_text;
    const toml::value* v = value;
    if (text != nullptr && (v == nullptr || prefer_text(*v, out))) {
      as_text = toml::value(*text);
      v = &as_text;
    }
    problem = read(*v, out);
  }
};

// ---- provenance and the loader ------------------------------------------------------------

enum class Precedence { kDefault = 0, kFile = 1, kOverride = 2 };

struct Origin {
  std::string label;  // "<file>:<line>", "--set k=v"
  Precedence precedence = Precedence::kDefault;
};

constexpr const char* kDefaultsLabel = "built-in defaults";

class Loader {
 public:
  void apply_file(const std::string& path, bool must_exist) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (status.type() == std::filesystem::file_type::not_found) {
      if (!must_exist) {
        file_missing_ = true;
        return;
      }
      errors_.push_back(path + ": cannot read the config file: it does not exist");
      return;
    }
    if (ec) {
      errors_.push_back(path + ": cannot read the config file: " + ec.message());
      return;
    }
    if (std::filesystem::is_directory(status)) {
      errors_.push_back(path + ": cannot read the config file: it is a directory");
      return;
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream content;
    if (in) content << in.rdbuf();
    if (!in || in.bad()) {
      errors_.push_back(path + ": cannot read the config file: " + std::strerror(errno));
      return;
    }
    file_used_ = true;

    const std::string text = content.str();
    // toml11 would recurse once per level: a deep file must be refused before it parses.
    if (const auto deep = find_deep_nesting(text)) {
      errors_.push_back(path + ":" + std::to_string(deep->line) + ": " + deep->reason);
      return;
    }
    toml::value root;
    try {
      std::istringstream stream(text);
      root = toml::parse(stream, path);
    } catch (const toml::syntax_error& e) {
      const auto line = e.location().line();
      errors_.push_back(path + (line > 0 ? ":" + std::to_string(line) : std::string()) +
                        ": TOML syntax error: " + syntax_reason(e.what()));
      return;
    }

    for (const auto& [section, section_value] : in_file_order(root.as_table())) {
      const std::string where = label(path, *section_value);
      if (!is_section(section)) {
        errors_.push_back(where + ": " + printable(section) + ": " +
                          unknown_reason(section, section_value->is_table()));
        continue;
      }
      if (!section_value->is_table()) {
        errors_.push_back(where + ": " + section + ": expected a table ([" + section + "]), got " +
                          describe(*section_value));
        continue;
      }
      for (const auto& [key, value] : in_file_order(section_value->as_table())) {
        if (section == "limits" && (key == "users" || key == "groups") && value->is_table()) {
          assign_limits(path, key, *value);
          continue;
        }
        assign(section, key, value, nullptr, Origin{label(path, *value), Precedence::kFile});
      }
    }
  }

  void apply_override(const std::string& argument) {
    const std::string source = "--set " + printable(argument);
    const auto equals = argument.find('=');
    if (equals == std::string::npos || equals == 0) {
      errors_.push_back(source + ": expected section.key=value");
      return;
    }
    const std::string key = argument.substr(0, equals);
    const std::string text = argument.substr(equals + 1);
    const auto dot = key.find('.');
    if (dot == std::string::npos) {
      errors_.push_back(source + ": " + printable(key) + ": " +
                        (is_section(key) ? std::string("name a key, e.g. ") + key + "." +
                                               first_key_of(key) + "=..."
                                         : unknown_reason(key, false)));
      return;
    }
    // Read the text as the value of a one-key TOML document; anything else (two keys smuggled
    // in through a newline, a syntax error) means it is not a TOML value.
    const std::string one_key = "value = " + text + "\n";
    if (const auto deep = find_deep_nesting(one_key)) {
      errors_.push_back("--set " + printable(key) + "=...: " + printable(key) + ": " +
                        deep->reason);
      return;
    }
    std::optional<toml::value> parsed;
    try {
      std::istringstream stream(one_key);
      toml::value document = toml::parse(stream, "--set");
      if (document.as_table().size() == 1 && document.contains("value")) {
        parsed = document.at("value");
      }
    } catch (const std::exception&) {
      // Not a TOML value: string keys take the text verbatim, the others report the type.
    }
    assign(key.substr(0, dot), key.substr(dot + 1), parsed ? &*parsed : nullptr, &text,
           Origin{source, Precedence::kOverride});
  }

  void apply_rules() {
    for (const Violation& violation : check_rules(config_)) {
      if (std::any_of(violation.keys.begin(), violation.keys.end(),
                      [&](std::string_view k) { return broken_.count(std::string(k)) > 0; })) {
        continue;  // already reported as unreadable; its default would only add noise
      }
      // Blame the key the user set with the highest precedence: that is where to look.
      const Origin* blamed = nullptr;
      for (std::string_view key : violation.keys) {
        auto it = origins_.find(std::string(key));
        if (it == origins_.end()) continue;
        if (blamed == nullptr || it->second.precedence > blamed->precedence) blamed = &it->second;
      }
      errors_.push_back((blamed ? blamed->label : std::string(kDefaultsLabel)) + ": " +
                        std::string(violation.keys.front()) + ": " + violation.reason);
    }
  }

  const DaemonConfig& config() const { return config_; }
  const std::vector<std::string>& errors() const { return errors_; }
  bool file_used() const { return file_used_; }
  bool file_missing() const { return file_missing_; }

 private:
  static std::string label(const std::string& path, const toml::value& value) {
    const auto line = value.location().line();
    return line > 0 ? path + ":" + std::to_string(line) : path;
  }

  static std::string first_key_of(const std::string& section) {
    for (const auto& key : key_table().full_keys) {
      if (key.rfind(section + ".", 0) == 0) return key.substr(section.size() + 1);
    }
    return "key";
  }

  void assign(const std::string& section, const std::string& key, const toml::value* value,
              const std::string* text, Origin origin) {
    const std::string full_key = section + "." + key;
    Assign assign{.wanted_section = section,
                  .wanted_key = key,
                  .value = value,
                  .text = text,
                  .current_section = {},
                  .found = false,
                  .problem = std::nullopt};
    visit_config(config_, assign);
    if (!assign.found) {
      errors_.push_back(origin.label + ": " + printable(full_key) + ": " +
                        unknown_reason(full_key, false));
      return;
    }
    if (assign.problem) {
      errors_.push_back(origin.label + ": " + full_key + ": " + *assign.problem);
      broken_.insert(full_key);
      return;
    }
    broken_.erase(full_key);  // a later source fixed it; the earlier error still stands
    origins_[full_key] = std::move(origin);
  }

  // limits.users / limits.groups from a file: each problem on its own line, blamed on the line
  // of its value ("elasticd.toml:12: limits.groups.physics: there is no group ...").
  void assign_limits(const std::string& path, const std::string& key, const toml::value& table) {
    const bool groups = key == "groups";
    const std::string full_key = "limits." + key;
    const auto problems = read_limit_entries(
        table, groups, groups ? config_.limits.groups.entries : config_.limits.users.entries);
    for (const EntryProblem& p : problems) {
      errors_.push_back(label(path, *p.where) + ": " + full_key + (p.key.empty() ? "" : ".") +
                        p.key + ": " + p.reason);
    }
    if (!problems.empty()) {
      broken_.insert(full_key);
      return;
    }
    broken_.erase(full_key);
    origins_[full_key] = Origin{label(path, table), Precedence::kFile};
  }

  DaemonConfig config_;
  std::vector<std::string> errors_;
  std::map<std::string, Origin> origins_;  // keys not here still have their default
  std::set<std::string> broken_;           // keys whose last value was rejected
  bool file_used_ = false;
  bool file_missing_ = false;
};

// ---- writing ------------------------------------------------------------------------------

std::string toml_value(const std::string& v) { return quote(v); }
std::string toml_value(bool v) { return v ? "true" : "false"; }
std::string toml_value(int v) { return std::to_string(v); }
std::string toml_value(std::int64_t v) { return std::to_string(v); }
std::string toml_value(Duration v) { return quote(format_duration(v)); }
std::string toml_value(LogLevel v) { return quote(to_string(v)); }
std::string toml_value(LogFormat v) { return quote(to_string(v)); }
std::string toml_value(const std::vector<std::string>& v) {
  std::string out = "[";
  for (const auto& item : v) out += (out.size() > 1 ? ", " : "") + quote(item);
  return out + "]";
}
// An inline table: { alice = { max_nodes = 4, max_running_jobs = 2 } } (names quoted).
std::string toml_value(const std::map<std::string, LimitEntry>& entries) {
  std::string out = "{";
  for (const auto& [name, entry] : entries) {
    out += std::string(out.size() > 1 ? ", " : " ") + quote(name) +
           " = { max_nodes = " + std::to_string(entry.max_nodes) +
           ", max_running_jobs = " + std::to_string(entry.max_running_jobs) + " }";
  }
  return out + (out.size() > 1 ? " }" : "}");
}
std::string toml_value(const UserLimits& v) { return toml_value(v.entries); }
std::string toml_value(const GroupLimits& v) { return toml_value(v.entries); }
std::string toml_value(const GpuSelection& v) {
  if (v.detect) return quote("auto");
  std::string out = "[";
  for (int index : v.indices) out += (out.size() > 1 ? ", " : "") + std::to_string(index);
  return out + "]";
}

struct TomlWriter {
  std::string out;
  void section(const char* name) {
    out += std::string(out.empty() ? "" : "\n") + "[" + name + "]\n";
  }
  template <typename T>
  void field(const char* key, const T& value) {
    out += std::string(key) + " = " + toml_value(value) + "\n";
  }
};

}  // namespace

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

const char* to_string(LogFormat format) {
  switch (format) {
    case LogFormat::kText:
      return "text";
    case LogFormat::kJson:
      return "json";
  }
  return "?";
}

Result<LoadedConfig> load_config(const LoadOptions& options) {
  try {
    Loader loader;
    if (!options.file.empty()) loader.apply_file(options.file, options.file_must_exist);
    for (const auto& override_text : options.overrides) loader.apply_override(override_text);
    loader.apply_rules();
    if (!loader.errors().empty()) {
      std::string message;
      for (const auto& line : loader.errors()) message += (message.empty() ? "" : "\n") + line;
      return Error{message};
    }
    LoadedConfig loaded{
        .config = loader.config(), .source = {}, .file_missing = loader.file_missing()};
    loaded.source = loader.file_used() ? options.file : std::string(kDefaultsLabel);
    if (!options.overrides.empty()) {
      loaded.source += " + " + std::to_string(options.overrides.size()) + " --set override" +
                       (options.overrides.size() == 1 ? "" : "s");
    }
    return loaded;
  } catch (const std::exception& e) {
    // toml11 and the standard library may throw (allocation, unexpected toml11 internals);
    // nothing escapes this API.
    return Error{(options.file.empty() ? std::string("config") : options.file) +
                 ": internal error while loading the config: " + e.what()};
  }
}

DaemonConfig readable_values(const LoadOptions& options) {
  try {
    Loader loader;
    if (!options.file.empty()) loader.apply_file(options.file, options.file_must_exist);
    for (const auto& override_text : options.overrides) loader.apply_override(override_text);
    return loader.config();
  } catch (const std::exception&) {
    return DaemonConfig{};
  }
}

std::string to_toml(const DaemonConfig& config) {
  TomlWriter writer;
  visit_config(config, writer);
  return writer.out;
}

std::vector<std::string> all_keys() { return key_table().full_keys; }

}  // namespace elastic::config
