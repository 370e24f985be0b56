#include "daemon/spawner/read_as_user.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/securebits.h>
#include <spdlog/spdlog.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace elastic::spawner {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

// The calling thread's current fsuid/fsgid: an invalid id (-1) changes nothing and returns it.
uid_t current_fsuid() { return static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))); }
gid_t current_fsgid() { return static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))); }

// setgroups(2) for the calling thread only (glibc's wrapper changes every thread).
bool set_thread_groups(const std::vector<gid_t>& groups) {
  return ::syscall(SYS_setgroups, groups.size(), groups.data()) == 0;
}

// open(2) of `path` as `user` on this thread; the daemon's identity is back before it returns.
// -1 with *error set when the open (or the switch) failed.
int open_as(const RunAs& user, const std::string& path, int flags, std::string* error) {
  const int securebits = ::prctl(PR_GET_SECUREBITS);
  if (securebits < 0 || (securebits & (1 << SECURE_NO_SETUID_FIXUP)) != 0) {
    *error =
        "the daemon runs with the no-setuid-fixup securebit, which would keep root's "
        "capabilities to override file permissions while it reads as the user";
    return -1;
  }
  const std::vector<gid_t> groups = supplementary_groups(user);
  std::vector<gid_t> saved_groups(static_cast<std::size_t>(std::max(0, ::getgroups(0, nullptr))));
  if (::getgroups(static_cast<int>(saved_groups.size()), saved_groups.data()) < 0) {
    *error = "reading the daemon's groups failed: " + errno_text(errno);
    return -1;
  }
  const uid_t saved_fsuid = current_fsuid();
  const gid_t saved_fsgid = current_fsgid();
  const int saved_dumpable = ::prctl(PR_GET_DUMPABLE);

  int fd = -1;
  if (!set_thread_groups(groups)) {
    *error = "setting the user's groups failed: " + errno_text(errno);
    return -1;
  }
  ::setfsgid(user.gid);
  ::setfsuid(user.uid);
  if (current_fsgid() != user.gid || current_fsuid() != user.uid) {
    *error = "switching the file-system identity failed";
  } else {
    fd = ::open(path.c_str(), flags);
    const int open_error = errno;
    if (fd < 0) *error = errno_text(open_error) + (open_error == ELOOP ? " (it is a symlink)" : "");
  }
  ::setfsuid(saved_fsuid);
  ::setfsgid(saved_fsgid);
  if (!set_thread_groups(saved_groups) || current_fsuid() != saved_fsuid ||
      current_fsgid() != saved_fsgid) {
    // The loop would go on with a user's rights (or root's groups with a user's fsuid).
    spdlog::critical("reading {} as uid {}: the daemon's identity could not be restored; aborting",
                     path, user.uid);
    std::abort();
  }
  if (saved_dumpable >= 0 && ::prctl(PR_GET_DUMPABLE) != saved_dumpable) {
    ::prctl(PR_SET_DUMPABLE, saved_dumpable);
  }
  return fd;
}

}  // namespace

std::vector<gid_t> supplementary_groups(const RunAs& user) {
  std::vector<gid_t> groups;
  if (user.user.empty()) {
    groups.push_back(user.gid);
    return groups;
  }
  int count = 32;
  groups.resize(static_cast<std::size_t>(count));
  while (::getgrouplist(user.user.c_str(), user.gid, groups.data(), &count) < 0) {
    groups.resize(static_cast<std::size_t>(count) + 32);
    count = static_cast<int>(groups.size());
  }
  groups.resize(static_cast<std::size_t>(count));
  return groups;
}

Result<FileBytes> read_file_as(const RunAs& user, const std::string& path, std::size_t max_bytes) {
  const std::string prefix = "cannot read " + path + " as uid " + std::to_string(user.uid) + ": ";
  constexpr int kFlags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  const uid_t euid = ::geteuid();
  std::string error;
  int fd = -1;
  if (user.uid == euid && user.gid == ::getegid()) {
    fd = ::open(path.c_str(), kFlags);
    const int open_error = errno;
    if (fd < 0) error = errno_text(open_error) + (open_error == ELOOP ? " (it is a symlink)" : "");
  } else if (euid != 0) {
    return Error{prefix + "the daemon runs as uid " + std::to_string(euid) +
                 " and reads files only as itself."};
  } else {
    fd = open_as(user, path, kFlags, &error);
  }
  if (fd < 0) return Error{prefix + error + "."};

  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{prefix + "it is not a regular file."};
  }
  FileBytes file;
  file.mtime_ms =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
  file.bytes.resize(max_bytes);
  std::size_t got = 0;
  while (got < max_bytes) {
    const ssize_t n = ::read(fd, file.bytes.data() + got, max_bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int read_error = errno;
      ::close(fd);
      return Error{prefix + errno_text(read_error) + "."};
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  file.bytes.resize(got);
  return file;
}

}  // namespace elastic::spawner
