#include "daemon/rendezvous/job_spec.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <utility>

#include "daemon/core/duration.h"
#include "daemon/rendezvous/msgpack_fields.h"
#include "daemon/rendezvous/placeholders.h"
#include "daemon/rendezvous/python_command.h"

namespace elastic::rendezvous {
namespace {

Status field_error(std::string_view field, const std::string& problem) {
  return Error{std::string(field) + ": " + problem};
}

bool is_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// Quotes user text in an error without flooding the message.
std::string shown(std::string_view s) {
  constexpr std::size_t kShown = 64;
  std::string out = "'";
  for (char c : s.substr(0, kShown)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > kShown) out += "...";
  return out + "'";
}

// The problem with a path field's value ("" = none).
std::string path_problem(const std::string& path) {
  if (path.empty()) return "";
  if (path.size() > kMaxPathBytes) {
    return "is longer than " + std::to_string(kMaxPathBytes) + " bytes";
  }
  if (has_nul(path)) return "contains a NUL byte";
  if (path.front() != '/') return shown(path) + " is not an absolute path";
  return "";
}

// A number as a user would write it ("0.05", "2"); "nan" and "inf" as such.
std::string json_number(double value) {
  if (std::isnan(value)) return "NaN";
  return nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string duration_problem(Duration value, Duration max) {
  if (value < Duration::zero()) return "must not be negative";
  if (value > max) {
    return format_duration(value) + " is longer than the limit of " + format_duration(max);
  }
  return "";
}

// The first problem of one environment variable ("" = none): of env, or of exported_env (which
// may not carry is_unexported_env() names and is never expanded).
std::string env_problem(const std::string& name, const std::string& value, bool exported) {
  if (name.size() > kMaxEnvNameBytes) {
    return "a variable name is longer than " + std::to_string(kMaxEnvNameBytes) + " bytes";
  }
  if (!is_env_name(name)) {
    return shown(name) +
           " is not a variable name (letters, digits and '_', not starting with a "
           "digit)";
  }
  if (is_daemon_owned_env(name)) {
    return name + " is set by the daemon for every worker and cannot be overridden";
  }
  if (exported && is_unexported_env(name)) {
    return name +
           " describes the submitting host or session and is never exported (set it in env to "
           "pass it on)";
  }
  if (value.size() > kMaxEnvValueBytes) {
    return "the value of " + name + " is longer than " + std::to_string(kMaxEnvValueBytes) +
           " bytes";
  }
  if (has_nul(value)) return "the value of " + name + " contains a NUL byte";
  if (exported) return "";
  if (std::string problem = placeholder_problem(value); !problem.empty()) {
    return "the value of " + name + " " + problem;
  }
  return "";
}

// Collects problems up to kMaxSpecProblems; beyond that it only counts them, so a hostile spec
// (1,024 bad variables) cannot make an error message of hundreds of kilobytes.
class ProblemList {
 public:
  void add(std::string_view field, std::string problem) {
    if (problem.empty()) return;
    if (problems_.size() < kMaxSpecProblems) {
      problems_.push_back(SpecProblem{std::string(field), std::move(problem)});
    } else {
      ++more_;
    }
  }
  // A Status made by field_error(): "<field>: <problem>".
  void add(const Status& status) {
    if (status.ok()) return;
    const std::string& message = status.error().message;
    const auto colon = message.find(": ");
    if (colon == std::string::npos) {
      add("spec", message);
    } else {
      add(message.substr(0, colon), message.substr(colon + 2));
    }
  }
  std::vector<SpecProblem> take() && {
    if (more_ > 0) {
      problems_.push_back(SpecProblem{
          "spec", "and " + std::to_string(more_) + " more problem" + (more_ == 1 ? "" : "s")});
    }
    return std::move(problems_);
  }

 private:
  std::vector<SpecProblem> problems_;
  std::size_t more_ = 0;
};

std::string joined(const std::vector<SpecProblem>& problems) {
  std::string message;
  for (const SpecProblem& p : problems) {
    message += (message.empty() ? "" : "\n") + p.field + ": " + p.problem;
  }
  return message;
}

}  // namespace

std::string_view scale_mode_name(ScaleMode mode) {
  return mode == ScaleMode::kThroughput ? "throughput" : "fixed";
}

std::optional<ScaleMode> parse_scale_mode(std::string_view name) {
  if (name == "fixed") return ScaleMode::kFixed;
  if (name == "throughput") return ScaleMode::kThroughput;
  return std::nullopt;
}

bool is_env_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

bool is_daemon_owned_env(std::string_view name) {
  static constexpr std::string_view kOwned[] = {
      "RANK",
      "LOCAL_RANK",
      "WORLD_SIZE",
      "LOCAL_WORLD_SIZE",
      "GROUP_RANK",
      "GROUP_WORLD_SIZE",
      "ROLE_RANK",
      "ROLE_WORLD_SIZE",
      "ROLE_NAME",
      "MASTER_ADDR",
      "MASTER_PORT",
      "CUDA_VISIBLE_DEVICES",
      "CUDA_DEVICE_ORDER",
  };
  for (std::string_view owned : kOwned) {
    if (name == owned) return true;
  }
  return name.starts_with("TORCHELASTIC_") || name.starts_with("ELASTIC_");
}

bool is_unexported_env(std::string_view name) {
  static constexpr std::string_view kHostOrSession[] = {
      "HOME",
      "USER",
      "LOGNAME",
      "SHELL",
      "HOSTNAME",
      "HOST",
      "PWD",
      "OLDPWD",
      "SHLVL",
      "_",
      "DISPLAY",
      "XAUTHORITY",
      "XDG_RUNTIME_DIR",
      "XDG_SEAT",
      "XDG_VTNR",
      "DBUS_SESSION_BUS_ADDRESS",
      "TMUX",
      "TMUX_PANE",
      "STY",
      "WINDOW",
      "NOTIFY_SOCKET",
      "LISTEN_FDS",
      "LISTEN_PID",
      "LISTEN_FDNAMES",
      "INVOCATION_ID",
      "JOURNAL_STREAM",
      "MANAGERPID",
      "SYSTEMD_EXEC_PID",
      "NODE_RANK",
      "GPU_DEVICE_ORDINAL",
  };
  static constexpr std::string_view kPrefixes[] = {"SSH_", "XDG_SESSION_", "SLURM_",
                                                   "PMI_", "PMIX_",        "OMPI_COMM_WORLD_"};
  if (is_daemon_owned_env(name)) return true;
  for (std::string_view listed : kHostOrSession) {
    if (name == listed) return true;
  }
  for (std::string_view prefix : kPrefixes) {
    if (name.starts_with(prefix)) return true;
  }
  return name.ends_with("_VISIBLE_DEVICES");
}

std::vector<SpecProblem> spec_problems(const JobSpec& spec) {
  ProblemList problems;

  // name
  if (spec.name.empty()) {
    problems.add("name", "must not be empty");
  } else if (spec.name.size() > kMaxJobNameBytes) {
    problems.add("name", shown(spec.name) + " is longer than " + std::to_string(kMaxJobNameBytes) +
                             " characters");
  } else if (!std::all_of(spec.name.begin(), spec.name.end(), is_name_char)) {
    problems.add("name", shown(spec.name) + " may contain only letters, digits, '.', '_' and '-'");
  }

  // command and env: each argument and variable on its own; their total only when the counts
  // are within bounds (otherwise the count is the problem).
  std::size_t exec_bytes = 0;
  bool counted = true;
  if (spec.command.empty()) {
    problems.add("command", "must name the program to run");
  } else if (spec.command.size() > kMaxCommandArgs) {
    problems.add("command", "has " + std::to_string(spec.command.size()) +
                                " arguments, more than the limit of " +
                                std::to_string(kMaxCommandArgs));
    counted = false;
  } else {
    if (spec.command.front().empty()) problems.add("command", "the program name is empty");
    for (std::size_t i = 0; i < spec.command.size(); ++i) {
      const std::string& arg = spec.command[i];
      if (arg.size() > kMaxArgBytes) {
        problems.add("command", "argument " + std::to_string(i) + " is longer than " +
                                    std::to_string(kMaxArgBytes) + " bytes");
      } else if (has_nul(arg)) {
        problems.add("command", "argument " + std::to_string(i) + " contains a NUL byte");
      }
      exec_bytes += arg.size() + 1;
    }
  }
  if (spec.env.size() > kMaxEnvVars) {
    problems.add("env", "has " + std::to_string(spec.env.size()) +
                            " variables, more than the limit of " + std::to_string(kMaxEnvVars));
    counted = false;
  } else {
    for (const auto& [name, value] : spec.env) {
      problems.add("env", env_problem(name, value, /*exported=*/false));
      exec_bytes += name.size() + value.size() + 2;
    }
  }
  // exported_env shares env's limits: both end up in one exec's environment.
  if (spec.env.size() + spec.exported_env.size() > kMaxEnvVars) {
    problems.add("exported_env", "has " + std::to_string(spec.exported_env.size()) +
                                     " variables, with env's " + std::to_string(spec.env.size()) +
                                     " more than the limit of " + std::to_string(kMaxEnvVars));
    counted = false;
  } else {
    for (const auto& [name, value] : spec.exported_env) {
      problems.add("exported_env", env_problem(name, value, /*exported=*/true));
      if (!spec.env.contains(name)) exec_bytes += name.size() + value.size() + 2;
    }
  }
  if (counted && exec_bytes > kMaxCommandAndEnvBytes) {
    problems.add("command",
                 std::string(spec.exported_env.empty() ? "and env together take "
                                                       : "with env and exported_env takes ") +
                     std::to_string(exec_bytes) + " bytes, more than the limit of " +
                     std::to_string(kMaxCommandAndEnvBytes));
  }

  // nodes and workers
  if (spec.min_nodes < 1) problems.add("min_nodes", "must be at least 1");
  if (spec.max_nodes > kMaxNodesPerJob) {
    problems.add("max_nodes", std::to_string(spec.max_nodes) + " is more than the limit of " +
                                  std::to_string(kMaxNodesPerJob));
  }
  if (spec.min_nodes > spec.max_nodes) {
    problems.add("nodes", "min " + std::to_string(spec.min_nodes) + " is greater than max " +
                              std::to_string(spec.max_nodes));
  }
  if (spec.workers_per_node > kMaxWorkersPerNode) {
    problems.add("workers_per_node", std::to_string(spec.workers_per_node) +
                                         " is more than the limit of " +
                                         std::to_string(kMaxWorkersPerNode));
  }

  // paths, restarts, times
  problems.add("checkpoint_root", path_problem(spec.checkpoint_root));
  problems.add("working_dir", path_problem(spec.working_dir));
  if (spec.warm) {
    if (auto python = parse_python_command(spec.command); !python.ok()) {
      problems.add("warm", "needs a Python command: " + python.error().message);
    }
  }
  if (spec.max_restarts > kMaxRestartsLimit) {
    problems.add("max_restarts", std::to_string(spec.max_restarts) + " is more than the limit of " +
                                     std::to_string(kMaxRestartsLimit));
  }
  problems.add("restart_backoff", duration_problem(spec.restart_backoff, kMaxRestartBackoff));
  if (spec.last_call) {
    problems.add("last_call", duration_problem(*spec.last_call, kMaxLastCall));
  }
  if (spec.hang_timeout && *spec.hang_timeout != Duration::zero()) {
    const Duration hang = *spec.hang_timeout;
    std::string problem = duration_problem(hang, kMaxHangTimeout);
    if (problem.empty() && hang < kMinHangTimeout) {
      problem = format_duration(hang) + " is shorter than the minimum of " +
                format_duration(kMinHangTimeout) + " (0s turns hang detection off)";
    }
    problems.add("hang_timeout", problem);
  }

  // scheduling
  if (spec.priority < kMinPriority || spec.priority > kMaxPriority) {
    problems.add("priority", std::to_string(spec.priority) + " is outside " +
                                 std::to_string(kMinPriority) + ".." +
                                 std::to_string(kMaxPriority));
  }
  if (static_cast<std::uint8_t>(spec.scale) > kMaxScaleMode) {
    problems.add("scale", "must be \"fixed\" or \"throughput\"");
  }
  // Written so that NaN fails too.
  if (!(spec.scale_min_gain > 0.0 && spec.scale_min_gain <= 1.0)) {
    problems.add("scale_min_gain",
                 json_number(spec.scale_min_gain) + " is not a fraction above 0 and at most 1");
  }
  if (spec.scale_window < kMinScaleWindow || spec.scale_window > kMaxScaleWindow) {
    problems.add("scale_window", format_duration(spec.scale_window) + " is outside " +
                                     format_duration(kMinScaleWindow) + ".." +
                                     format_duration(kMaxScaleWindow));
  }

  // user
  if (spec.user.size() > kMaxUserBytes) {
    problems.add("user", "is longer than " + std::to_string(kMaxUserBytes) + " bytes");
  } else if (std::any_of(spec.user.begin(), spec.user.end(), [](char c) {
               return c == '\0' || c == ':' || c == '/' || c == ' ' || c == '\n' || c == '\t';
             })) {
    problems.add("user", shown(spec.user) + " is not a valid user name");
  }
  return std::move(problems).take();
}

Status validate(const JobSpec& spec) {
  const std::vector<SpecProblem> problems = spec_problems(spec);
  if (problems.empty()) return ok_status();
  return Error{joined(problems)};
}

// ---------------------------------------------------------------------------------------------
// JSON

namespace {

using nlohmann::json;

constexpr std::size_t kMaxJsonBytes = 1024 * 1024;

json to_json_value(const JobSpec& spec) {
  json j = json::object();
  j["name"] = spec.name;
  j["command"] = spec.command;
  json env = json::object();
  for (const auto& [name, value] : spec.env) env[name] = value;
  j["env"] = std::move(env);
  if (!spec.exported_env.empty()) j["exported_env"] = spec.exported_env;
  j["min_nodes"] = spec.min_nodes;
  j["max_nodes"] = spec.max_nodes;
  j["workers_per_node"] = spec.workers_per_node;
  j["checkpoint_root"] = spec.checkpoint_root;
  j["max_restarts"] = spec.max_restarts;
  j["restart_backoff"] = format_duration(spec.restart_backoff);
  if (spec.warm) j["warm"] = true;
  if (spec.last_call) j["last_call"] = format_duration(*spec.last_call);
  if (spec.hang_timeout) j["hang_timeout"] = format_duration(*spec.hang_timeout);
  const JobSpec defaults;
  if (spec.priority != defaults.priority) j["priority"] = spec.priority;
  if (spec.preemptible) j["preemptible"] = true;
  if (spec.scale != defaults.scale) j["scale"] = std::string(scale_mode_name(spec.scale));
  if (spec.scale_min_gain != defaults.scale_min_gain) j["scale_min_gain"] = spec.scale_min_gain;
  if (spec.scale_window != defaults.scale_window) {
    j["scale_window"] = format_duration(spec.scale_window);
  }
  j["working_dir"] = spec.working_dir;
  j["user"] = spec.user;
  j["uid"] = spec.uid;
  j["gid"] = spec.gid;
  return j;
}

const char* type_name(const json& v) { return v.type_name(); }

Status expect_string(const json& v, std::string_view field, std::string* out) {
  if (!v.is_string()) {
    return field_error(field, std::string("expected a string, got ") + type_name(v));
  }
  *out = v.get_ref<const std::string&>();
  return ok_status();
}

Status expect_u32(const json& v, std::string_view field, std::uint32_t* out) {
  if (!v.is_number_integer()) {
    return field_error(field, std::string("expected a non-negative integer, got ") +
                                  (v.is_number() ? "a fraction" : type_name(v)));
  }
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > std::numeric_limits<std::uint32_t>::max()) {
      return field_error(field, std::to_string(u) + " is out of range");
    }
    *out = static_cast<std::uint32_t>(u);
    return ok_status();
  }
  const auto i = v.get<std::int64_t>();
  if (i < 0) return field_error(field, std::to_string(i) + " is negative");
  if (static_cast<std::uint64_t>(i) > std::numeric_limits<std::uint32_t>::max()) {
    return field_error(field, std::to_string(i) + " is out of range");
  }
  *out = static_cast<std::uint32_t>(i);
  return ok_status();
}

Status expect_i32(const json& v, std::string_view field, std::int32_t* out) {
  if (!v.is_number_integer()) {
    return field_error(field, std::string("expected an integer, got ") +
                                  (v.is_number() ? "a fraction" : type_name(v)));
  }
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
      return field_error(field, std::to_string(u) + " is out of range");
    }
    *out = static_cast<std::int32_t>(u);
    return ok_status();
  }
  const auto i = v.get<std::int64_t>();
  if (i < std::numeric_limits<std::int32_t>::min() ||
      i > std::numeric_limits<std::int32_t>::max()) {
    return field_error(field, std::to_string(i) + " is out of range");
  }
  *out = static_cast<std::int32_t>(i);
  return ok_status();
}

