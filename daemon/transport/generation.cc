#include "daemon/transport/generation.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace elastic::transport {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

Status write_all_and_sync(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error{"Cannot create " + path + ": " + errno_text(errno) + "."};
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return Error{"Cannot write " + path + ": " + errno_text(error) + "."};
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    return Error{"Cannot fsync " + path + ": " + errno_text(error) + "."};
  }
  if (::close(fd) != 0) return Error{"Cannot close " + path + ": " + errno_text(errno) + "."};
  return ok_status();
}

Status sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error{"Cannot open directory " + dir + ": " + errno_text(errno) + "."};
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) return Error{"Cannot fsync directory " + dir + ": " + errno_text(error) + "."};
  return ok_status();
}

}  // namespace

Result<std::uint64_t> reserve_generation(const std::string& state_dir) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec)
    return Error{"Cannot create the state directory " + state_dir + ": " + ec.message() + "."};
  const std::string path = state_dir + "/generation";

  std::uint64_t previous = 0;
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    std::string content = text.str();
    while (!content.empty() && (content.back() == '\n' || content.back() == ' ')) {
      content.pop_back();
    }
    const char* end = content.data() + content.size();
    const auto [ptr, error] = std::from_chars(content.data(), end, previous);
    if (content.empty() || error != std::errc() || ptr != end) {
      return Error{"The generation file " + path + " does not hold a number (\"" +
                   content.substr(0, 40) + "\"); fix or remove it."};
    }
  } else if (std::filesystem::exists(path, ec)) {
    return Error{"Cannot read the generation file " + path + "."};
  }
  if (previous == UINT64_MAX) {
    return Error{"The generation file " + path + " is at its maximum value."};
  }
  const std::uint64_t next = previous + 1;

  if (Status s = write_all_and_sync(path + ".tmp", std::to_string(next) + "\n"); !s.ok()) {
    return s.error();
  }
  return next;
}

Status commit_generation(const std::string& state_dir) {
  const std::string path = state_dir + "/generation";
  const std::string tmp = path + ".tmp";
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error{"Cannot rename " + tmp + " to " + path + ": " + errno_text(errno) + "."};
  }
  return sync_directory(state_dir);
}

Result<std::uint64_t> next_generation(const std::string& state_dir) {
  auto next = reserve_generation(state_dir);
  if (!next.ok()) return next;
  if (Status s = commit_generation(state_dir); !s.ok()) return s.error();
  return next;
}

}  // namespace elastic::transport
