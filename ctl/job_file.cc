#include "ctl/job_file.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <toml.hpp>

#include "daemon/config/rules.h"
#include "daemon/config/toml_text.h"
#include "daemon/core/duration.h"

extern char** environ;

namespace elastic::ctl {
namespace {

using config::describe;
using config::edit_distance;
using config::in_file_order;
using config::quote;
using config::syntax_reason;
using config::typo_budget;
using rendezvous::JobSpec;

// ---- small text helpers -------------------------------------------------------------------

// A key as written, printable on one line (keys may be quoted TOML strings with any bytes).
std::string printable(std::string_view key) {
  const std::string quoted = quote(key);
  const std::string bare = quoted.substr(1, quoted.size() - 2);
  return bare == key ? bare : quoted;
}

std::string unknown_key_reason(std::string_view key) {
  std::string best;
  std::size_t best_distance = typo_budget(key) + 1;
  for (const std::string& candidate : job_file_keys()) {
    const std::size_t d = edit_distance(key, candidate);
    if (d < best_distance) best_distance = d, best = candidate;
  }
  if (!best.empty()) return "unknown key (did you mean " + best + "?)";
  std::string list;
  for (const std::string& k : job_file_keys()) list += (list.empty() ? "" : ", ") + k;
  return "unknown key (job file keys are " + list + ")";
}

int line_of(const toml::value& v) { return static_cast<int>(v.location().line()); }

// ---- reading one value ----------------------------------------------------------------------
// Each returns the problem when the value does not fit ("" = fine), leaving `out` unchanged.

std::string read_string(const toml::value& v, std::string* out) {
  if (!v.is_string()) return "expected a string, got " + describe(v);
  *out = v.as_string().str;
  return "";
}

std::string read_u32(const toml::value& v, std::uint32_t* out) {
  if (!v.is_integer()) return "expected a non-negative integer, got " + describe(v);
  const std::int64_t value = v.as_integer();
  if (value < 0) return "must not be negative (got " + std::to_string(value) + ")";
  if (value > std::numeric_limits<std::uint32_t>::max()) {
    return std::to_string(value) + " is out of range";
  }
  *out = static_cast<std::uint32_t>(value);
  return "";
}

std::string read_i32(const toml::value& v, std::int32_t* out) {
  if (!v.is_integer()) return "expected an integer, got " + describe(v);
  const std::int64_t value = v.as_integer();
  if (value < std::numeric_limits<std::int32_t>::min() ||
      value > std::numeric_limits<std::int32_t>::max()) {
    return std::to_string(value) + " is out of range";
  }
  *out = static_cast<std::int32_t>(value);
  return "";
}

std::string read_bool(const toml::value& v, bool* out) {
  if (!v.is_boolean()) return "expected true or false, got " + describe(v);
  *out = v.as_boolean();
  return "";
}

// A float, or an integer (scale_min_gain = 1).
std::string read_number(const toml::value& v, double* out) {
  if (v.is_floating()) {
    *out = v.as_floating();
  } else if (v.is_integer()) {
    *out = static_cast<double>(v.as_integer());
  } else {
    return "expected a number such as 0.05, got " + describe(v);
  }
  return "";
}

std::string read_scale(const toml::value& v, rendezvous::ScaleMode* out) {
  if (!v.is_string()) return "expected \"fixed\" or \"throughput\", got " + describe(v);
  const auto mode = rendezvous::parse_scale_mode(v.as_string().str);
  if (!mode) return "expected \"fixed\" or \"throughput\", got " + quote(v.as_string().str);
  *out = *mode;
  return "";
}

std::string read_duration(const toml::value& v, Duration* out) {
  if (!v.is_string()) {
    return "expected a duration string such as \"10s\", got " + describe(v);
  }
  Result<Duration> parsed = parse_duration(v.as_string().str);
  if (!parsed) return parsed.error().message;
  *out = *parsed;
  return "";
}

std::string read_nodes(const toml::value& v, JobSpec* spec) {
  if (v.is_integer()) {
    std::uint32_t n = 0;
    if (std::string problem = read_u32(v, &n); !problem.empty()) return problem;
    spec->min_nodes = spec->max_nodes = n;
    return "";
  }
  if (!v.is_string()) {
    return "expected \"MIN:MAX\" or a node count, got " + describe(v);
  }
  auto range = parse_node_range(v.as_string().str);
  if (!range) return range.error().message;
  spec->min_nodes = range->first;
  spec->max_nodes = range->second;
  return "";
}

std::string resolve_path(const std::string& path, const std::string& cwd) {
  if (path.empty() || path.front() == '/') return path;
  return (std::filesystem::path(cwd) / path).lexically_normal().string();
}

// What `export` (or --export) selects: everything, nothing, or the listed names.
struct ExportChoice {
  bool all = false;
  std::vector<std::string> names;  // when !all; empty = NONE
};

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// "ALL", "NONE" (any case) or "NAME,NAME,..."; the error is the problem without a key.
Result<ExportChoice> parse_export(std::string_view text) {
  const auto trimmed = [](std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    return s;
  };
  const std::string_view whole = trimmed(text);
  if (equals_ignoring_case(whole, "ALL")) return ExportChoice{.all = true, .names = {}};
  if (equals_ignoring_case(whole, "NONE")) return ExportChoice{};
  const std::string expected =
      "expected ALL, NONE or a comma-separated list of variable names, got " + quote(text);
  if (whole.empty()) return Error{expected};
  ExportChoice choice;
  std::size_t start = 0;
  while (start <= whole.size()) {
    const std::size_t comma = std::min(whole.find(',', start), whole.size());
    const std::string_view name = trimmed(whole.substr(start, comma - start));
    if (equals_ignoring_case(name, "ALL") || equals_ignoring_case(name, "NONE")) {
      return Error{expected + " (ALL and NONE stand alone)"};
    }
    if (!rendezvous::is_env_name(name)) {
      return Error{expected + " (" + quote(name) + " is not a variable name)"};
    }
    if (rendezvous::is_daemon_owned_env(name)) {
      return Error{std::string(name) +
                   " is set by the daemon for every worker and is never exported"};
    }
    if (rendezvous::is_unexported_env(name)) {
      return Error{std::string(name) +
                   " describes the submitting host or session and is never exported (pass it "
                   "with --env " +
                   std::string(name) + "=VALUE if the workers need it)"};
    }
    choice.names.emplace_back(name);
    start = comma + 1;
  }
  return choice;
}

// The bytes an exec of `spec` (command, env, exported_env) takes, as validate() counts them.
std::size_t exec_bytes(const JobSpec& spec) {
  std::size_t bytes = 0;
  for (const std::string& arg : spec.command) bytes += arg.size() + 1;
  for (const auto& [name, value] : spec.env) bytes += name.size() + value.size() + 2;
  for (const auto& [name, value] : spec.exported_env) {
    if (!spec.env.contains(name)) bytes += name.size() + value.size() + 2;
  }
  return bytes;
}

// "A (20001 bytes), B (9000 bytes) and C (512 bytes)": the largest of `vars`.
std::string largest(const std::map<std::string, std::string>& vars) {
  std::vector<std::pair<std::size_t, std::string>> sizes;
  for (const auto& [name, value] : vars) sizes.emplace_back(name.size() + value.size() + 2, name);
  // Largest first; equal sizes by name, so the message does not depend on the sort.
  std::sort(sizes.begin(), sizes.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  sizes.resize(std::min<std::size_t>(sizes.size(), 3));
  std::string text;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    text += (i == 0                  ? ""
             : i + 1 == sizes.size() ? " and "
                                     : ", ") +
            sizes[i].second + " (" + std::to_string(sizes[i].first) + " bytes)";
  }
  return text;
}

constexpr const char* kSendLess =
    "; unset what the workers do not need before submitting, or name what to pass with "
    "--export NAME,... (or NONE)";

// Fills spec->exported_env from `environment` as `choice` says, or returns the problem ("" =
// none; then the spec keeps no exported environment). Runs after command and env are final:
// the limits count them too.
std::string export_environment(const ExportChoice& choice,
                               const std::map<std::string, std::string>& environment,
                               JobSpec* spec) {
  std::map<std::string, std::string> exported;
  if (choice.all) {
    for (const auto& [name, value] : environment) {
      if (rendezvous::is_env_name(name) && !rendezvous::is_unexported_env(name)) {
        exported.emplace(name, value);
      }
    }
  } else {
    for (const std::string& name : choice.names) {
      if (const auto it = environment.find(name); it != environment.end()) {
        exported.emplace(name, it->second);
      }
    }
  }
  std::map<std::string, std::string> too_long;
  for (const auto& [name, value] : exported) {
    if (value.size() > rendezvous::kMaxEnvValueBytes) too_long.emplace(name, value);
  }
  if (!too_long.empty()) {
    return "the limit for one variable is " + std::to_string(rendezvous::kMaxEnvValueBytes) +
           " bytes, and the environment to export has " + std::to_string(too_long.size()) +
           " longer: " + largest(too_long) + kSendLess;
  }
  std::size_t variables = spec->env.size();
  for (const auto& entry : exported) variables += spec->env.contains(entry.first) ? 0 : 1;
  if (variables > rendezvous::kMaxEnvVars) {
    return "the environment to export has " + std::to_string(exported.size()) +
           " variables; with env that is more than the limit of " +
           std::to_string(rendezvous::kMaxEnvVars) + kSendLess;
  }
  JobSpec with = *spec;
  with.exported_env = exported;
  if (const std::size_t bytes = exec_bytes(with); bytes > rendezvous::kMaxCommandAndEnvBytes) {
    return "the environment to export takes " + std::to_string(bytes - exec_bytes(*spec)) +
           " bytes; with the command and env that is " + std::to_string(bytes) +
           " bytes, more than the limit of " + std::to_string(rendezvous::kMaxCommandAndEnvBytes) +
           "; the largest: " + largest(exported) + kSendLess;
  }
  spec->exported_env = std::move(exported);
  return "";
}

// Where each field of the merged spec came from, by validate()'s field names, and which fields
// kept a default because the value given for them was wrong: their rules would only repeat
// that problem.
struct Sources {
  std::map<std::string, std::string> label;  // field -> "file:line" or "--flag"
  std::set<std::string> quiet;

