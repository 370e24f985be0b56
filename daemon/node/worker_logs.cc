#include "daemon/node/worker_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "daemon/rendezvous/job_spec.h"

namespace elastic::node {
namespace {

namespace fs = std::filesystem;

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

// mkdir -p, 0755 for each directory it makes (as the spawner makes log directories).
Status make_dirs(const std::string& dir) {
  for (std::size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    const std::string partial = dir.substr(0, pos);
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return Error{"Cannot create " + partial + ": " + std::strerror(errno) + "."};
    }
    if (pos == std::string::npos) return Ok{};
  }
}

std::int64_t mtime_ms(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
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
  if (Status made = make_dirs(dir); !made.ok()) return made;
  // Prune first: the new round's directory is made by the spawner when its first worker starts.
  std::vector<std::uint64_t> kept = rounds(job);
  if (!std::binary_search(kept.begin(), kept.end(), round)) {
    kept.insert(std::lower_bound(kept.begin(), kept.end(), round), round);
  }
  for (std::size_t i = 0; kept.size() - i > static_cast<std::size_t>(std::max(kept_, 1)); ++i) {
    if (kept[i] == round) continue;  // an older round than those here: never its own
    std::error_code ignored;  // another daemon sharing the log_root may have removed it already
    fs::remove_all(dir + "/" + std::string(kRoundPrefix) + std::to_string(kept[i]), ignored);
  }
  if (owner(job) == uid) return Ok{};
  const std::string path = dir + "/owner";
  const std::string tmp = dir + "/.owner." + self_ + ".tmp";
  const std::string text = std::to_string(uid) + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Error{"Cannot write " + tmp + ": " + std::strerror(errno) + "."};
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(written ? errno : saved);
    ::unlink(tmp.c_str());
    return Error{"Cannot write " + path + ": " + why + "."};
  }
  return Ok{};
}

std::optional<std::uint32_t> WorkerLogs::owner(const std::string& job) const {
  if (!is_job_id(job)) return std::nullopt;
  const std::string path = base_ + "/" + job + "/owner";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  char text[32];
  ssize_t got = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) {
    got = ::read(fd, text, sizeof text);
  }
  ::close(fd);
  if (got <= 1 || text[got - 1] != '\n') return std::nullopt;
  return parse_number<std::uint32_t>(std::string_view(text, static_cast<std::size_t>(got - 1)));
}

std::vector<std::uint64_t> WorkerLogs::rounds(const std::string& job) const {
  std::vector<std::uint64_t> found;
  if (!is_job_id(job)) return found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(base_ + "/" + job, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kRoundPrefix)) continue;
    std::error_code type_error;
    if (!entry.is_directory(type_error) || entry.is_symlink(type_error)) continue;
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
    std::error_code error;
    const std::size_t first = found.size();
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with(kRankPrefix) || !name.ends_with(kLogSuffix)) continue;
      const auto rank = parse_number<std::uint32_t>(std::string_view(name).substr(
          kRankPrefix.size(), name.size() - kRankPrefix.size() - kLogSuffix.size()));
      struct stat st {};
      if (!rank || ::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      found.push_back(WorkerLogFile{.round = r,
                                    .rank = *rank,
                                    .size = static_cast<std::uint64_t>(st.st_size),
                                    .modified_ms = mtime_ms(st)});
    }
    std::sort(found.begin() + static_cast<std::ptrdiff_t>(first), found.end(),
              [](const WorkerLogFile& a, const WorkerLogFile& b) { return a.rank < b.rank; });
  }
  return found;
}

}  // namespace elastic::node
