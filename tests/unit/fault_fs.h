// FaultFs: an in-memory Fs that models what survives a crash, for testing the checkpoint
// protocol (after leveldb's fault_injection_test and the ALICE crash-consistency model).
//
// Every file has durable content (as of its last sync_file) and current content; every
// directory has durable entries (as of its last sync_dir) and current entries. Creating,
// renaming and removing are changes to directory entries, durable only once the parent is
// synced. A directory entry is durable only through its own parent's sync.
//
// Two kinds of crash:
//   crash()               reverts everything to its durable state: unsynced file data is lost
//                         (a file never synced is empty), unsynced entries vanish or reappear.
//   crash_reordered(seed) as crash(), but an arbitrary subset (picked by `seed`) of the
//                         operations not yet made durable survives anyway, in any order, and
//                         unsynced file data may survive whole or torn (a prefix): what a
//                         filesystem that writes back on its own schedule can leave. A rename
//                         stays atomic. A protocol that is only correct because the strict
//                         crash() loses everything (say, one missing fsync between two renames)
//                         fails under this one.
//
// Faults:
//   fail_after(n)    the next n mutating calls succeed; the one after fails with "injected crash"
//                    and so does every later call (the process died there): reads fail too and
//                    exists() answers false. A failed call has no effect.
//   fail_next(...)   the next matching call fails once, without effect (an EIO).
//   set_rename_reports_error(true)
//                    every rename happens but reports an error, as an NFS client retrying a
//                    rename whose first reply was lost does.
//
// Paths are absolute; "/" always exists and is durable. Not thread safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/checkpoint/fs.h"
#include "daemon/core/result.h"

namespace elastic::checkpoint::testing {

class FaultFs final : public Fs {
 public:
  enum class Op {
    kMakeDir,
    kMakeDirs,
    kWriteFile,
    kSyncFile,
    kSyncDir,
    kRename,
    kRemoveAll,
    kReadFile,
    kListDir,
  };

  FaultFs();

  Status make_dir(const std::string& path) override;
  Status make_dirs(const std::string& path) override;
  Status write_file(const std::string& path, std::string_view bytes) override;
  Status sync_file(const std::string& path) override;
  Status sync_dir(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Result<std::string> read_file(const std::string& path) override;
  Result<std::vector<std::string>> list_dir(const std::string& path) override;
  Status remove_all(const std::string& path) override;
  bool exists(const std::string& path) override;

  // See the file comment. fail_after(n) replaces an earlier arming.
  void fail_after(std::int64_t n);
  // The next call of `op` whose path (for rename: either path) contains `path_contains` fails
  // once with `reason`.
  void fail_next(Op op, std::string path_contains = "", std::string reason = "Input/output error");
  void set_rename_reports_error(bool on) { rename_reports_error_ = on; }

  // Both revert to a durable state (see the file comment) and disarm fail_after() and
  // fail_next() (the process restarts). The rename mode is a property of the filesystem and
  // stays.
  void crash();
  void crash_reordered(std::uint64_t seed);

  // True once a fail_after() crash has fired (until crash()).
  bool dead() const { return dead_; }
  // Mutating calls made so far (including failed ones).
  std::int64_t mutating_calls() const { return mutating_calls_; }
  // Every current path under `root` (excluded), sorted; directories end with '/'.
  std::vector<std::string> tree(const std::string& root = "/") const;
  // The current tree with file sizes and what is not durable yet, for failure messages.
  std::string describe() const;

 private:
  using NodeId = std::size_t;
  struct Node {
    explicit Node(bool dir) : is_dir(dir) {}
    bool is_dir;
    std::string data;
    std::string durable_data;
    std::map<std::string, NodeId> entries;
    std::map<std::string, NodeId> durable_entries;
  };
  struct ParentAndLeaf {
    NodeId parent;
    std::string leaf;
  };
  // One operation not yet fully durable: its entry changes (a rename has two, applied together)
  // and the data it wrote. sync_dir() and sync_file() strip the parts they make durable.
  struct EntryChange {
    NodeId dir;
    std::string name;
    std::optional<NodeId> node;  // nullopt: the entry was removed
  };
  struct PendingOp {
    std::vector<EntryChange> entries;
    std::optional<NodeId> data_of;  // the file whose content this op set
    std::string data;
  };
  struct PendingFailure {
    Op op;
    std::string path_contains;
    std::string reason;
  };

  // Counts a mutating call and decides whether it fails; the Error names `action` and `path`.
  std::optional<Error> check_mutation(Op op, std::string_view action, const std::string& path,
                                      const std::string& other_path = "");
  std::optional<Error> check_read(Op op, std::string_view action, const std::string& path);
  std::optional<Error> pending_failure(Op op, std::string_view action, const std::string& path,
                                       const std::string& other_path);
  Result<std::vector<std::string>> components(const std::string& path) const;
  std::optional<NodeId> resolve(const std::string& path) const;
  // The dir that holds `path` and the last component; errors name `shown` (default: `path`).
  Result<ParentAndLeaf> resolve_parent(std::string_view action, const std::string& path,
                                       const std::string& shown = "") const;
  NodeId new_node(bool is_dir);
  bool reaches(NodeId from, NodeId target) const;
  void record(PendingOp op) { pending_ops_.push_back(std::move(op)); }
  void set_entry(NodeId dir, const std::string& name, std::optional<NodeId> node);
  void revert_to_durable();
  void collect(NodeId dir, const std::string& prefix, std::vector<std::string>& out) const;

  std::vector<Node> nodes_;
  std::vector<PendingOp> pending_ops_;  // oldest first
  std::optional<std::int64_t> crash_countdown_;
  std::optional<PendingFailure> pending_;
  bool dead_ = false;
  bool rename_reports_error_ = false;
  std::int64_t mutating_calls_ = 0;
};

}  // namespace elastic::checkpoint::testing
