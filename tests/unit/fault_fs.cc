#include "tests/unit/fault_fs.h"

#include <utility>
#include <vector>

namespace elastic::checkpoint::testing {
namespace {

constexpr std::size_t kRoot = 0;

Error fs_error(std::string_view action, const std::string& path, std::string_view reason) {
  return Error{"Cannot " + std::string(action) + " " + path + ": " + std::string(reason) + "."};
}

}  // namespace

FaultFs::FaultFs() { nodes_.emplace_back(true); }

void FaultFs::fail_after(std::int64_t n) { crash_countdown_ = n; }

void FaultFs::fail_next(Op op, std::string path_contains, std::string reason) {
  pending_ = PendingFailure{op, std::move(path_contains), std::move(reason)};
}

void FaultFs::revert_to_durable() {
  for (Node& node : nodes_) {
    node.data = node.durable_data;
    node.entries = node.durable_entries;
  }
  dead_ = false;
  crash_countdown_.reset();
  pending_.reset();
}

void FaultFs::crash() {
  revert_to_durable();
  pending_ops_.clear();
}

void FaultFs::crash_reordered(std::uint64_t seed) {
  revert_to_durable();
  // splitmix64: a test's seed must give the same crash state everywhere.
  auto next = [&seed] {
    std::uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  for (const PendingOp& op : pending_ops_) {
    if (next() % 2 == 0) continue;  // this one was lost
    for (const EntryChange& change : op.entries) {
      auto& entries = nodes_[change.dir].entries;
      if (change.node) {
        entries[change.name] = *change.node;
      } else {
        entries.erase(change.name);
      }
    }
    if (op.data_of) {
      const bool torn = next() % 2 == 0;
      nodes_[*op.data_of].data = torn ? op.data.substr(0, next() % (op.data.size() + 1)) : op.data;
    }
  }
  for (Node& node : nodes_) {
    node.durable_data = node.data;
    node.durable_entries = node.entries;
  }
  pending_ops_.clear();
}

void FaultFs::set_entry(NodeId dir, const std::string& name, std::optional<NodeId> node) {
  if (node) {
    nodes_[dir].entries[name] = *node;
  } else {
    nodes_[dir].entries.erase(name);
  }
  record(PendingOp{.entries = {EntryChange{dir, name, node}}, .data_of = std::nullopt, .data = {}});
}

std::optional<Error> FaultFs::pending_failure(Op op, std::string_view action,
                                              const std::string& path,
                                              const std::string& other_path) {
  if (!pending_ || pending_->op != op) return std::nullopt;
  const std::string& needle = pending_->path_contains;
  if (path.find(needle) == std::string::npos && other_path.find(needle) == std::string::npos) {
    return std::nullopt;
  }
  Error error = fs_error(action, path, pending_->reason);
  pending_.reset();
  return error;
}

std::optional<Error> FaultFs::check_mutation(Op op, std::string_view action,
                                             const std::string& path,
                                             const std::string& other_path) {
  ++mutating_calls_;
  if (!dead_ && crash_countdown_) {
    if (*crash_countdown_ == 0) {
      dead_ = true;
    } else {
      --*crash_countdown_;
    }
  }
  if (dead_) return fs_error(action, path, "injected crash");
  return pending_failure(op, action, path, other_path);
}

std::optional<Error> FaultFs::check_read(Op op, std::string_view action, const std::string& path) {
  if (dead_) return fs_error(action, path, "injected crash");
  return pending_failure(op, action, path, "");
}

Result<std::vector<std::string>> FaultFs::components(const std::string& path) const {
  if (path.empty() || path.front() != '/') {
    return Error{"FaultFs needs absolute paths, got \"" + path + "\"."};
  }
  std::vector<std::string> parts;
  std::size_t begin = 1;
  while (begin <= path.size()) {
    std::size_t end = path.find('/', begin);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(begin, end - begin);
    if (part == "." || part == "..") {
      return Error{"FaultFs does not resolve \".\" or \"..\", got \"" + path + "\"."};
    }
    if (!part.empty()) parts.push_back(std::move(part));
    begin = end + 1;
  }
  return parts;
}

std::optional<FaultFs::NodeId> FaultFs::resolve(const std::string& path) const {
  Result<std::vector<std::string>> parts = components(path);
  if (!parts) return std::nullopt;
  NodeId node = kRoot;
  for (const std::string& part : *parts) {
    if (!nodes_[node].is_dir) return std::nullopt;
    auto it = nodes_[node].entries.find(part);
    if (it == nodes_[node].entries.end()) return std::nullopt;
    node = it->second;
  }
  return node;
}

Result<FaultFs::ParentAndLeaf> FaultFs::resolve_parent(std::string_view action,
                                                       const std::string& path,
                                                       const std::string& shown) const {
  const std::string& named = shown.empty() ? path : shown;
  Result<std::vector<std::string>> parts = components(path);
  if (!parts) return parts.error();
  if (parts->empty()) return fs_error(action, named, "Device or resource busy");
  NodeId node = kRoot;
  for (std::size_t i = 0; i + 1 < parts->size(); ++i) {
    auto it = nodes_[node].entries.find((*parts)[i]);
    if (it == nodes_[node].entries.end()) {
      return fs_error(action, named, "No such file or directory");
    }
    node = it->second;
    if (!nodes_[node].is_dir) return fs_error(action, named, "Not a directory");
  }
  return ParentAndLeaf{node, parts->back()};
}

FaultFs::NodeId FaultFs::new_node(bool is_dir) {
  nodes_.emplace_back(is_dir);
  return nodes_.size() - 1;
}

bool FaultFs::reaches(NodeId from, NodeId target) const {
  if (from == target) return true;
  if (!nodes_[from].is_dir) return false;
  for (const auto& [name, child] : nodes_[from].entries) {
    if (reaches(child, target)) return true;
  }
  return false;
}

Status FaultFs::make_dir(const std::string& path) {
  if (auto error = check_mutation(Op::kMakeDir, "create directory", path)) return *error;
  Result<ParentAndLeaf> where = resolve_parent("create directory", path);
  if (!where) return where.error();
  Node& parent = nodes_[where->parent];
  if (auto it = parent.entries.find(where->leaf); it != parent.entries.end()) {
    if (nodes_[it->second].is_dir) return ok_status();
    return fs_error("create directory", path, "File exists");
  }
  set_entry(where->parent, where->leaf, new_node(true));
  return ok_status();
}

Status FaultFs::make_dirs(const std::string& path) {
  if (auto error = check_mutation(Op::kMakeDirs, "create directories", path)) return *error;
  Result<std::vector<std::string>> parts = components(path);
  if (!parts) return parts.error();
  NodeId node = kRoot;
  for (const std::string& part : *parts) {
    auto it = nodes_[node].entries.find(part);
    if (it == nodes_[node].entries.end()) {
      const NodeId dir = new_node(true);
      set_entry(node, part, dir);
      node = dir;
    } else if (nodes_[it->second].is_dir) {
      node = it->second;
    } else {
      return fs_error("create directories", path, "Not a directory");
    }
  }
  return ok_status();
}

Status FaultFs::write_file(const std::string& path, std::string_view bytes) {
  if (auto error = check_mutation(Op::kWriteFile, "write", path)) return *error;
  Result<ParentAndLeaf> where = resolve_parent("write", path);
  if (!where) return where.error();
  Node& parent = nodes_[where->parent];
  if (auto it = parent.entries.find(where->leaf); it != parent.entries.end()) {
    Node& file = nodes_[it->second];
    if (file.is_dir) return fs_error("write", path, "Is a directory");
    file.data = std::string(bytes);  // O_TRUNC: the durable content stays until sync_file
    record(PendingOp{.entries = {}, .data_of = it->second, .data = file.data});
    return ok_status();
  }
  // creat(2), then write(2): two operations, either may be lost.
  const NodeId file = new_node(false);
  set_entry(where->parent, where->leaf, file);
  nodes_[file].data = std::string(bytes);
  record(PendingOp{.entries = {}, .data_of = file, .data = nodes_[file].data});
  return ok_status();
}

Status FaultFs::sync_file(const std::string& path) {
  if (auto error = check_mutation(Op::kSyncFile, "fsync", path)) return *error;
  const std::optional<NodeId> node = resolve(path);
  if (!node) return fs_error("fsync", path, "No such file or directory");
  // Strict on purpose: the protocol syncs directories with sync_dir only.
  if (nodes_[*node].is_dir) return fs_error("fsync", path, "Is a directory");
  nodes_[*node].durable_data = nodes_[*node].data;
  for (PendingOp& op : pending_ops_) {
    if (op.data_of == *node) op.data_of.reset();
  }
  std::erase_if(pending_ops_,
                [](const PendingOp& op) { return op.entries.empty() && !op.data_of; });
  return ok_status();
}

Status FaultFs::sync_dir(const std::string& path) {
  if (auto error = check_mutation(Op::kSyncDir, "fsync directory", path)) return *error;
  const std::optional<NodeId> node = resolve(path);
  if (!node) return fs_error("fsync directory", path, "No such file or directory");
  if (!nodes_[*node].is_dir) return fs_error("fsync directory", path, "Not a directory");
  nodes_[*node].durable_entries = nodes_[*node].entries;
  for (PendingOp& op : pending_ops_) {
    std::erase_if(op.entries, [&](const EntryChange& change) { return change.dir == *node; });
  }
  std::erase_if(pending_ops_,
                [](const PendingOp& op) { return op.entries.empty() && !op.data_of; });
  return ok_status();
}

Status FaultFs::rename(const std::string& from, const std::string& to) {
  // Errors read "Cannot rename <from> to <to>: <reason>."
  const std::string action = "rename " + from + " to";
  if (auto error = check_mutation(Op::kRename, action, to, from)) return *error;
  Result<ParentAndLeaf> source = resolve_parent(action, from, to);
  if (!source) return source.error();
  Result<ParentAndLeaf> target = resolve_parent(action, to, to);
  if (!target) return target.error();

  auto& source_entries = nodes_[source->parent].entries;
  auto moving = source_entries.find(source->leaf);
  if (moving == source_entries.end()) return fs_error(action, to, "No such file or directory");
  const NodeId node = moving->second;
  auto& target_entries = nodes_[target->parent].entries;
  if (auto replaced = target_entries.find(target->leaf); replaced != target_entries.end()) {
    if (replaced->second == node) return ok_status();
    const Node& old = nodes_[replaced->second];
    if (nodes_[node].is_dir && !old.is_dir) return fs_error(action, to, "Not a directory");
    if (!nodes_[node].is_dir && old.is_dir) return fs_error(action, to, "Is a directory");
    if (old.is_dir && !old.entries.empty()) return fs_error(action, to, "Directory not empty");
  }
  if (nodes_[node].is_dir && reaches(node, target->parent)) {
    return fs_error(action, to, "Invalid argument");
  }
  source_entries.erase(moving);
  target_entries[target->leaf] = node;
  record(PendingOp{.entries = {EntryChange{source->parent, source->leaf, std::nullopt},
                               EntryChange{target->parent, target->leaf, node}},
                   .data_of = std::nullopt,
                   .data = {}});
  if (rename_reports_error_) return fs_error(action, to, "No such file or directory");
  return ok_status();
}

Result<std::string> FaultFs::read_file(const std::string& path) {
  if (auto error = check_read(Op::kReadFile, "read", path)) return *error;
  const std::optional<NodeId> node = resolve(path);
  if (!node) return fs_error("open for reading", path, "No such file or directory");
  if (nodes_[*node].is_dir) return fs_error("read", path, "Is a directory");
  return nodes_[*node].data;
}

Result<std::vector<std::string>> FaultFs::list_dir(const std::string& path) {
  if (auto error = check_read(Op::kListDir, "list directory", path)) return *error;
  const std::optional<NodeId> node = resolve(path);
  if (!node) return fs_error("open directory", path, "No such file or directory");
  if (!nodes_[*node].is_dir) return fs_error("open directory", path, "Not a directory");
  std::vector<std::string> names;
  for (const auto& [name, child] : nodes_[*node].entries) names.push_back(name);
  return names;
}

Status FaultFs::remove_all(const std::string& path) {
  if (auto error = check_mutation(Op::kRemoveAll, "remove", path)) return *error;
  // Nothing there: like the POSIX implementation, removing a missing path succeeds.
  if (!resolve(path)) return ok_status();
  Result<ParentAndLeaf> where = resolve_parent("remove", path);
  if (!where) return where.error();
  // Unlink everything in the tree, then the top: one operation per entry, each durable only
  // through a sync of its directory like any other.
  std::vector<NodeId> stack{nodes_[where->parent].entries.at(where->leaf)};
  while (!stack.empty()) {
    const NodeId dir = stack.back();
    stack.pop_back();
    if (!nodes_[dir].is_dir) continue;
    const std::map<std::string, NodeId> children = nodes_[dir].entries;
    for (const auto& [name, child] : children) {
      stack.push_back(child);
      set_entry(dir, name, std::nullopt);
    }
  }
  set_entry(where->parent, where->leaf, std::nullopt);
  return ok_status();
}

bool FaultFs::exists(const std::string& path) {
  if (dead_) return false;
  return resolve(path).has_value();
}

void FaultFs::collect(NodeId dir, const std::string& prefix, std::vector<std::string>& out) const {
  for (const auto& [name, child] : nodes_[dir].entries) {
    const std::string path = prefix + name;
    if (nodes_[child].is_dir) {
      out.push_back(path + "/");
      collect(child, path + "/", out);
    } else {
      out.push_back(path);
    }
  }
}

std::vector<std::string> FaultFs::tree(const std::string& root) const {
  std::vector<std::string> out;
  const std::optional<NodeId> node = resolve(root);
  if (!node || !nodes_[*node].is_dir) return out;
  collect(*node, root.ends_with('/') ? root : root + "/", out);
  return out;
}

std::string FaultFs::describe() const {
  std::string out;
  std::vector<std::string> paths = tree("/");
  for (const std::string& path : paths) {
    const NodeId node = *resolve(path);
    out += path;
    if (!nodes_[node].is_dir) {
      out += " (" + std::to_string(nodes_[node].data.size()) + " bytes";
      if (nodes_[node].data != nodes_[node].durable_data) out += ", unsynced data";
      out += ")";
    }
    out += "\n";
  }
  if (dead_) out += "(dead: injected crash fired)\n";
  return out;
}

}  // namespace elastic::checkpoint::testing