Status expect_bool(const json& v, std::string_view field, bool* out) {
  if (!v.is_boolean()) {
    return field_error(field, std::string("expected true or false, got ") + type_name(v));
  }
  *out = v.get<bool>();
  return ok_status();
}

Status expect_duration(const json& v, std::string_view field, Duration* out) {
  std::string text;
  if (!v.is_string()) {
    return field_error(
        field, std::string("expected a duration string such as \"10s\", got ") + type_name(v));
  }
  text = v.get_ref<const std::string&>();
  Result<Duration> d = parse_duration(text);
  if (!d) return field_error(field, d.error().message);
  *out = *d;
  return ok_status();
}

// An object of strings (env, exported_env).
Status expect_env(const json& v, const std::string& field,
                  std::map<std::string, std::string>* out) {
  if (!v.is_object()) {
    return field_error(field, std::string("expected an object of strings, got ") + type_name(v));
  }
  if (v.size() > kMaxEnvVars) {
    return field_error(field, "has more than " + std::to_string(kMaxEnvVars) + " variables");
  }
  out->clear();
  for (const auto& [name, value] : v.items()) {
    std::string text;
    if (Status s = expect_string(value, field + "." + name, &text); !s) return s;
    (*out)[name] = std::move(text);
  }
  return ok_status();
}

