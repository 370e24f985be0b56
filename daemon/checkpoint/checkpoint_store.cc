// The checkpoint protocol over the Fs seam. The order of the calls in publish() is the whole
// point of this file: every durable state it passes through leaves LATEST naming a complete
// checkpoint (see the crash matrix in tests/unit/checkpoint_test.cc).
#include "daemon/checkpoint/checkpoint_store.h"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

namespace elastic::checkpoint {
namespace {

constexpr std::string_view kStepPrefix = "step-";
constexpr std::string_view kTmpPrefix = ".tmp-";
constexpr std::string_view kLatest = "LATEST";
constexpr std::string_view kLatestTmp = "LATEST.tmp";
constexpr std::string_view kRoundPrefix = "round-";

// Misuse of the API is a bug in the caller, not an environment failure (STYLE.md rule 6).
[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "elastic: checkpoint: fatal: %s\n", message.c_str());
  std::abort();
}

bool valid_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

Error invalid_name_error(std::string_view name) {
  return Error{"The checkpoint file name \"" + std::string(name) +
               "\" is invalid: a name must be non-empty, contain no '/' or NUL, and not be "
               "\".\" or \"..\"."};
}

// A corrupt LATEST may hold anything: show a bounded, printable excerpt.
std::string quoted(std::string_view bytes) {
  constexpr std::size_t kMaxShown = 80;
  std::string out = "\"";
  for (std::size_t i = 0; i < bytes.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (bytes.size() > kMaxShown) out += "...";
  return out + "\"";
}

std::string tmp_dir_name(std::int64_t step, std::string_view suffix) {
  char name[64];
  std::snprintf(name, sizeof name, ".tmp-%09" PRId64 "-", step);
  return name + std::string(suffix);
}

std::string round_claim_name(std::int64_t round, std::string_view job) {
  char name[64];
  std::snprintf(name, sizeof name, "round-%09" PRId64 "-", round);
  return name + std::string(job);
}

// The round of a claim of `job` ("round-NNNNNNNNN-<job>"); nullopt for any other name.
std::optional<std::int64_t> parse_round_claim(std::string_view name, std::string_view job) {
  if (!name.starts_with(kRoundPrefix)) return std::nullopt;
  name.remove_prefix(kRoundPrefix.size());
  const std::size_t dash = name.find('-');
  if (dash == std::string_view::npos || name.substr(dash + 1) != job) return std::nullopt;
  std::int64_t round = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + dash, round);
  if (dash == 0 || ec != std::errc() || end != name.data() + dash) return std::nullopt;
  return round;
}

std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string parent_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CheckpointWriter

CheckpointWriter::CheckpointWriter(CheckpointWriter&& other) noexcept
    : store_(other.store_),
      step_(other.step_),
      tmp_dir_(std::move(other.tmp_dir_)),
      finished_(other.finished_),
      abandoned_(other.abandoned_) {
  other.finished_ = true;
}

CheckpointWriter& CheckpointWriter::operator=(CheckpointWriter&& other) noexcept {
  if (this != &other) {
    store_ = other.store_;
    step_ = other.step_;
    tmp_dir_ = std::move(other.tmp_dir_);
    finished_ = other.finished_;
    abandoned_ = other.abandoned_;
    other.finished_ = true;
  }
  return *this;
}

Status CheckpointWriter::add(std::string_view name, std::string_view bytes) {
  if (finished_) die("CheckpointWriter::add() called on a finished writer (" + tmp_dir_ + ").");
  if (abandoned_) {
    return Error{"The checkpoint of step " + std::to_string(step_) +
                 " was abandoned after an earlier write failed."};
  }
  if (!valid_file_name(name)) return invalid_name_error(name);
  const std::string file = tmp_dir_ + "/" + std::string(name);
  Status written = store_->fs_.write_file(file, bytes);
  if (written) written = store_->fs_.sync_file(file);
  if (!written) {
    abandon();
    return Error{written.error().message + " The checkpoint of step " + std::to_string(step_) +
                 " is abandoned."};
  }
  return ok_status();
}

Result<CheckpointRef> CheckpointWriter::publish(const std::function<Status()>& still_current) {
  if (finished_) die("CheckpointWriter::publish() called on a finished writer (" + tmp_dir_ + ").");
  finished_ = true;
  if (abandoned_) {
    return Error{"The checkpoint of step " + std::to_string(step_) +
                 " cannot be published: it was abandoned after a failed write."};
  }
  return store_->publish(*this, still_current);
}

void CheckpointWriter::abandon() {
  abandoned_ = true;
  // Best effort: if this fails too, recover() removes the tmp dir at the next start.
  (void)store_->fs_.remove_all(tmp_dir_);
}

// ---------------------------------------------------------------------------------------------
// CheckpointStore

CheckpointStore::CheckpointStore(Fs& fs, std::string job_dir, int keep)
    : fs_(fs), job_dir_(strip_trailing_slashes(std::move(job_dir))), keep_(keep) {
  if (keep_ < 1) die("CheckpointStore needs keep >= 1, got " + std::to_string(keep_) + ".");
  if (job_dir_.empty()) die("CheckpointStore needs a job dir, got an empty path.");
}

std::string CheckpointStore::step_dir_name(std::int64_t step) {
  if (step < 0) die("A checkpoint step must be >= 0, got " + std::to_string(step) + ".");
  char name[64];
  std::snprintf(name, sizeof name, "step-%09" PRId64, step);
  return name;
}

std::optional<std::int64_t> CheckpointStore::parse_step_dir_name(std::string_view name) {
  if (!name.starts_with(kStepPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.size() < 9) return std::nullopt;
  // Exactly one spelling per step, so two dirs never claim the same step.
  if (digits.size() > 9 && digits.front() == '0') return std::nullopt;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

std::string CheckpointStore::path(std::string_view name) const {
  if (job_dir_ == "/") return "/" + std::string(name);
  return job_dir_ + "/" + std::string(name);
}

Status CheckpointStore::rename_checked(const std::string& from, const std::string& to) {
  Status renamed = fs_.rename(from, to);
  if (renamed) return renamed;
  // An NFS client retries a rename whose reply was lost; the retry then fails (ENOENT) although
  // the first attempt happened. One writer per job, so this state can only be our rename.
  if (!fs_.exists(from) && fs_.exists(to)) return ok_status();
  return renamed;
}

Status CheckpointStore::remove_step_dir(std::int64_t step) {
  const std::string dir = path(step_dir_name(step));
  const std::string trash = path(tmp_dir_name(step, "gc"));
  if (Status cleared = fs_.remove_all(trash); !cleared) return cleared;
  if (Status renamed = rename_checked(dir, trash); !renamed) return renamed;
  // The rename must be durable before the unlinks inside: a filesystem may write back in any
  // order, and a crash must never leave a step dir with some of its files gone.
  if (Status synced = fs_.sync_dir(job_dir_); !synced) return synced;
  return fs_.remove_all(trash);
}

Result<std::vector<std::int64_t>> CheckpointStore::step_dirs() {
  Result<std::vector<std::string>> names = fs_.list_dir(job_dir_);
  if (!names) return names.error();
  std::vector<std::int64_t> steps;
  for (const std::string& name : *names) {
    if (std::optional<std::int64_t> step = parse_step_dir_name(name)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<std::optional<CheckpointRef>> CheckpointStore::latest() {
  const std::string latest_path = path(kLatest);
  if (!fs_.exists(latest_path)) return std::optional<CheckpointRef>();
  Result<std::string> content = fs_.read_file(latest_path);
  if (!content) return content.error();
  std::string_view name = *content;
  if (name.ends_with('\n')) name.remove_suffix(1);
  const std::optional<std::int64_t> step = parse_step_dir_name(name);
  if (!step) {
    return Error{"The checkpoint pointer " + latest_path + " is corrupt: it contains " +
                 quoted(*content) + " instead of one line naming a step directory."};
  }
  const std::string dir = path(name);
  // list_dir() doubles as "is a directory": a missing dir or a plain file both fail it.
  if (Result<std::vector<std::string>> listed = fs_.list_dir(dir); !listed) {
    return Error{"The checkpoint pointer " + latest_path + " names " + std::string(name) +
                 ", which cannot be opened. " + listed.error().message};
  }
  return std::optional<CheckpointRef>(CheckpointRef{*step, dir});
}

Result<std::string> CheckpointStore::read(const CheckpointRef& ref, std::string_view name) {
  if (!valid_file_name(name)) return invalid_name_error(name);
  return fs_.read_file(ref.dir + "/" + std::string(name));
}

Result<std::vector<CheckpointRef>> CheckpointStore::list() {
  Result<std::optional<CheckpointRef>> current = latest();
  if (!current) return current.error();
  std::vector<CheckpointRef> refs;
  if (!current->has_value()) return refs;
  Result<std::vector<std::int64_t>> steps = step_dirs();
  if (!steps) return steps.error();
  for (std::int64_t step : *steps) {
    if (step <= (*current)->step) refs.push_back({step, path(step_dir_name(step))});
  }
  return refs;
}

Status CheckpointStore::recover() {
  // Create the job dir, and make each dir we create durable in its parent: otherwise a crash
  // could make the whole job dir, published checkpoints included, vanish.
  std::vector<std::string> missing;
  for (std::string dir = job_dir_; !fs_.exists(dir);) {
    missing.push_back(dir);
    const std::string parent = parent_of(dir);
    if (parent == dir) break;
    dir = parent;
  }
  if (!missing.empty()) {
    if (Status made = fs_.make_dirs(job_dir_); !made) return made;
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (Status synced = fs_.sync_dir(parent_of(*it)); !synced) return synced;
    }
  }

  // A corrupt LATEST means we do not know which step dirs are published: touch none of them.
  Result<std::optional<CheckpointRef>> current = latest();
  if (!current) {
    return Error{"Cannot recover the checkpoints in " + job_dir_ + ". " + current.error().message};
  }

  Result<std::vector<std::string>> names = fs_.list_dir(job_dir_);
  if (!names) return names.error();
  bool removed_any = false;
  for (const std::string& name : *names) {
    if (name == kLatestTmp || name.starts_with(kTmpPrefix)) {
      if (Status removed = fs_.remove_all(path(name)); !removed) return removed;
      removed_any = true;
    }
  }
  Result<std::vector<std::int64_t>> steps = step_dirs();
  if (!steps) return steps.error();
  for (std::int64_t step : *steps) {
    if (current->has_value() && step <= (*current)->step) continue;
    if (Status removed = remove_step_dir(step); !removed) return removed;
    removed_any = true;
  }
  // Not needed for safety (a leftover that comes back is removed again), but it spares the
  // next start the same work.
  if (removed_any) return fs_.sync_dir(job_dir_);
  return ok_status();
}

Result<std::vector<std::int64_t>> CheckpointStore::claimed_rounds(std::string_view job) {
  Result<std::vector<std::string>> names = fs_.list_dir(job_dir_);
  if (!names) return names.error();
  std::vector<std::int64_t> rounds;
  for (const std::string& name : *names) {
    if (std::optional<std::int64_t> round = parse_round_claim(name, job)) rounds.push_back(*round);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds;
}

Status CheckpointStore::check_round(std::string_view job, std::int64_t round) {
  Result<std::vector<std::int64_t>> rounds = claimed_rounds(job);
  if (!rounds) {
    return Error{"Cannot check which round of job " + std::string(job) + " owns " + job_dir_ +
                 ". " + rounds.error().message};
  }
  if (!rounds->empty() && rounds->back() > round) {
    return Error{"Round " + std::to_string(round) + " of job " + std::string(job) +
                 " is stale: round " + std::to_string(rounds->back()) +
                 " has claimed the checkpoints in " + job_dir_ + "."};
  }
  return ok_status();
}

Status CheckpointStore::claim_round(std::string_view job, std::int64_t round) {
  if (round < 0)
    die("CheckpointStore::claim_round() needs round >= 0, got " + std::to_string(round) + ".");
  const std::string name = round_claim_name(round, job);
  if (job.empty() || !valid_file_name(name)) {
    return Error{"The job id \"" + std::string(job) +
                 "\" cannot name a round claim: it must be non-empty and contain no '/' or NUL."};
  }
  if (Status current = check_round(job, round); !current) return current;
  const std::string claim = path(name);
  if (!fs_.exists(claim)) {
    if (Status written = fs_.write_file(claim, ""); !written) return written;
    if (Status synced = fs_.sync_file(claim); !synced) return synced;
    if (Status synced = fs_.sync_dir(job_dir_); !synced) return synced;
  }
  // Older claims no longer fence anything (this one is newer); a removal lost in a crash only
  // leaves a file that the next claim removes.
  if (Result<std::vector<std::int64_t>> rounds = claimed_rounds(job); rounds) {
    for (std::int64_t older : *rounds) {
      if (older < round) (void)fs_.remove_all(path(round_claim_name(older, job)));
    }
  }
  return ok_status();
}

Result<CheckpointWriter> CheckpointStore::begin(std::int64_t step, std::int64_t round) {
  if (step < 0 || round < 0) {
    die("CheckpointStore::begin() needs step >= 0 and round >= 0, got step " +
        std::to_string(step) + " and round " + std::to_string(round) + ".");
  }
  const std::string tmp = path(tmp_dir_name(step, "r" + std::to_string(round)));
  if (fs_.exists(tmp)) {
    if (Status removed = fs_.remove_all(tmp); !removed) return removed.error();
  }
  if (Status made = fs_.make_dir(tmp); !made) return made.error();
  return CheckpointWriter(this, step, tmp);
}

Result<CheckpointRef> CheckpointStore::publish(CheckpointWriter& writer,
                                               const std::function<Status()>& fence) {
  const std::int64_t step = writer.step();
  const std::string& tmp = writer.tmp_dir();
  const std::string step_name = step_dir_name(step);
  const std::string target = path(step_name);
  // Before the rename nothing is visible yet: on any failure, leave no trace.
  auto abandon = [&](Error error) -> Result<CheckpointRef> {
    (void)fs_.remove_all(tmp);
    return error;
  };

  Result<std::optional<CheckpointRef>> current = latest();
  if (!current) {
    return abandon(Error{"Cannot publish the checkpoint of step " + std::to_string(step) + ". " +
                         current.error().message});
  }
  // The files are fsynced by add(); this makes their names in the tmp dir durable.
  if (Status synced = fs_.sync_dir(tmp); !synced) return abandon(synced.error());
  if (fence) {
    if (Status fenced = fence(); !fenced) return abandon(fenced.error());
  }
  if (current->has_value() && (*current)->step == step) {
    // Checkpoints are immutable, and replacing the dir LATEST names would open a window in which
    // LATEST names nothing. A re-written step holds the same state; keep the published one.
    (void)fs_.remove_all(tmp);
    return **current;
  }
  // A step dir that LATEST does not name: a never-published leftover, or an older checkpoint
  // that this (rewound) job re-writes.
  if (fs_.exists(target)) {
    if (Status removed = remove_step_dir(step); !removed) return abandon(removed.error());
  }
  if (Status renamed = rename_checked(tmp, target); !renamed) return abandon(renamed.error());
  // The step dir must be durable before LATEST can name it.
  if (Status synced = fs_.sync_dir(job_dir_); !synced) return synced.error();

  const std::string latest_tmp = path(kLatestTmp);
  if (Status written = fs_.write_file(latest_tmp, step_name + "\n"); !written) {
    return written.error();
  }
  if (Status synced = fs_.sync_file(latest_tmp); !synced) return synced.error();
  if (Status renamed = rename_checked(latest_tmp, path(kLatest)); !renamed) {
    return renamed.error();
  }
  if (Status synced = fs_.sync_dir(job_dir_); !synced) return synced.error();

  // Published and durable; a failed collection leaves old dirs that the next publish removes.
  (void)collect_garbage(step);
  return CheckpointRef{step, target};
}

Status CheckpointStore::collect_garbage(std::int64_t published_step) {
  Result<std::vector<std::int64_t>> steps = step_dirs();
  if (!steps) return steps.error();
  std::vector<std::int64_t> victims;
  std::vector<std::int64_t> kept;
  for (std::int64_t step : *steps) {
    // Newer than the published step: history abandoned by a rewind (recover() agrees).
    (step > published_step ? victims : kept).push_back(step);
  }
  // `kept` is ascending and ends with published_step, which therefore always survives.
  const std::size_t keep = static_cast<std::size_t>(keep_);
  if (kept.size() > keep) victims.insert(victims.end(), kept.begin(), kept.end() - keep);
  // No sync_dir: a removal that a crash undoes leaves an old complete checkpoint, which the next
  // collection removes again.
  for (std::int64_t step : victims) {
    if (Status removed = remove_step_dir(step); !removed) return removed;
  }
  return ok_status();
}

}  // namespace elastic::checkpoint
