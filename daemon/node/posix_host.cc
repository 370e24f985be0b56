// posix_host(): host.h's calls on the real system.
#include "daemon/node/host.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace elastic::node {
namespace {

FileInfo file_info(const struct stat& st) {
  FileInfo info;
  info.kind = S_ISREG(st.st_mode)   ? FileInfo::Kind::kRegular
              : S_ISDIR(st.st_mode) ? FileInfo::Kind::kDirectory
              : S_ISLNK(st.st_mode) ? FileInfo::Kind::kSymlink
                                    : FileInfo::Kind::kOther;
  info.size = static_cast<std::uint64_t>(st.st_size);
  info.modified_ms =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
  info.uid = st.st_uid;
  return info;
}

std::string cannot_read(const std::string& path, const std::string& why) {
  return "Cannot read " + path + ": " + why + ".";
}

class PosixHost final : public Host {
 public:
  std::uint32_t euid() const override { return ::geteuid(); }
  std::uint32_t egid() const override { return ::getegid(); }

  std::optional<std::string> env(const std::string& name) const override {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  }

  std::string executable() const override {
    std::error_code error;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
    return error ? std::string() : exe.string();
  }

  std::optional<control::Account> account(std::uint32_t uid) const override {
    return control::account_of(uid);
  }

  std::optional<FileInfo> stat(const std::string& path, Follow follow) const override {
    struct stat st {};
    const int rc = follow == Follow::kYes ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
    if (rc != 0) return std::nullopt;
    return file_info(st);
  }

  std::vector<std::string> list_dir(const std::string& dir) const override {
    std::vector<std::string> names;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

  Status make_dirs(const std::string& dir) override {
    for (std::size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
      const std::string partial = dir.substr(0, pos);
      if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return Error{"Cannot create " + partial + ": " + std::strerror(errno) + "."};
      }
      if (pos == std::string::npos) return Ok{};
    }
  }

  void remove_all(const std::string& path) override {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }

  Status replace_file(const std::string& path, const std::string& tmp,
                      std::string_view bytes) override {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return Error{"Cannot write " + tmp + ": " + std::strerror(errno) + "."};
    const bool written =
        ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
    const int saved = errno;
    ::close(fd);
    if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
      const std::string why = std::strerror(written ? errno : saved);
      ::unlink(tmp.c_str());
      return Error{"Cannot write " + path + ": " + why + "."};
    }
    return Ok{};
  }

  Result<FileRead> read_file(const std::string& path, Follow follow, std::uint64_t offset,
                             std::size_t max_bytes) const override {
    const int fd =
        ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (follow == Follow::kNo ? O_NOFOLLOW : 0));
    if (fd < 0) return Error{cannot_read(path, std::strerror(errno))};
    FileRead read;
    struct stat st {};
    const bool stated = ::fstat(fd, &st) == 0;
    if (!stated || !S_ISREG(st.st_mode)) {
      const std::string why = stated ? "not a regular file" : std::strerror(errno);
      ::close(fd);
      return Error{cannot_read(path, why)};
    }
    read.info = file_info(st);
    const std::uint64_t size = read.info.size;
    read.bytes.resize(offset < size ? std::min<std::uint64_t>(max_bytes, size - offset) : 0);
    std::size_t got = 0;
    while (got < read.bytes.size()) {
      const ssize_t n = ::pread(fd, read.bytes.data() + got, read.bytes.size() - got,
                                static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the file shrank, or an error: what was read is the answer
      got += static_cast<std::size_t>(n);
    }
    read.bytes.resize(got);
    ::close(fd);
    return read;
  }

  Result<spawner::FileBytes> read_file_as(const spawner::RunAs& user, const std::string& path,
                                          std::size_t max_bytes) const override {
    return spawner::read_file_as(user, path, max_bytes);
  }
};

}  // namespace

Host& posix_host() {
  static PosixHost host;
  return host;
}

}  // namespace elastic::node
