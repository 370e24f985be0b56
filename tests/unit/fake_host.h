// FakeHost: node::Host (daemon/node/host.h) in memory, for the unit tests of the job supervisor
// and for every daemon of the node-core simulator (one FakeHost per simulated machine).
//
// The machine is plain data a test sets and reads: the daemon's euid/egid (0 by default: a root
// daemon, as in production), its environment, its executable, users' passwd entries, and a file
// tree keyed by absolute path (regular files, directories and symlinks, each with an owner and
// an mtime). The methods keep host.h's contract on that tree: stat with or without following a
// last-component symlink, list_dir of the direct children, mkdir -p (an existing non-directory
// on the way is an error), remove_all of a subtree, replace_file that refuses a symlink at the
// temporary path, read_file that refuses a symlink (Follow::kNo) or a non-regular file.
// read_file_as models the user's rights simply: the file (symlinks followed) must be owned by
// the user, or the user is root; each call's user is recorded.
// Every change to the tree is appended to `changes` ("mkdir P", "remove P", "write P"), so a test
// can state exactly which file decisions were made.
// Thread safety: none (one test or simulator thread).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/node/host.h"

namespace elastic::testing {

class FakeHost final : public node::Host {
 public:
  struct Entry {
    node::FileInfo::Kind kind = node::FileInfo::Kind::kRegular;
    std::string bytes;  // a file's content; a symlink's target
    std::uint32_t uid = 0;
    std::int64_t modified_ms = 0;
  };

  // The machine (set by the test).
  std::uint32_t daemon_uid = 0;
  std::uint32_t daemon_gid = 0;
  std::map<std::string, std::string> environment;
  std::string exe;
  std::map<std::uint32_t, control::Account> accounts;
  std::int64_t now_ms = 0;  // the mtime of what is written
  std::map<std::string, Entry> tree;

  // What happened (read by the test).
  std::vector<std::string> changes;
  mutable std::vector<spawner::RunAs> read_as_users;  // read_file_as is const

  // Test set-up: parents are created as directories owned by `uid` (default: the daemon's).
  void put_file(const std::string& path, std::string bytes, std::optional<std::uint32_t> uid = {});
  void put_dir(const std::string& path, std::optional<std::uint32_t> uid = {});
  void put_symlink(const std::string& path, const std::string& target);
  // The content of a regular file, nullopt when there is none at `path` (no symlink followed).
  std::optional<std::string> content(const std::string& path) const;

  std::uint32_t euid() const override { return daemon_uid; }
  std::uint32_t egid() const override { return daemon_gid; }
  std::optional<std::string> env(const std::string& name) const override;
  std::string executable() const override { return exe; }
  std::optional<control::Account> account(std::uint32_t uid) const override;
  std::optional<node::FileInfo> stat(const std::string& path, node::Follow follow) const override;
  std::vector<std::string> list_dir(const std::string& dir) const override;
  Status make_dirs(const std::string& dir) override;
  void remove_all(const std::string& path) override;
  Status replace_file(const std::string& path, const std::string& tmp,
                      std::string_view bytes) override;
  Result<node::FileRead> read_file(const std::string& path, node::Follow follow,
                                   std::uint64_t offset, std::size_t max_bytes) const override;
  Result<spawner::FileBytes> read_file_as(const spawner::RunAs& user, const std::string& path,
                                          std::size_t max_bytes) const override;

 private:
  // The entry at `path`, a last-component symlink followed (up to 8 deep) with kYes.
  const Entry* find(const std::string& path, node::Follow follow) const;
  void make_parents(const std::string& path, std::uint32_t uid);
};

}  // namespace elastic::testing