Status from_json_value(const json& j, JobSpec* spec) {
  if (!j.is_object()) {
    return field_error("spec", std::string("expected a JSON object, got ") + type_name(j));
  }
  // Every field's problem, not just the first: a client fixes them all in one go.
  ProblemList problems;
  if (!j.contains("name")) problems.add("name", "is required");
  if (!j.contains("command")) problems.add("command", "is required");
  for (const auto& [key, v] : j.items()) {
    Status s = ok_status();
    if (key == "name") {
      s = expect_string(v, key, &spec->name);
    } else if (key == "command") {
      if (!v.is_array()) {
        s = field_error(key, std::string("expected an array of strings, got ") + type_name(v));
      } else if (v.size() > kMaxCommandArgs) {
        s = field_error(key, "has more than " + std::to_string(kMaxCommandArgs) + " arguments");
      } else {
        spec->command.clear();
        for (std::size_t i = 0; i < v.size() && s; ++i) {
          std::string arg;
          s = expect_string(v[i], "command[" + std::to_string(i) + "]", &arg);
          spec->command.push_back(std::move(arg));
        }
      }
    } else if (key == "env") {
      s = expect_env(v, key, &spec->env);
    } else if (key == "exported_env") {
      s = expect_env(v, key, &spec->exported_env);
    } else if (key == "min_nodes") {
      s = expect_u32(v, key, &spec->min_nodes);
    } else if (key == "max_nodes") {
      s = expect_u32(v, key, &spec->max_nodes);
    } else if (key == "workers_per_node") {
      s = expect_u32(v, key, &spec->workers_per_node);
    } else if (key == "checkpoint_root") {
      s = expect_string(v, key, &spec->checkpoint_root);
    } else if (key == "max_restarts") {
      s = expect_u32(v, key, &spec->max_restarts);
    } else if (key == "restart_backoff") {
      s = expect_duration(v, key, &spec->restart_backoff);
    } else if (key == "last_call") {
      if (v.is_null()) {
        spec->last_call.reset();
      } else {
        Duration d{};
        s = expect_duration(v, key, &d);
        if (s) spec->last_call = d;
      }
    } else if (key == "hang_timeout") {
      if (v.is_null()) {
        spec->hang_timeout.reset();
      } else {
        Duration d{};
        s = expect_duration(v, key, &d);
        if (s) spec->hang_timeout = d;
      }
    } else if (key == "priority") {
      s = expect_i32(v, key, &spec->priority);
    } else if (key == "preemptible") {
      s = expect_bool(v, key, &spec->preemptible);
    } else if (key == "scale") {
      std::string name;
      s = expect_string(v, key, &name);
      if (s) {
        if (auto mode = parse_scale_mode(name)) {
          spec->scale = *mode;
        } else {
          s = field_error(key, shown(name) + " is not \"fixed\" or \"throughput\"");
        }
      }
    } else if (key == "scale_min_gain") {
      if (v.is_number()) {
        spec->scale_min_gain = v.get<double>();
      } else {
        s = field_error(key, std::string("expected a number, got ") + type_name(v));
      }
    } else if (key == "scale_window") {
      s = expect_duration(v, key, &spec->scale_window);
    } else if (key == "working_dir") {
      s = expect_string(v, key, &spec->working_dir);
    } else if (key == "warm") {
      s = expect_bool(v, key, &spec->warm);
    } else if (key == "user") {
      s = expect_string(v, key, &spec->user);
    } else if (key == "uid") {
      s = expect_u32(v, key, &spec->uid);
    } else if (key == "gid") {
      s = expect_u32(v, key, &spec->gid);
    } else {
      s = field_error("spec", "unknown field " + shown(key));
    }
    problems.add(s);
  }
  const std::vector<SpecProblem> found = std::move(problems).take();
  if (found.empty()) return ok_status();
  return Error{joined(found)};
}

}  // namespace

