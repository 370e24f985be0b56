// Fs: the one seam for every filesystem side effect of the checkpoint protocol (leveldb's Env).
//
// Production uses make_posix_fs(); tests use a fault-injecting in-memory model
// (tests/unit/fault_fs.h) that can "crash" between any two calls and lose what was not synced.
// Every method returns a Status whose message names the path and the OS reason.
// Thread safety: implementations are not required to be thread safe; one writer at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"

namespace elastic::checkpoint {

class Fs {
 public:
  virtual ~Fs() = default;

  // Creates one directory (its parent must exist). Succeeds if it already exists as a directory.
  virtual Status make_dir(const std::string& path) = 0;
  // Creates directories along the path, like `mkdir -p`.
  virtual Status make_dirs(const std::string& path) = 0;
  // Creates or truncates `path` and writes `bytes`. Not durable until sync_file().
  virtual Status write_file(const std::string& path, std::string_view bytes) = 0;
  // fsync of the file's data.
  virtual Status sync_file(const std::string& path) = 0;
  // fsync of a directory, making the creations, renames and removals in it durable.
  virtual Status sync_dir(const std::string& path) = 0;
  // rename(2): atomic replacement of `to` (a file, or an empty/absent directory).
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  virtual Result<std::string> read_file(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, sorted; an error if it does not exist.
  virtual Result<std::vector<std::string>> list_dir(const std::string& path) = 0;
  // Removes a file or a directory tree. Succeeds if nothing is there.
  virtual Status remove_all(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
};

// The real filesystem (POSIX calls; EINTR retried).
std::unique_ptr<Fs> make_posix_fs();

}  // namespace elastic::checkpoint
