#include "ctl/common.h"

namespace elastic::ctl {

// ---- JSON access that never throws (replies are decoded defensively) ------------------------

std::string str(const json& j, const char* key, std::string fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return fallback;
  return it->get<std::string>();
}

std::int64_t num(const json& j, const char* key, std::int64_t fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_number_float()) return static_cast<std::int64_t>(it->get<double>());
  return fallback;
}

double real(const json& j, const char* key, double fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

bool flag(const json& j, const char* key, bool fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

const json& member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// A value for a table cell: strings as is, numbers as JSON, absent/null as "-".
std::string cell(const json& j, const char* key) {
  const json& v = member(j, key);
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>().empty() ? "-" : v.get<std::string>();
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::uint64_t world_of(const json& job) {
  if (member(job, "world_size").is_number_integer()) {
    return static_cast<std::uint64_t>(std::max<std::int64_t>(num(job, "world_size"), 0));
  }
  std::uint64_t world = 0;
  const json& ranks = member(job, "ranks");
  if (ranks.is_array()) {
    for (const json& r : ranks) world += static_cast<std::uint64_t>(num(r, "slots"));
  }
  return world;
}

std::size_t nodes_of(const json& job) {
  const json& ranks = member(job, "ranks");
  return ranks.is_array() ? ranks.size() : 0;
}

// ---- output helpers ---------------------------------------------------------------------------

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// "1.2s", "250ms", "-" (never heard), for the LAST-HEARD column.
std::string ago(double ms) {
  if (ms < 0) return "-";
  char text[32];
  if (ms < 1000) {
    std::snprintf(text, sizeof(text), "%.0fms", ms);
  } else {
    std::snprintf(text, sizeof(text), "%.1fs", ms / 1000);
  }
  return text;
}

// Local ISO 8601 with milliseconds and the UTC offset: "2026-11-26T08:51:43.120+01:00".
std::string local_time(std::int64_t ms) {
  ms = std::max<std::int64_t>(ms, 0);
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm parts{};
  ::localtime_r(&seconds, &parts);
  char text[64];
  std::size_t n = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &parts);
  char zone[16] = "+0000";
  std::strftime(zone, sizeof(zone), "%z", &parts);
  std::snprintf(text + n, sizeof(text) - n, ".%03d%.3s:%.2s", static_cast<int>(ms % 1000), zone,
                zone + 3);
  return text;
}

std::vector<std::string> format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::vector<std::string> lines;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  for (const std::string& line : format_table(rows)) std::cout << line << "\n";
}

bool is_terminal(const std::string& state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

void add_json_flag(CLI::App* command, bool& as_json) {
  command->add_flag("--json", as_json, "Print JSON (the daemon's reply) instead of a table");
}

// ---- talking to the daemon ----------------------------------------------------------------

// Why nobody answered: connects once more to learn errno (the client's sentence does not carry
// it) and tells the user what to do.
Answer unreachable(const std::string& socket_path, const std::string& detail) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(address.sun_path)) {
    return {cfg::kExitUnavailable, {}, detail};
  }
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {cfg::kExitUnavailable, {}, detail};
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  ::close(fd);
  if (rc != 0 && (error == EACCES || error == EPERM)) {
    return {kExitNoPermission,
            {},
            "permission denied on the control socket " + socket_path +
                " (connect: " + std::strerror(error) +
                "); ask an administrator to add you to the socket's group, or run elasticctl "
                "as root"};
  }
  if (rc != 0) {
    return {cfg::kExitUnavailable,
            {},
            "no daemon answers at " + socket_path + " (connect: " + std::strerror(error) +
                "); is elasticd running? (systemctl status elasticd)"};
  }
  return {
      cfg::kExitUnavailable, {}, detail + " (the daemon accepts connections but did not answer)"};
}

// Remote control (--connect): when set, every verb goes to that daemon over CURVE instead of
// the local socket, acting as the user its client key names (transport/control_client.h).
std::optional<elastic::transport::RemoteControlClient> remote_daemon;

// The daemon's refusals for lack of rights (not the owner, not an admin) carry
// "code":"permission" and exit 77 like a refused socket; a configuration file the daemon
// refused to load (reload) carries "code":"config" and exits 78; every other refusal exits 1.
int refusal_exit_code(const json& reply) {
  const std::string code = str(reply, "code");
  if (code == "permission") return kExitNoPermission;
  return code == "config" ? cfg::kExitConfig : kExitRefused;
}

Answer ask(const std::string& socket, const json& request, milliseconds timeout) {
  const std::string verb = str(request, "verb");
  const elastic::control::Request call{.verb = verb, .text = request.dump()};
  if (remote_daemon) {
    elastic::transport::RemoteFailure failure = elastic::transport::RemoteFailure::kNone;
    auto answer = elastic::transport::call_remote(*remote_daemon, call, timeout, &failure);
    if (!answer.ok()) {
      const int code = failure == elastic::transport::RemoteFailure::kRefused ? kExitNoPermission
                       : failure == elastic::transport::RemoteFailure::kBadSetup
                           ? cfg::kExitUsage
                           : cfg::kExitUnavailable;
      return {code, {}, answer.error().message};
    }
    json reply = json::parse(*answer, nullptr, /*allow_exceptions=*/false);
    if (!reply.is_object()) {
      return {cfg::kExitUnavailable, {}, "the daemon's reply to " + verb + " is not a JSON object"};
    }
    if (!flag(reply, "ok")) {
      std::string error = str(reply, "error", "the daemon refused the request");
      const int code = refusal_exit_code(reply);
      return {code, std::move(reply), std::move(error)};
    }
    return {0, std::move(reply), ""};
  }
  auto answer = elastic::control::call(socket, call, timeout);
  if (!answer.ok()) return unreachable(socket, answer.error().message);
  json reply = json::parse(*answer, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object()) {
    return {cfg::kExitUnavailable, {}, "the daemon's reply to " + verb + " is not a JSON object"};
  }
  if (!flag(reply, "ok")) {
    std::string error = str(reply, "error", "the daemon refused the request");
    if (error.find("nknown verb") != std::string::npos ||
        error.find("nknown request") != std::string::npos) {
      error += " (is the daemon older than this elasticctl? elasticctl --version)";
    }
    const int code = refusal_exit_code(reply);
    return {code, std::move(reply), std::move(error)};
  }
  return {0, std::move(reply), ""};
}

// Asks once; prints the error and returns the exit code, or 0 with `reply` filled.
int ask_or_report(const std::string& socket, const json& request, milliseconds timeout,
                  json& reply) {
  Answer answer = ask(socket, request, timeout);
  if (answer.code != 0) {
    std::cerr << "elasticctl: " << answer.error << "\n";
    return answer.code;
  }
  reply = std::move(answer.reply);
  return 0;
}

}  // namespace elastic::ctl
