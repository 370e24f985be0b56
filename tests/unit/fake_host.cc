#include "tests/unit/fake_host.h"

#include <algorithm>

namespace elastic::testing {
namespace {

using node::FileInfo;
using node::Follow;

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? std::string("/") : path.substr(0, slash);
}

}  // namespace

void FakeHost::make_parents(const std::string& path, std::uint32_t uid) {
  for (std::size_t pos = path.find('/', 1); pos != std::string::npos;
       pos = path.find('/', pos + 1)) {
    tree.try_emplace(
        path.substr(0, pos),
        Entry{.kind = FileInfo::Kind::kDirectory, .bytes = "", .uid = uid, .modified_ms = now_ms});
  }
}

void FakeHost::put_file(const std::string& path, std::string bytes,
                        std::optional<std::uint32_t> uid) {
  make_parents(path, uid.value_or(daemon_uid));
  tree[path] = Entry{.kind = FileInfo::Kind::kRegular,
                     .bytes = std::move(bytes),
                     .uid = uid.value_or(daemon_uid),
                     .modified_ms = now_ms};
}

void FakeHost::put_dir(const std::string& path, std::optional<std::uint32_t> uid) {
  make_parents(path, uid.value_or(daemon_uid));
  tree[path] = Entry{.kind = FileInfo::Kind::kDirectory,
                     .bytes = "",
                     .uid = uid.value_or(daemon_uid),
                     .modified_ms = now_ms};
}

void FakeHost::put_symlink(const std::string& path, const std::string& target) {
  make_parents(path, daemon_uid);
  tree[path] = Entry{
      .kind = FileInfo::Kind::kSymlink, .bytes = target, .uid = daemon_uid, .modified_ms = now_ms};
}

std::optional<std::string> FakeHost::content(const std::string& path) const {
  const Entry* entry = find(path, Follow::kNo);
  if (entry == nullptr || entry->kind != FileInfo::Kind::kRegular) return std::nullopt;
  return entry->bytes;
}

const FakeHost::Entry* FakeHost::find(const std::string& path, Follow follow) const {
  static const Entry kRoot{
      .kind = FileInfo::Kind::kDirectory, .bytes = "", .uid = 0, .modified_ms = 0};
  std::string at = path;
  for (int depth = 0; depth < 8; ++depth) {
    if (at == "/") return &kRoot;
    const auto it = tree.find(at);
    if (it == tree.end()) return nullptr;
    if (it->second.kind != FileInfo::Kind::kSymlink || follow == Follow::kNo) return &it->second;
    const std::string& target = it->second.bytes;
    at = target.starts_with('/') ? target : parent_of(at) + "/" + target;
  }
  return nullptr;  // ELOOP
}

std::optional<std::string> FakeHost::env(const std::string& name) const {
  const auto it = environment.find(name);
  if (it == environment.end()) return std::nullopt;
  return it->second;
}

std::optional<control::Account> FakeHost::account(std::uint32_t uid) const {
  const auto it = accounts.find(uid);
  if (it == accounts.end()) return std::nullopt;
  return it->second;
}

std::optional<FileInfo> FakeHost::stat(const std::string& path, Follow follow) const {
  const Entry* entry = find(path, follow);
  if (entry == nullptr) return std::nullopt;
  return FileInfo{.kind = entry->kind,
                  .size = entry->bytes.size(),
                  .modified_ms = entry->modified_ms,
                  .uid = entry->uid};
}

std::vector<std::string> FakeHost::list_dir(const std::string& dir) const {
  std::vector<std::string> names;
  const Entry* entry = find(dir, Follow::kYes);
  if (entry == nullptr || entry->kind != FileInfo::Kind::kDirectory) return names;
  const std::string prefix = dir + "/";
  for (auto it = tree.lower_bound(prefix); it != tree.end() && it->first.starts_with(prefix);
       ++it) {
    const std::string rest = it->first.substr(prefix.size());
    if (!rest.empty() && rest.find('/') == std::string::npos) names.push_back(rest);
  }
  return names;
}

Status FakeHost::make_dirs(const std::string& dir) {
  // As mkdir(2) one component at a time, EEXIST ignored (whatever exists there).
  for (std::size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    const std::string partial = dir.substr(0, pos);
    if (find(partial, Follow::kNo) == nullptr) {
      const Entry* parent = find(parent_of(partial), Follow::kYes);
      if (parent == nullptr || parent->kind != FileInfo::Kind::kDirectory) {
        return Error{"Cannot create " + partial + ": Not a directory."};
      }
      tree[partial] = Entry{.kind = FileInfo::Kind::kDirectory,
                            .bytes = "",
                            .uid = daemon_uid,
                            .modified_ms = now_ms};
      changes.push_back("mkdir " + partial);
    }
    if (pos == std::string::npos) return Ok{};
  }
}

void FakeHost::remove_all(const std::string& path) {
  const std::string prefix = path + "/";
  const bool there = tree.erase(path) > 0;
  std::erase_if(tree, [&](const auto& entry) { return entry.first.starts_with(prefix); });
  if (there) changes.push_back("remove " + path);
}

Status FakeHost::replace_file(const std::string& path, const std::string& tmp,
                              std::string_view bytes) {
  const Entry* at_tmp = find(tmp, Follow::kNo);
  if (at_tmp != nullptr && at_tmp->kind == FileInfo::Kind::kSymlink) {
    return Error{"Cannot write " + tmp + ": Too many levels of symbolic links."};
  }
  const Entry* parent = find(parent_of(path), Follow::kYes);
  if (parent == nullptr || parent->kind != FileInfo::Kind::kDirectory) {
    return Error{"Cannot write " + tmp + ": No such file or directory."};
  }
  tree[path] = Entry{.kind = FileInfo::Kind::kRegular,
                     .bytes = std::string(bytes),
                     .uid = daemon_uid,
                     .modified_ms = now_ms};
  changes.push_back("write " + path);
  return Ok{};
}

Result<node::FileRead> FakeHost::read_file(const std::string& path, Follow follow,
                                           std::uint64_t offset, std::size_t max_bytes) const {
  const Entry* entry = find(path, follow);
  if (entry == nullptr) return Error{"Cannot read " + path + ": No such file or directory."};
  if (entry->kind == FileInfo::Kind::kSymlink) {
    return Error{"Cannot read " + path + ": Too many levels of symbolic links."};
  }
  if (entry->kind != FileInfo::Kind::kRegular) {
    return Error{"Cannot read " + path + ": not a regular file."};
  }
  node::FileRead read;
  read.info = FileInfo{.kind = entry->kind,
                       .size = entry->bytes.size(),
                       .modified_ms = entry->modified_ms,
                       .uid = entry->uid};
  if (offset < entry->bytes.size()) read.bytes = entry->bytes.substr(offset, max_bytes);
  return read;
}

Result<spawner::FileBytes> FakeHost::read_file_as(const spawner::RunAs& user,
                                                  const std::string& path,
                                                  std::size_t max_bytes) const {
  read_as_users.push_back(user);
  const Entry* entry = find(path, Follow::kYes);
  if (entry == nullptr) return Error{"Cannot read " + path + ": No such file or directory."};
  if (entry->kind != FileInfo::Kind::kRegular) {
    return Error{"Cannot read " + path + ": not a regular file."};
  }
  if (user.uid != 0 && entry->uid != user.uid) {
    return Error{"Cannot read " + path + " as uid " + std::to_string(user.uid) +
                 ": Permission denied."};
  }
  return spawner::FileBytes{.bytes = entry->bytes.substr(0, max_bytes),
                            .mtime_ms = entry->modified_ms};
}

}  // namespace elastic::testing