  void set(const std::string& field, const std::string& where) {
    label[field] = where;
    if (where.rfind("-", 0) == 0) quiet.erase(field);  // a flag replaced the wrong value
  }
  // One rule violation with its source: "file:7: nodes: ..." or "--nodes: ...".
  std::string blame(const rendezvous::SpecProblem& p) const {
    auto it = label.find(p.field);
    if (p.field == "env") {
      // Blame the variable's own line when the problem names it ("RANK is set by ...").
      const std::string_view rest = p.problem;
      for (auto var = label.lower_bound("env."); var != label.end(); ++var) {
        if (var->first.rfind("env.", 0) != 0) break;
        const std::string name = var->first.substr(4);
        if (rest.starts_with(name + " ") || rest.starts_with("'" + name + "'") ||
            rest.starts_with("the value of " + name + " ")) {
          it = var;
          break;
        }
      }
    }
    if (it == label.end()) return p.field + ": " + p.problem;
    if (it->second.rfind("-", 0) == 0) return it->second + ": " + p.problem;
    return it->second + ": " + p.field + ": " + p.problem;
  }
};

}  // namespace

const std::vector<std::string>& job_file_keys() {
  static const std::vector<std::string> keys = {"name",
                                                "command",
                                                "env",
                                                "nodes",
                                                "min_nodes",
                                                "max_nodes",
                                                "workers_per_node",
                                                "gpus_per_node",
                                                "checkpoint_root",
                                                "max_restarts",
                                                "restart_backoff",
                                                "last_call",
                                                "hang_timeout",
                                                "working_dir",
                                                "user",
                                                "export",
                                                "warm",
                                                "priority",
                                                "preemptible",
                                                "scale",
                                                "scale_min_gain",
                                                "scale_window"};
  return keys;
}

Result<std::int32_t> parse_priority(std::string_view text) {
  const std::string expected = "expected an integer such as 10 or -5, got " + quote(text);
  std::size_t i = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  // 9 digits and a sign always fit in 32 bits; the range itself is validate()'s to judge.
  if (i == text.size() || text.size() - i > 9) return Error{expected};
  std::int32_t value = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return Error{expected};
    value = value * 10 + (text[i] - '0');
  }
  return text[0] == '-' ? -value : value;
}

