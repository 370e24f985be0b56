#include "daemon/spawner/posix_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace elastic::spawner {

std::string errno_text(int error) { return std::strerror(error); }

bool make_dirs(const std::string& dir, int* error) {
  if (dir.empty()) return true;
  std::string partial;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = errno;
      return false;
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    *error = errno;
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    *error = ENOTDIR;
    return false;
  }
  return true;
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool write_file(const std::string& path, std::string_view content, int* error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = errno;
    return false;
  }
  const bool ok = write_all(fd, content.data(), content.size());
  if (!ok) *error = errno;
  ::close(fd);
  return ok;
}

void cgroup_kill(const std::string& cgroup) {
  int error = 0;
  // ENOENT: the kernel predates cgroup.kill (< 5.14); the process-group kill still runs.
  (void)write_file(cgroup + "/cgroup.kill", "1", &error);
}

}  // namespace elastic::spawner
