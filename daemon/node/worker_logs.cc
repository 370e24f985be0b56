#include "daemon/node/worker_logs.h"

#include <algorithm>
#include <charconv>

#include "daemon/rendezvous/job_spec.h"

namespace elastic::node {
namespace {

constexpr std::string_view kRoundPrefix = "round-";
constexpr std::string_view kRankPrefix = "rank-";
constexpr std::string_view kLogSuffix = ".log";
// "<name>-<u64>": the job table's ids (rendezvous/job_table_internal.h's kMaxJobIdBytes).
constexpr std::size_t kMaxJobIdBytes = rendezvous::kMaxJobNameBytes + 24;

// A decimal number as this file writes it: digits only, no leading zero, no overflow.
template <typename T>
std::optional<T> parse_number(std::string_view text) {
  if (text.empty() || (text.size() > 1 && text.front() == '0')) return std::nullopt;
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

bool is_job_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxJobIdBytes || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string WorkerLogs::rank_path(const std::string& job, std::uint64_t round,
                                  std::uint32_t rank) const {
  return base_ + "/" + job + "/" + std::string(kRoundPrefix) + std::to_string(round) + "/" +
         std::string(kRankPrefix) + std::to_string(rank) + std::string(kLogSuffix);
}

Status WorkerLogs::start_round(const std::string& job, std::uint64_t round,
                               std::uint32_t uid) const {
  if (!is_job_id(job)) return Error{"\"" + job + "\" is not a job id."};
  const std::string dir = base_ + "/" + job;
  if (Status made = host_->make_dirs(dir); !made.ok()) return made;
  // Prune first: the new round's directory is made by the spawner when its first worker starts.
  std::vector<std::uint64_t> kept = rounds(job);
  if (!std::binary_search(kept.begin(), kept.end(), round)) {
    kept.insert(std::lower_bound(kept.begin(), kept.end(), round), round);
  }
  for (std::size_t i = 0; kept.size() - i > static_cast<std::size_t>(std::max(kept_, 1)); ++i) {
    if (kept[i] == round) continue;  // an older round than those here: never its own
    // Another daemon sharing the log_root may have removed it already.
    host_->remove_all(dir + "/" + std::string(kRoundPrefix) + std::to_string(kept[i]));
  }
  if (owner(job) == uid) return Ok{};
  return host_->replace_file(dir + "/owner", dir + "/.owner." + self_ + ".tmp",
                             std::to_string(uid) + "\n");
}

std::optional<std::uint32_t> WorkerLogs::owner(const std::string& job) const {
  if (!is_job_id(job)) return std::nullopt;
  constexpr std::size_t kMaxOwnerBytes = 32;
  const Result<FileRead> file =
      host_->read_file(base_ + "/" + job + "/owner", Follow::kNo, 0, kMaxOwnerBytes);
  if (!file.ok() || file->info.uid != host_->euid()) return std::nullopt;
  const std::string& text = file->bytes;
  if (text.size() <= 1 || text.back() != '\n') return std::nullopt;
  return parse_number<std::uint32_t>(std::string_view(text).substr(0, text.size() - 1));
}

std::vector<std::uint64_t> WorkerLogs::rounds(const std::string& job) const {
  std::vector<std::uint64_t> found;
  if (!is_job_id(job)) return found;
  const std::string dir = base_ + "/" + job;
  for (const std::string& name : host_->list_dir(dir)) {
    if (!name.starts_with(kRoundPrefix)) continue;
    const std::optional<FileInfo> info = host_->stat(dir + "/" + name, Follow::kNo);
    if (!info || info->kind != FileInfo::Kind::kDirectory) continue;  // nor a symlink to one
    if (auto round =
            parse_number<std::uint64_t>(std::string_view(name).substr(kRoundPrefix.size())))
      found.push_back(*round);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<WorkerLogFile> WorkerLogs::files(const std::string& job,
                                             std::optional<std::uint64_t> round) const {
  std::vector<WorkerLogFile> found;
  if (!is_job_id(job)) return found;
  const std::vector<std::uint64_t> all = round ? std::vector<std::uint64_t>{*round} : rounds(job);
  for (const std::uint64_t r : all) {
    const std::string dir = base_ + "/" + job + "/" + std::string(kRoundPrefix) + std::to_string(r);
    const std::size_t first = found.size();
    for (const std::string& name : host_->list_dir(dir)) {
      if (!name.starts_with(kRankPrefix) || !name.ends_with(kLogSuffix)) continue;
      const auto rank = parse_number<std::uint32_t>(std::string_view(name).substr(
          kRankPrefix.size(), name.size() - kRankPrefix.size() - kLogSuffix.size()));
      if (!rank) continue;
      const std::optional<FileInfo> info = host_->stat(dir + "/" + name, Follow::kNo);
      if (!info || info->kind != FileInfo::Kind::kRegular) continue;
      found.push_back(WorkerLogFile{
          .round = r, .rank = *rank, .size = info->size, .modified_ms = info->modified_ms});
    }
    std::sort(found.begin() + static_cast<std::ptrdiff_t>(first), found.end(),
              [](const WorkerLogFile& a, const WorkerLogFile& b) { return a.rank < b.rank; });
  }
  return found;
}

}  // namespace elastic::node