Result<std::pair<std::uint32_t, std::uint32_t>> parse_node_range(std::string_view text) {
  const auto number = [](std::string_view digits, std::uint32_t* out) {
    if (digits.empty() || digits.size() > 9) return false;  // 9 digits always fit in 32 bits
    std::uint32_t value = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + static_cast<std::uint32_t>(c - '0');
    }
    *out = value;
    return true;
  };
  std::uint32_t low = 0;
  std::uint32_t high = 0;
  const auto colon = text.find(':');
  const bool ok = colon == std::string_view::npos ? number(text, &low) && number(text, &high)
                                                  : number(text.substr(0, colon), &low) &&
                                                        number(text.substr(colon + 1), &high);
  if (!ok) {
    return Error{"expected MIN:MAX or N (e.g. \"2:4\" or \"3\"), got " + quote(text)};
  }
  return std::pair{low, high};
}

Result<JobFile> parse_job_toml(std::string_view text, const std::string& label) {
  // toml11 recurses once per level of nesting: refuse a deep text before it can overflow the
  // stack (10,000 nested arrays did).
  if (const auto deep = config::find_deep_nesting(text)) {
    return Error{label + ":" + std::to_string(deep->line) + ": " + deep->reason};
  }
  toml::value root;
  try {
    std::istringstream stream{std::string(text)};
    root = toml::parse(stream, label);
  } catch (const toml::syntax_error& e) {
    const auto line = e.location().line();
    return Error{label + (line > 0 ? ":" + std::to_string(line) : std::string()) +
                 ": TOML syntax error: " + syntax_reason(e.what())};
  } catch (const std::exception& e) {
    return Error{label + ": cannot parse the job file: " + syntax_reason(e.what())};
  }

  JobFile file;
  file.path = label;
  const auto where = [&](const toml::value& v) {
    const int line = line_of(v);
    return line > 0 ? label + ":" + std::to_string(line) : label;
  };
  const auto problem = [&](const toml::value& v, const std::string& key, const std::string& why) {
    if (why.empty()) return;
    file.problems.push_back(where(v) + ": " + key + ": " + why);
    file.broken.insert(key);
  };
  bool has_min = false;
  bool has_max = false;

  for (const auto& [key, value_ptr] : in_file_order(root.as_table())) {
    const toml::value& v = *value_ptr;
    file.lines[key] = line_of(v);
    JobSpec& spec = file.spec;
    if (key == "name") {
      problem(v, key, read_string(v, &spec.name));
    } else if (key == "command") {
      if (v.is_string()) {
        problem(v, key,
                "expected an array of strings, got " + describe(v) +
                    "; write the program and each argument as its own string, e.g. "
                    "[\"elastic-trainer\", \"--model\", \"fmnist\"]");
        continue;
      }
      if (!v.is_array()) {
        problem(v, key, "expected an array of strings, got " + describe(v));
        continue;
      }
      std::vector<std::string> command;
      const toml::array& args = v.as_array();
      for (std::size_t i = 0; i < args.size(); ++i) {
        std::string arg;
        const std::string why = read_string(args[i], &arg);
        problem(args[i], "command[" + std::to_string(i) + "]", why);
        command.push_back(std::move(arg));
      }
      spec.command = std::move(command);
    } else if (key == "env") {
      if (!v.is_table()) {
        problem(v, key,
                "expected a table of strings such as { OMP_PROC_BIND = \"close\" }, got " +
                    describe(v));
        continue;
      }
      for (const auto& [name, value] : in_file_order(v.as_table())) {
        std::string text_value;
        const std::string why = read_string(*value, &text_value);
        problem(*value, "env." + printable(name), why);
        if (why.empty()) spec.env[name] = std::move(text_value);
        file.lines["env." + name] = line_of(*value);
      }
    } else if (key == "nodes") {
      problem(v, key, read_nodes(v, &spec));
    } else if (key == "min_nodes") {
      has_min = true;
      problem(v, key, read_u32(v, &spec.min_nodes));
    } else if (key == "max_nodes") {
      has_max = true;
      problem(v, key, read_u32(v, &spec.max_nodes));
    } else if (key == "workers_per_node" || key == "gpus_per_node") {
      const std::string other = key == "workers_per_node" ? "gpus_per_node" : "workers_per_node";
      if (root.as_table().count(other) > 0 && key == "gpus_per_node") {
        problem(v, key, "is another name for workers_per_node; give only one of them");
        continue;
      }
      problem(v, key, read_u32(v, &spec.workers_per_node));
    } else if (key == "checkpoint_root") {
      problem(v, key, read_string(v, &spec.checkpoint_root));
    } else if (key == "max_restarts") {
      problem(v, key, read_u32(v, &spec.max_restarts));
    } else if (key == "restart_backoff") {
      problem(v, key, read_duration(v, &spec.restart_backoff));
    } else if (key == "last_call") {
      Duration last_call{};
      const std::string why = read_duration(v, &last_call);
      problem(v, key, why);
      if (why.empty()) spec.last_call = last_call;
    } else if (key == "hang_timeout") {
      Duration hang_timeout{};
      const std::string why = read_duration(v, &hang_timeout);
      problem(v, key, why);
      if (why.empty()) spec.hang_timeout = hang_timeout;
    } else if (key == "priority") {
      problem(v, key, read_i32(v, &spec.priority));
    } else if (key == "preemptible") {
      problem(v, key, read_bool(v, &spec.preemptible));
    } else if (key == "scale") {
      problem(v, key, read_scale(v, &spec.scale));
    } else if (key == "scale_min_gain") {
      problem(v, key, read_number(v, &spec.scale_min_gain));
    } else if (key == "scale_window") {
      problem(v, key, read_duration(v, &spec.scale_window));
    } else if (key == "working_dir") {
      const std::string why = read_string(v, &spec.working_dir);
      problem(v, key, why);
      file.has_working_dir = why.empty();
    } else if (key == "warm") {
      problem(v, key, read_bool(v, &spec.warm));
    } else if (key == "user") {
      std::string user;
      const std::string why = read_string(v, &user);
      problem(v, key, why);
      if (why.empty()) file.user = user;
    } else if (key == "export") {
      // A string as --export takes it, or an array of names (joined as --export writes them).
      std::optional<std::string> setting;
      if (v.is_string()) setting = v.as_string().str;
      if (v.is_array() && !v.as_array().empty() &&
          std::all_of(v.as_array().begin(), v.as_array().end(),
                      [](const toml::value& name) { return name.is_string(); })) {
        setting = "";
        for (const toml::value& name : v.as_array()) {
          *setting += (setting->empty() ? "" : ",") + name.as_string().str;
        }
      }
      if (!setting) {
        problem(v, key,
                "expected \"ALL\", \"NONE\" or the variables to pass on (\"A,B\" or [\"A\", "
                "\"B\"]), got " +
                    describe(v));
        continue;
      }
      const auto choice = parse_export(*setting);
      problem(v, key, choice ? "" : choice.error().message);
      if (choice) file.export_setting = setting;
    } else if (key == "uid" || key == "gid") {
      problem(v, key,
              "is taken from the submitting process's credentials and cannot be set in a job file");
    } else {
      problem(v, printable(key), unknown_key_reason(key));
    }
  }

  if (root.as_table().count("nodes") > 0 && (has_min || has_max)) {
    const toml::value& nodes = root.as_table().at("nodes");
    problem(nodes, "nodes", "give either nodes or min_nodes/max_nodes, not both");
  } else if (has_min && !has_max) {
    file.spec.max_nodes = file.spec.min_nodes;  // min_nodes alone means exactly that many
  }
  return file;
}

