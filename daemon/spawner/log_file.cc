#include "daemon/spawner/log_file.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>

#include "daemon/spawner/posix_files.h"

namespace elastic::spawner {
namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

LogFile::LogFile(std::string path, int fd, std::uint64_t size)
    : path_(std::move(path)), fd_(fd), size_(size) {}

LogFile::~LogFile() {
  if (fd_ >= 0) ::close(fd_);
}

void LogFile::rotate(int keep) {
  if (keep <= 0) {
    if (::ftruncate(fd_, 0) != 0) warn("truncate", errno);
    size_ = 0;
    return;
  }
  for (int i = keep - 1; i >= 1; --i) {
    const std::string from = path_ + "." + std::to_string(i);
    const std::string to = path_ + "." + std::to_string(i + 1);
    if (::rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT) warn("rotate", errno);
  }
  if (::rename(path_.c_str(), (path_ + ".1").c_str()) != 0) warn("rotate", errno);
  const int fresh = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fresh < 0) {
    warn("reopen", errno);  // keep writing into the rotated file rather than losing output
    return;
  }
  ::close(fd_);
  fd_ = fresh;
  size_ = 0;
}

void LogFile::append(const char* data, std::size_t n, std::uint64_t max_bytes, int keep) {
  if (n == 0) return;
  at_line_start_ = data[n - 1] == '\n';
  while (n > 0) {
    if (max_bytes > 0 && size_ > 0 && size_ + n > max_bytes) rotate(keep);
    const std::size_t chunk = max_bytes > 0 ? std::min<std::uint64_t>(n, max_bytes) : n;
    if (!write_all(fd_, data, chunk)) {
      warn("write", errno);
      return;  // output is dropped rather than blocking the loop on a broken disk
    }
    size_ += chunk;
    data += chunk;
    n -= chunk;
  }
}

void LogFile::warn(const char* what, int error) {
  if (warned_) return;  // once per file, so a full disk does not flood the daemon log
  warned_ = true;
  spdlog::warn("spawner: cannot {} worker log {}: {}", what, path_, errno_text(error));
}

std::shared_ptr<LogFile> LogFiles::open(const std::string& path, std::string* error) {
  if (auto it = files_.find(path); it != files_.end()) {
    if (auto shared = it->second.lock()) return shared;
  }
  int err = 0;
  const std::string dir = parent_dir(path);
  if (!make_dirs(dir, &err)) {
    *error = "creating the log directory " + dir + " failed: " + errno_text(err);
    return nullptr;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "opening the log file " + path + " failed: " + errno_text(errno);
    return nullptr;
  }
  std::uint64_t size = 0;
  struct stat st {};
  if (::fstat(fd, &st) == 0) size = static_cast<std::uint64_t>(st.st_size);
  auto log = std::make_shared<LogFile>(path, fd, size);
  // Erase expired entries so the map does not grow with every job ever run.
  std::erase_if(files_, [](const auto& entry) { return entry.second.expired(); });
  files_[path] = log;
  return log;
}

std::string daemon_line(std::string_view line) {
  std::string out = "[elasticd " + utc_now() + "] ";
  out.append(line);
  out.push_back('\n');
  return out;
}

std::string output_stamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) %
                  std::chrono::seconds(1);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[40];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ ", static_cast<int>(ms.count()));
  return buf;
}

}  // namespace elastic::spawner
