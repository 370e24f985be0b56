// UniqueFd: sole ownership of one file descriptor, closed when the owner goes away, so a
// descriptor handed from one part of the daemon to another (the Spawner's end of a worker
// channel, given to whoever talks to the worker) can neither leak nor be closed twice.
// Thread safety: a plain value; one owner at a time.
#pragma once

#include <unistd.h>

#include <utility>

namespace elastic {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace elastic