Result<JobFile> read_job_file(const std::string& path, JobFileError* kind) {
  const auto fail = [&](JobFileError k, std::string message) {
    if (kind != nullptr) *kind = k;
    return Error{std::move(message)};
  };
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    return fail(JobFileError::kUnreadable, path + ": cannot read the job file: it does not exist");
  }
  if (std::filesystem::is_directory(status)) {
    return fail(JobFileError::kUnreadable, path + ": cannot read the job file: it is a directory");
  }
  // A job file is a few lines; a huge one is a mistake (a data file named by accident).
  constexpr std::uintmax_t kMaxJobFileBytes = 1024 * 1024;
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size > kMaxJobFileBytes) {
    return fail(JobFileError::kInvalid,
                path + ": the job file is " + std::to_string(size) +
                    " bytes, more than the limit of 1 MiB; is this the right file?");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(JobFileError::kUnreadable,
                path + ": cannot read the job file: " + std::strerror(errno));
  }
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) {
    return fail(JobFileError::kUnreadable,
                path + ": cannot read the job file: " + std::strerror(errno));
  }
  auto parsed = parse_job_toml(content.str(), path);
  if (!parsed) return fail(JobFileError::kInvalid, parsed.error().message);
  return parsed;
}

Result<Caller> current_caller() {
  Caller caller;
  caller.uid = static_cast<std::uint32_t>(::geteuid());
  caller.gid = static_cast<std::uint32_t>(::getegid());
  passwd entry{};
  passwd* found = nullptr;
  char buffer[4096];
  if (::getpwuid_r(caller.uid, &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr) {
    caller.user = found->pw_name;
  } else {
    caller.user = std::to_string(caller.uid);
  }
  for (char** variable = environ; variable != nullptr && *variable != nullptr; ++variable) {
    const std::string_view text = *variable;
    const auto eq = text.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    caller.environment.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  std::error_code ec;
  caller.cwd = std::filesystem::current_path(ec).string();
  if (ec) {
    return Error{"Cannot find the current directory (" + ec.message() +
                 "); cd into an existing directory or give working_dir."};
  }
  return caller;
}

std::string oversized_request_problem(const JobSpec& spec, std::size_t request_bytes,
                                      std::size_t limit) {
  if (request_bytes <= limit) return "";
  const bool exported = !spec.exported_env.empty();
  return std::string(exported ? "export: " : "env: ") + "the submit request takes " +
         std::to_string(request_bytes) + " bytes, more than the control socket's limit of " +
         std::to_string(limit) + "; the largest " +
         (exported ? "exported variables: " + largest(spec.exported_env)
                   : "variables of env: " + largest(spec.env)) +
         (exported ? kSendLess : "");
}

Status resolve_command(JobSpec* spec, const Caller& caller) {
  if (spec->command.empty() || spec->command.front().empty()) return ok_status();
  std::string& program = spec->command.front();
  if (program.find('/') != std::string::npos) {
    program = resolve_path(program, caller.cwd);
    return ok_status();
  }
  const auto path_it = caller.environment.find("PATH");
  const std::string path = path_it != caller.environment.end() ? path_it->second : "/bin:/usr/bin";
  std::string not_executable;
  for (std::size_t start = 0; start <= path.size();) {
    const std::size_t colon = std::min(path.find(':', start), path.size());
    const std::string entry = path.substr(start, colon - start);
    start = colon + 1;
    // As execvp: an empty entry is the current directory.
    const std::string dir = entry.empty() ? caller.cwd : resolve_path(entry, caller.cwd);
    const std::string candidate = dir + (dir.ends_with('/') ? "" : "/") + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::faccessat(AT_FDCWD, candidate.c_str(), X_OK, AT_EACCESS) == 0) {
      program = candidate;
      return ok_status();
    }
    if (not_executable.empty()) not_executable = candidate;
  }
  if (!not_executable.empty()) {
    return Error{"command: " + quote(program) + " was found in PATH only as " + not_executable +
                 ", which you may not execute; make it executable or give the full path of "
                 "another"};
  }
  constexpr std::size_t kShownPath = 512;
  const std::string shown_path =
      path.size() > kShownPath ? path.substr(0, kShownPath) + "..." : path;
  return Error{"command: " + quote(program) + " was not found in PATH (" + shown_path +
               "); give its full path, or submit from the environment (venv, conda, module) that "
               "provides it"};
}

Result<JobSpec> build_job_spec(const JobFile* file, const JobOverrides& flags,
                               const Caller& caller) {
  JobSpec spec;
  Sources sources;
  std::vector<std::string> errors;  // every problem, in the order the header promises
  bool has_working_dir = false;
  if (file != nullptr) {
    spec = file->spec;
    has_working_dir = file->has_working_dir;
    errors = file->problems;
    for (const auto& [key, line] : file->lines) {
      const std::string where = line > 0 ? file->path + ":" + std::to_string(line) : file->path;
      if (key == "nodes") {
        sources.set("nodes", where);
        sources.set("min_nodes", where);
        sources.set("max_nodes", where);
      } else if (key == "min_nodes" || key == "max_nodes") {
        sources.set(key, where);
        if (key == "min_nodes" || !sources.label.count("nodes")) sources.set("nodes", where);
      } else if (key == "gpus_per_node") {
        sources.set("workers_per_node", where);
      } else if (key.rfind("env.", 0) == 0) {
        sources.set(key, where);
        if (!sources.label.count("env")) sources.set("env", where);
      } else {
        sources.set(key, where);
      }
    }
    for (const std::string& key : file->broken) {
      if (key == "nodes" || key == "min_nodes" || key == "max_nodes") {
        sources.quiet.insert({"nodes", "min_nodes", "max_nodes"});
      } else if (key == "gpus_per_node") {
        sources.quiet.insert("workers_per_node");
      } else if (key.rfind("command[", 0) == 0) {
        sources.quiet.insert("command");
      } else {
        sources.quiet.insert(key);
      }
    }
    if (file->user && *file->user != caller.user && *file->user != std::to_string(caller.uid)) {
      const int line = file->lines.count("user") ? file->lines.at("user") : 0;
      const std::string where = line > 0 ? file->path + ":" + std::to_string(line) : file->path;
      errors.push_back(where + ": user: jobs run as the user who submits them, and that is " +
                       caller.user + ", not " + *file->user + "; submit as " + *file->user +
                       " (e.g. sudo -u " + *file->user +
                       " elasticctl submit ...) or remove the key");
    }
  }

  // A flag that cannot be read leaves the value it meant to replace; that value's rules stay
  // quiet, since the user is replacing it anyway.
  if (flags.name) {
    spec.name = *flags.name;
    sources.set("name", "--name");
  }
  if (flags.command) {
    spec.command = *flags.command;
    sources.set("command", "-- COMMAND");
  }
  for (const std::string& pair : flags.env) {
    const auto eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      errors.push_back("--env: expected NAME=VALUE, got " + quote(pair));
      continue;
    }
    spec.env[pair.substr(0, eq)] = pair.substr(eq + 1);
    sources.set("env", "--env");
    sources.set("env." + pair.substr(0, eq), "--env");
  }
  if (flags.nodes) {
    auto range = parse_node_range(*flags.nodes);
    if (range) {
      spec.min_nodes = range->first;
      spec.max_nodes = range->second;
      for (const char* field : {"nodes", "min_nodes", "max_nodes"}) sources.set(field, "--nodes");
    } else {
      errors.push_back("--nodes: " + range.error().message);
      sources.quiet.insert({"nodes", "min_nodes", "max_nodes"});
    }
  }
  if (flags.workers_per_node) {
    spec.workers_per_node = *flags.workers_per_node;
    sources.set("workers_per_node", "--workers-per-node");
  }
  if (flags.checkpoint_root) {
    spec.checkpoint_root = *flags.checkpoint_root;
    sources.set("checkpoint_root", "--checkpoint-root");
  }
  if (flags.max_restarts) {
    spec.max_restarts = *flags.max_restarts;
    sources.set("max_restarts", "--max-restarts");
  }
  const auto duration_flag = [&](const std::string& text, const char* field,
                                 const char* flag) -> std::optional<Duration> {
    Result<Duration> d = parse_duration(text);
    if (!d) {
      errors.push_back(std::string(flag) + ": " + d.error().message);
      sources.quiet.insert(field);
      return std::nullopt;
    }
    sources.set(field, flag);
    return *d;
  };
  if (flags.restart_backoff) {
    if (auto d = duration_flag(*flags.restart_backoff, "restart_backoff", "--restart-backoff")) {
      spec.restart_backoff = *d;
    }
  }
  if (flags.last_call) {
    if (auto d = duration_flag(*flags.last_call, "last_call", "--last-call")) spec.last_call = *d;
  }
  if (flags.warm) spec.warm = *flags.warm;
  if (flags.hang_timeout) {
    if (auto d = duration_flag(*flags.hang_timeout, "hang_timeout", "--hang-timeout")) {
      spec.hang_timeout = *d;
    }
  }
  if (flags.priority) {
    if (auto n = parse_priority(*flags.priority)) {
      spec.priority = *n;
      sources.set("priority", "--priority");
    } else {
      errors.push_back("--priority: " + n.error().message);
      sources.quiet.insert("priority");
    }
  }
  if (flags.preemptible) {
    spec.preemptible = *flags.preemptible;
    sources.set("preemptible", "--preemptible");
  }
  if (flags.scale) {
    if (auto mode = rendezvous::parse_scale_mode(*flags.scale)) {
      spec.scale = *mode;
      sources.set("scale", "--scale");
    } else {
      errors.push_back("--scale: expected fixed or throughput, got " + quote(*flags.scale));
      sources.quiet.insert("scale");
    }
  }
  if (flags.scale_min_gain) {
    char* end = nullptr;
    const std::string& text = *flags.scale_min_gain;
    const double gain = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size()) {
      errors.push_back("--scale-min-gain: expected a number such as 0.05, got " + quote(text));
      sources.quiet.insert("scale_min_gain");
    } else {
      spec.scale_min_gain = gain;
      sources.set("scale_min_gain", "--scale-min-gain");
    }
  }
  if (flags.scale_window) {
    if (auto d = duration_flag(*flags.scale_window, "scale_window", "--scale-window")) {
      spec.scale_window = *d;
    }
  }
  if (flags.working_dir) {
    spec.working_dir = *flags.working_dir;
    has_working_dir = true;
    sources.set("working_dir", "--workdir");
  }

  // The exported environment last: its limits count the final command and env.
  {
    std::string setting = "ALL";
    std::string where = "export (the default, ALL)";
    if (file != nullptr && file->export_setting) {
      setting = *file->export_setting;
      const int line = file->lines.count("export") ? file->lines.at("export") : 0;
      where = (line > 0 ? file->path + ":" + std::to_string(line) : file->path) + ": export";
    }
    if (flags.export_setting) {
      setting = *flags.export_setting;
      where = "--export";
    }
    const Result<ExportChoice> choice = parse_export(setting);
    // A bad file value was reported with the file's problems; a flag's is reported here.
    if (!choice.ok() && flags.export_setting) {
      errors.push_back(where + ": " + choice.error().message);
    }
    const std::string problem =
        choice.ok() ? export_environment(*choice, caller.environment, &spec) : "";
    if (!problem.empty()) errors.push_back(where + ": " + problem);
    sources.set("exported_env", where.starts_with("-") ? where : where.substr(0, where.rfind(':')));
    if (!choice.ok() || !problem.empty()) sources.quiet.insert("exported_env");
  }

  if (spec.name.empty() && !sources.label.count("name")) {
    errors.push_back("name: is required; give name = \"...\" in the job file or --name");
    sources.quiet.insert("name");
  }
  if (spec.command.empty() && !sources.label.count("command")) {
    errors.push_back(
        "command: is required; give command = [\"program\", \"arg\", ...] in the job file or "
        "-- PROGRAM ARGS after the flags");
    sources.quiet.insert("command");
  }

  // The daemon cannot know the caller's cwd: make relative paths absolute here. "~" would be
  // expanded by a shell but never by the daemon, so it is refused rather than misread.
  for (auto [field, path] :
       {std::pair<const char*, std::string*>{"checkpoint_root", &spec.checkpoint_root},
        std::pair<const char*, std::string*>{"working_dir", &spec.working_dir}}) {
    if (!path->empty() && path->front() == '~') {
      errors.push_back(sources.blame(
          {field, quote(*path) + " starts with ~, which is not expanded; write the full path"}));
      sources.quiet.insert(field);
      continue;
    }
    *path = resolve_path(*path, caller.cwd);
  }
  if (!has_working_dir) spec.working_dir = caller.cwd;

  spec.user = caller.user;
  spec.uid = caller.uid;
  spec.gid = caller.gid;
  for (const rendezvous::SpecProblem& problem : rendezvous::spec_problems(spec)) {
    if (!sources.quiet.count(problem.field)) errors.push_back(sources.blame(problem));
  }
  if (!errors.empty()) {
    std::string message;
    for (const std::string& e : errors) message += (message.empty() ? "" : "\n") + e;
    return Error{message};
  }
  return spec;
}

}  // namespace elastic::ctl
