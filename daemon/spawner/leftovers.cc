#include "daemon/spawner/leftovers.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <optional>
#include <sstream>

#include "daemon/spawner/posix_files.h"

namespace elastic::spawner {
namespace {

std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  while (out.size() < (1 << 16)) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

template <typename T>
std::optional<T> parse_number(std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

struct ProcStat {
  pid_t pgid = 0;
  std::uint64_t start_time = 0;
};

// Fields 5 (pgrp) and 22 (starttime) of /proc/<pid>/stat; the command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
std::optional<ProcStat> read_proc_stat(pid_t pid) {
  const auto text = read_small_file("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  const auto close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text->substr(close + 1));
  std::vector<std::string> fields;  // fields[0] is field 3
  std::string field;
  while (rest >> field && fields.size() < 20) fields.push_back(field);
  if (fields.size() < 20) return std::nullopt;
  const auto pgid = parse_number<pid_t>(fields[2]);
  const auto start = parse_number<std::uint64_t>(fields[19]);
  if (!pgid || !start) return std::nullopt;
  return ProcStat{*pgid, *start};
}

}  // namespace

std::string worker_cgroup_path(const std::string& cgroup_root, pid_t daemon_pid, std::uint64_t id) {
  return cgroup_root + "/w-" + std::to_string(daemon_pid) + "-" + std::to_string(id);
}

Result<std::string> record_worker(const std::string& state_dir, pid_t pid) {
  const auto stat = read_proc_stat(pid);
  const std::string record = state_dir + "/workers/" + std::to_string(pid);
  int error = ESRCH;
  if (!stat ||
      !write_file(record, std::to_string(pid) + " " + std::to_string(stat->start_time) + "\n",
                  &error)) {
    ::unlink(record.c_str());
    return Error{"recording the worker in " + record + " failed: " + errno_text(error) + "."};
  }
  return record;
}

Result<std::size_t> end_leftover_workers(const std::string& state_dir) {
  const std::string dir = state_dir + "/workers";
  int error = 0;
  if (!make_dirs(dir, &error)) {
    return Error{"cannot create the worker record directory " + dir + ": " + errno_text(error) +
                 "."};
  }
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    return Error{"cannot read the worker record directory " + dir + ": " + errno_text(errno) + "."};
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(handle)) {
    if (entry->d_name[0] != '.') names.push_back(entry->d_name);
  }
  ::closedir(handle);
  std::size_t ended = 0;
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    const auto pid = parse_number<pid_t>(name);
    const auto content = read_small_file(path);
    if (pid && *pid > 0 && content) {
      std::istringstream in(*content);
      long long pgid = 0;
      unsigned long long start = 0;
      if (in >> pgid >> start && pgid > 0) {
        const auto now = read_proc_stat(*pid);
        // Same pid and same start time: the very process the record was written for.
        if (now && now->start_time == start) {
          ::kill(-static_cast<pid_t>(pgid), SIGKILL);
          ::kill(*pid, SIGKILL);
          ++ended;
        }
      }
    }
    ::unlink(path.c_str());
  }
  return ended;
}

std::vector<std::string> end_leftover_cgroups(const std::string& cgroup_root, pid_t self_pid) {
  std::vector<std::string> not_removed;
  DIR* dir = ::opendir(cgroup_root.c_str());
  if (dir == nullptr) return not_removed;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("w-", 0) != 0) continue;
    const auto dash = name.find('-', 2);
    const auto owner = parse_number<pid_t>(name.substr(2, dash - 2));
    if (!owner || (*owner != self_pid && ::kill(*owner, 0) == 0)) continue;
    const std::string path = cgroup_root + "/" + name;
    cgroup_kill(path);
    if (::rmdir(path.c_str()) != 0) not_removed.push_back(path);
  }
  ::closedir(dir);
  return not_removed;
}

}  // namespace elastic::spawner
