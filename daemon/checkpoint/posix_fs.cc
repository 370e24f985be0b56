// The real filesystem behind the Fs seam: plain POSIX calls, EINTR retried, every error a
// sentence naming the path and strerror.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/checkpoint/fs.h"

namespace elastic::checkpoint {
namespace {

Error os_error(std::string_view action, const std::string& path, int err) {
  return Error{"Cannot " + std::string(action) + " " + path + ": " + std::strerror(err) + "."};
}

// Retries a system call interrupted by a signal; returns its result with errno intact.
template <typename Call>
auto retry_eintr(Call call) {
  for (;;) {
    auto result = call();
    if (result != -1 || errno != EINTR) return result;
  }
}

// Closes `fd`, reporting the error: on NFS, close() is where a failed write-back surfaces.
Status close_fd(int fd, const std::string& path) {
  // close() must not be retried on EINTR (Linux has released the descriptor already).
  if (::close(fd) != 0 && errno != EINTR) return os_error("close", path, errno);
  return ok_status();
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status fsync_path(const std::string& path, int flags, std::string_view what) {
  const int fd = retry_eintr([&] { return ::open(path.c_str(), flags | O_RDONLY | O_CLOEXEC); });
  if (fd < 0) return os_error("open " + std::string(what), path, errno);
  if (retry_eintr([&] { return ::fsync(fd); }) != 0) {
    const int err = errno;
    ::close(fd);
    return os_error("fsync " + std::string(what), path, err);
  }
  return close_fd(fd, path);
}

class PosixFs final : public Fs {
 public:
  Status make_dir(const std::string& path) override {
    if (retry_eintr([&] { return ::mkdir(path.c_str(), 0777); }) == 0) return ok_status();
    const int err = errno;
    if (err == EEXIST) {
      if (is_directory(path)) return ok_status();
      return Error{"Cannot create directory " + path + ": it exists and is not a directory."};
    }
    return os_error("create directory", path, err);
  }

  Status make_dirs(const std::string& path) override {
    if (path.empty()) return Error{"Cannot create a directory with an empty path."};
    // Create every prefix that ends before a '/', then the path itself.
    for (std::size_t slash = path.find('/', 1); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      if (path[slash - 1] == '/') continue;  // "a//b"
      if (Status made = make_dir(path.substr(0, slash)); !made) return made;
    }
    if (path.size() > 1 && path.back() == '/') return ok_status();  // made in the loop
    return make_dir(path);
  }

  Status write_file(const std::string& path, std::string_view bytes) override {
    const int fd = retry_eintr(
        [&] { return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666); });
    if (fd < 0) return os_error("open for writing", path, errno);
    while (!bytes.empty()) {
      const ssize_t written = retry_eintr([&] { return ::write(fd, bytes.data(), bytes.size()); });
      if (written < 0) {
        const int err = errno;
        ::close(fd);
        return os_error("write", path, err);
      }
      bytes.remove_prefix(static_cast<std::size_t>(written));
    }
    return close_fd(fd, path);
  }

  Status sync_file(const std::string& path) override { return fsync_path(path, 0, "file"); }

  Status sync_dir(const std::string& path) override {
    return fsync_path(path, O_DIRECTORY, "directory");
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (retry_eintr([&] { return ::rename(from.c_str(), to.c_str()); }) == 0) return ok_status();
    const int err = errno;
    return Error{"Cannot rename " + from + " to " + to + ": " + std::strerror(err) + "."};
  }

  Result<std::string> read_file(const std::string& path) override {
    const int fd = retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); });
    if (fd < 0) return os_error("open for reading", path, errno);
    std::string content;
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) content.reserve(static_cast<size_t>(st.st_size));
    char buffer[1 << 16];
    for (;;) {
      const ssize_t got = retry_eintr([&] { return ::read(fd, buffer, sizeof buffer); });
      if (got < 0) {
        const int err = errno;
        ::close(fd);
        return os_error("read", path, err);
      }
      if (got == 0) break;
      content.append(buffer, static_cast<std::size_t>(got));
    }
    if (Status closed = close_fd(fd, path); !closed) return closed.error();
    return content;
  }

  Result<std::vector<std::string>> list_dir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return os_error("open directory", path, errno);
    std::vector<std::string> names;
    for (;;) {
      errno = 0;
      const dirent* entry = ::readdir(dir);
      if (entry == nullptr) {
        const int err = errno;
        ::closedir(dir);
        if (err != 0) return os_error("list directory", path, err);
        break;
      }
      const std::string_view name = entry->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  Status remove_all(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return ok_status();
      return os_error("inspect", path, errno);
    }
    // lstat, so a symlink is removed itself and never followed into its target.
    if (S_ISDIR(st.st_mode)) {
      Result<std::vector<std::string>> names = list_dir(path);
      if (!names) return names.error();
      for (const std::string& name : *names) {
        if (Status removed = remove_all(path + "/" + name); !removed) return removed;
      }
      if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
        return os_error("remove directory", path, errno);
      }
      return ok_status();
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return os_error("remove", path, errno);
    return ok_status();
  }

  bool exists(const std::string& path) override {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0;
  }
};

}  // namespace

std::unique_ptr<Fs> make_posix_fs() { return std::make_unique<PosixFs>(); }

}  // namespace elastic::checkpoint
