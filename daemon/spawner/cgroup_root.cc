#include "daemon/spawner/cgroup_root.h"

#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace elastic::spawner {
namespace {

constexpr std::string_view kCgroupFsTop = "/sys/fs/cgroup";

std::string read_text(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string_view digits = field.substr(i + 1, 3);
      if (digits.find_first_not_of("01234567") == std::string_view::npos) {
        out +=
            static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

std::vector<std::string_view> split_spaces(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t at = 0;
  while (at < line.size()) {
    const std::size_t end = std::min(line.find(' ', at), line.size());
    if (end > at) fields.push_back(line.substr(at, end - at));
    at = end + 1;
  }
  return fields;
}

bool under(std::string_view path, std::string_view dir) {
  if (dir == "/") return path.starts_with('/');
  return path == dir ||
         (path.starts_with(dir) && path.size() > dir.size() && path[dir.size()] == '/');
}

// Empty when `dir` is a writable cgroup v2 directory, else why not.
std::string unusable(const std::string& dir) {
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return std::strerror(errno);
  if (fs.f_type != CGROUP2_SUPER_MAGIC) return "it is not on a cgroup2 file system";
  if (::access(dir.c_str(), W_OK) != 0 || ::access((dir + "/cgroup.procs").c_str(), W_OK) != 0) {
    return std::string("it is not writable (") + std::strerror(errno) + ")";
  }
  return "";
}

std::string where(const CgroupLayout& layout) {
  return layout.mount + " (" + layout.name() + " layout)";
}

Result<std::string> auto_without_mount(const CgroupLayout& layout) {
  return Error{"\"auto\" needs cgroup v2, and this host mounts none (" + layout.name() +
               " layout): set \"\" (process groups only)"};
}

}  // namespace

std::string CgroupLayout::name() const {
  if (mount.empty()) return "legacy";
  return hybrid ? "hybrid" : "unified";
}

CgroupLayout parse_cgroup_layout(std::string_view mountinfo, std::string_view proc_self_cgroup) {
  CgroupLayout layout;
  std::string mount_root;
  bool preferred = false;  // the chosen mount is below /sys/fs/cgroup
  std::istringstream lines{std::string(mountinfo)};
  for (std::string line; std::getline(lines, line);) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const std::vector<std::string_view> fields = split_spaces(line);
    std::size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash + 1 >= fields.size()) continue;
    const std::string_view fstype = fields[dash + 1];
    if (fstype == "cgroup") layout.hybrid = true;
    if (fstype != "cgroup2") continue;
    const std::string point = unescape(fields[4]);
    const bool standard = under(point, kCgroupFsTop);
    if (!layout.mount.empty() && (preferred || !standard)) continue;
    layout.mount = point;
    mount_root = unescape(fields[3]);
    preferred = standard;
  }
  if (layout.mount.empty()) layout.hybrid = false;

  std::istringstream cgroups{std::string(proc_self_cgroup)};
  for (std::string line; std::getline(cgroups, line);) {
    if (!line.starts_with("0::") || layout.mount.empty()) continue;
    const std::string path = line.substr(3);
    // "/.." and the like: the cgroup lies outside this process's cgroup namespace.
    const bool outside = path == "/.." || path.starts_with("/../");
    if (outside || !under(path, mount_root)) break;
    std::string relative = mount_root == "/" ? path : path.substr(mount_root.size());
    while (relative.ends_with('/')) relative.pop_back();
    layout.own_is_root = relative.empty();
    layout.own = layout.mount + relative;
  }
  return layout;
}

CgroupLayout this_process_cgroup_layout() {
  return parse_cgroup_layout(read_text("/proc/self/mountinfo"), read_text("/proc/self/cgroup"));
}

Result<std::string> resolve_cgroup_root(const std::string& configured, const CgroupLayout& layout) {
  if (configured.empty()) return std::string();
  if (configured == kCgroupRootAuto) {
    if (layout.mount.empty()) return auto_without_mount(layout);
    if (layout.own.empty()) {
      return Error{
          "\"auto\": this process's cgroup (/proc/self/cgroup) is not visible below the "
          "cgroup v2 mount at " +
          where(layout)};
    }
    if (layout.own_is_root) {
      return Error{"\"auto\": elasticd runs in the root cgroup of " + where(layout) +
                   ", so no service manager delegated a cgroup to it: start it with the unit "
                   "(Delegate=yes) or set a path"};
    }
    if (const std::string why = unusable(layout.own); !why.empty()) {
      return Error{"\"auto\" = '" + layout.own + "' is not a writable cgroup v2 directory: " + why +
                   " (the unit needs Delegate=yes, and ProtectControlGroups= would make it "
                   "read-only)"};
    }
    return layout.own;
  }
  if (const std::string why = unusable(configured); !why.empty()) {
    std::string hint;
    // The usual mistake: a unified-layout path (the unit's old example) on a hybrid host.
    if (under(configured, kCgroupFsTop) && layout.mount.empty()) {
      hint = "; this host mounts no cgroup v2 (legacy layout): set \"\" (process groups only)";
    } else if (under(configured, kCgroupFsTop) && !under(configured, layout.mount)) {
      hint = "; this host mounts cgroup v2 at " + where(layout) +
             ": use \"auto\" (the daemon's own cgroup) or a path below it";
    }
    return Error{"'" + configured + "' is not a writable cgroup v2 directory: " + why + hint};
  }
  return configured;
}

Result<std::string> check_cgroup_root(const std::string& configured, const CgroupLayout& layout) {
  if (configured != kCgroupRootAuto) return resolve_cgroup_root(configured, layout);
  if (layout.mount.empty()) return auto_without_mount(layout);
  return "\"auto\": the daemon's own cgroup below " + where(layout) + "; under the shipped unit " +
         layout.mount + "/system.slice/elasticd.service";
}

}  // namespace elastic::spawner