std::string to_json(const JobSpec& spec) {
  // Replace invalid UTF-8 instead of throwing: specs are user text.
  return to_json_value(spec).dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<JobSpec> job_spec_from_json(std::string_view json_text) {
  if (json_text.size() > kMaxJsonBytes) {
    return Error{"spec: the JSON text is larger than " + std::to_string(kMaxJsonBytes) + " bytes"};
  }
  try {
    const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Error{"spec: the text is not valid JSON"};
    JobSpec spec;
    if (Status s = from_json_value(j, &spec); !s) return s.error();
    return spec;
  } catch (const std::exception& e) {
    return Error{std::string("spec: the JSON could not be read (") + e.what() + ")"};
  } catch (...) {
    return Error{"spec: the JSON could not be read"};
  }
}

// ---------------------------------------------------------------------------------------------
// MessagePack

namespace internal {

void Nanos::pack(Packer& p, Duration value) {
  p.pack_uint64(static_cast<std::uint64_t>(std::max<Duration::rep>(value.count(), 0)));
}

void Nanos::read(MapReader& r, std::string_view key, Need need, Duration* out) {
  std::uint64_t ns = 0;
  if (r.find(key, need) == nullptr) return;
  r.uint(key, &ns, need);
  if (!r.ok()) return;
  if (ns > static_cast<std::uint64_t>(std::numeric_limits<Duration::rep>::max())) {
    r.fail("has key '" + std::string(key) + "' out of range");
    return;
  }
  *out = Duration(static_cast<Duration::rep>(ns));
}

void EpochMillis::pack(Packer& p, WallTime value) {
  p.pack_uint64(
      static_cast<std::uint64_t>(std::max<std::int64_t>(value.time_since_epoch().count(), 0)));
}

void EpochMillis::read(MapReader& r, std::string_view key, Need need, WallTime* out) {
  std::uint64_t ms = 0;
  if (r.find(key, need) == nullptr) return;
  r.uint(key, &ms, need);
  if (!r.ok()) return;
  if (ms > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    r.fail("has key '" + std::string(key) + "' out of range");
    return;
  }
  *out = WallTime(std::chrono::milliseconds(static_cast<std::int64_t>(ms)));
}

void Signed32::pack(Packer& p, std::int32_t value) { p.pack_int64(value); }

void Signed32::read(MapReader& r, std::string_view key, Need need, std::int32_t* out) {
  const msgpack::object* v = r.find(key, need);
  if (v == nullptr) return;
  if (v->type == msgpack::type::NEGATIVE_INTEGER &&
      v->via.i64 >= std::numeric_limits<std::int32_t>::min()) {
    *out = static_cast<std::int32_t>(v->via.i64);
  } else if (v->type == msgpack::type::POSITIVE_INTEGER &&
             v->via.u64 <= static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
    *out = static_cast<std::int32_t>(v->via.u64);
  } else {
    r.fail("has key '" + std::string(key) + "' that is not a 32-bit integer");
  }
}

void Signed64::pack(Packer& p, std::int64_t value) { p.pack_int64(value); }

void Signed64::read(MapReader& r, std::string_view key, Need need, std::int64_t* out) {
  const msgpack::object* v = r.find(key, need);
  if (v == nullptr) return;
  if (v->type == msgpack::type::NEGATIVE_INTEGER) {
    *out = v->via.i64;
  } else if (v->type == msgpack::type::POSITIVE_INTEGER &&
             v->via.u64 <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    *out = static_cast<std::int64_t>(v->via.u64);
  } else {
    r.fail("has key '" + std::string(key) + "' that is not a 64-bit integer");
  }
}

void Float::pack(Packer& p, double value) { p.pack_double(value); }

std::optional<double> number_of(const msgpack::object& v) {
  if (v.type == msgpack::type::FLOAT64 || v.type == msgpack::type::FLOAT32) return v.via.f64;
  if (v.type == msgpack::type::POSITIVE_INTEGER) return static_cast<double>(v.via.u64);
  if (v.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<double>(v.via.i64);
  return std::nullopt;
}

void Float::read(MapReader& r, std::string_view key, Need need, double* out) {
  const msgpack::object* v = r.find(key, need);
  if (v == nullptr) return;
  if (const std::optional<double> number = number_of(*v)) {
    *out = *number;
  } else {
    r.fail("has key '" + std::string(key) + "' that is not a number");
  }
}

void FiniteFloat::read(MapReader& r, std::string_view key, Need need, double* out) {
  double value = 0;
  const bool present = r.find(key, Need::kOptional) != nullptr;
  Float::read(r, key, need, &value);
  if (!present || !r.ok()) return;
  if (!std::isfinite(value)) {
    r.fail("has key '" + std::string(key) + "' that is not finite");
    return;
  }
  *out = value;
}

void CommandArgs::pack(Packer& p, const std::vector<std::string>& args) {
  p.pack_array(static_cast<std::uint32_t>(args.size()));
  for (const std::string& arg : args) p.pack(arg);
}

void CommandArgs::read(MapReader& r, std::string_view key, Need need,
                       std::vector<std::string>* out) {
  const msgpack::object_array* args = r.array(key, kMaxCommandArgs, need);
  if (args == nullptr) return;
  for (std::uint32_t i = 0; i < args->size; ++i) {
    const msgpack::object& a = args->ptr[i];
    if (a.type != msgpack::type::STR || a.via.str.size > kMaxArgBytes) {
      r.fail("has command argument " + std::to_string(i) + " that is not a string of at most " +
             std::to_string(kMaxArgBytes) + " bytes");
      return;
    }
    out->emplace_back(a.via.str.ptr, a.via.str.size);
  }
}

void EnvVars::pack(Packer& p, const std::map<std::string, std::string>& env) {
  p.pack_map(static_cast<std::uint32_t>(env.size()));
  for (const auto& [name, value] : env) {
    p.pack(name);
    p.pack(value);
  }
}

void EnvVars::read(MapReader& r, std::string_view key, Need need,
                   std::map<std::string, std::string>* out) {
  const msgpack::object* env = r.find(key, need);
  if (env == nullptr) return;
  if (env->type != msgpack::type::MAP || env->via.map.size > kMaxEnvVars) {
    r.fail("has key '" + std::string(key) + "' that is not a map of at most " +
           std::to_string(kMaxEnvVars) + " entries");
    return;
  }
  for (std::uint32_t i = 0; i < env->via.map.size && r.ok(); ++i) {
    const msgpack::object& k = env->via.map.ptr[i].key;
    const msgpack::object& v = env->via.map.ptr[i].val;
    if (k.type != msgpack::type::STR || k.via.str.size > kMaxEnvNameBytes ||
        v.type != msgpack::type::STR || v.via.str.size > kMaxEnvValueBytes) {
      r.fail("has environment entry " + std::to_string(i) + " that is not a bounded string");
      break;
    }
    const bool inserted = out->emplace(std::string(k.via.str.ptr, k.via.str.size),
                                       std::string(v.via.str.ptr, v.via.str.size))
                              .second;
    if (!inserted) r.fail("has environment variable " + std::to_string(i) + " twice");
  }
}

}  // namespace internal

std::string encode_job_spec(const JobSpec& spec) { return wire::internal::encode_fields(spec); }

Result<JobSpec> decode_job_spec(std::string_view bytes) {
  const std::string what = "The job spec";
  internal::Failure failure;
  JobSpec spec;
  if (wire::internal::decode_fields(bytes, {kMaxJobSpecValues, 0}, what, &failure, spec)) {
    return spec;
  }
  return Error{std::move(failure.message)};
}

}  // namespace elastic::rendezvous
