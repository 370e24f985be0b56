// Host: the machine as the node core sees it, the one seam for what the job supervisor, its
// worker logs and the job service would otherwise ask the kernel or libc (leveldb's Env, as
// checkpoint/fs.h is for checkpoints): who the daemon runs as and its environment, users'
// passwd entries (a job's user name, a worker's HOME), and the few file operations behind worker
// logs (worker_logs.h), the `logs` verbs (worker_log_verbs.h) and a job's LATEST checkpoint
// (job_supervisor.h). Worker processes go through spawner::Launcher, Raft's files through
// consensus::RaftStore, time through Clock.
//
// elasticd passes posix_host() (these calls on the real system); the node-core simulator and the
// unit tests pass an in-memory host (tests/unit/fake_host.h), so what the supervisor decides
// about files (which round directories go, what owner file is written and believed) shows in
// memory, without a disk.
//
// Every method states what it does exactly as the POSIX implementation does it; a fake must
// keep the same contract (the security checks above it rely on it). Paths are absolute.
// Errors: a Status or Result whose message is one sentence naming the path and the reason;
// "absent" answers (nullopt, an empty list) where the callers treat a failure as absence.
// Thread safety: posix_host() is safe from any thread; fakes need not be (one loop thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/control/credentials.h"
#include "daemon/core/result.h"
#include "daemon/spawner/read_as_user.h"

namespace elastic::node {

// What stat(2) says about a path, as far as the callers ask.
struct FileInfo {
  enum class Kind { kRegular, kDirectory, kSymlink, kOther };
  Kind kind = Kind::kOther;
  std::uint64_t size = 0;
  std::int64_t modified_ms = 0;  // wall ms of the last write
  std::uint32_t uid = 0;         // the owner
};

// Whether a symlink as the LAST component of a path is followed (earlier ones always are).
enum class Follow { kYes, kNo };

// Bytes read from a file, with what fstat(2) said about the same open file.
struct FileRead {
  std::string bytes;
  FileInfo info;
};

class Host {
 public:
  virtual ~Host() = default;

  // The daemon process: its effective uid and gid, and a variable of its environment
  // (nullopt when unset).
  virtual std::uint32_t euid() const = 0;
  virtual std::uint32_t egid() const = 0;
  virtual std::optional<std::string> env(const std::string& name) const = 0;
  // The daemon's own binary (/proc/self/exe), "" when it cannot be told.
  virtual std::string executable() const = 0;
  // `uid`'s passwd entry (control::account_of), nullopt when the host knows no such user.
  virtual std::optional<control::Account> account(std::uint32_t uid) const = 0;

  // stat(2) (kYes) or lstat(2) (kNo); nullopt when the path cannot be looked at.
  virtual std::optional<FileInfo> stat(const std::string& path, Follow follow) const = 0;
  // Names (not paths) of the entries of a directory, but "." and ".."; empty when it cannot be
  // read. Order unspecified.
  virtual std::vector<std::string> list_dir(const std::string& dir) const = 0;
  // mkdir -p, each directory it creates 0755; one that exists already is fine.
  virtual Status make_dirs(const std::string& dir) = 0;
  // Removes a file or a directory tree; whatever is not there (or cannot go) is skipped.
  virtual void remove_all(const std::string& path) = 0;
  // Writes `bytes` to `tmp` (created 0644 or truncated, never through a symlink at `tmp`), then
  // renames it over `path`; on a failure `tmp` is removed and nothing at `path` changed.
  virtual Status replace_file(const std::string& path, const std::string& tmp,
                              std::string_view bytes) = 0;
  // Opens `path` (with kNo, not through a symlink at the path itself), and when it is a regular
  // file reads up to `max_bytes` from `offset` (nothing past its end). An error when it cannot
  // be opened or is not a regular file ("Cannot read <path>: <reason>.").
  virtual Result<FileRead> read_file(const std::string& path, Follow follow, std::uint64_t offset,
                                     std::size_t max_bytes) const = 0;
  // spawner::read_file_as: up to `max_bytes` of `path` opened with `user`'s rights (a path a
  // user chose; see spawner/read_as_user.h).
  virtual Result<spawner::FileBytes> read_file_as(const spawner::RunAs& user,
                                                  const std::string& path,
                                                  std::size_t max_bytes) const = 0;
};

// The real machine (the calls above on this process and its file system).
Host& posix_host();

}  // namespace elastic::node
