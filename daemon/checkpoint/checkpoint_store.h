// CheckpointStore: the on-disk protocol of a job's checkpoints on a shared filesystem.
//
//   <job_dir>/step-000001200/        complete, immutable
//   <job_dir>/.tmp-000001300-r7/     being written (step 1300, round 7); never read
//   <job_dir>/LATEST                 one line: the name of the newest complete step dir
//
// Publishing: files go into the tmp dir and are fsynced, the tmp dir is fsynced and renamed to
// its step dir, the job dir is fsynced, then LATEST.tmp is written, fsynced and renamed over
// LATEST, and the job dir fsynced again. A crash between any two of these steps leaves LATEST
// naming a complete checkpoint (or absent); recover() removes the leftovers. Only the newest
// `keep` step dirs are kept. On NFS a retried rename can fail although it happened: the target
// is re-checked before an error is reported.
//
// LATEST is the single source of truth: the published checkpoints are the step dirs whose step
// is <= the one LATEST names. Step dirs newer than that were renamed but never published (or
// belong to a history that a rewind abandoned) and are removed; without LATEST no checkpoint
// was ever published, so every step dir is such a leftover. Never delete LATEST by hand to roll
// back: that discards every checkpoint of the job at the next recover().
//
// Round fencing: a round's writer claims the job dir for its round before it publishes
// (claim_round()) and publishes with a fence that asks check_round(): once a newer round of the
// same job has claimed the dir, the older round's publish is refused, so a stale round (a
// cut-off old member's rank 0) cannot move LATEST past a newer round's checkpoint. A claim is an
// empty durable file <job_dir>/round-NNNNNNNNN-<job> (never read as a checkpoint; recover()
// leaves it). The check and the rename of LATEST are not one atomic step: a stale writer whose
// check passed just before the newer round's claim still publishes once, and that checkpoint is
// older than anything the newer round publishes after its claim (the workers' lease, which stops
// a cut-off member's workers, bounds how long such a writer can run at all).
//
// Readers re-read LATEST every time (latest()). Ownership: holds a reference to an Fs that
// must outlive it. Thread safety: none; one writer per job (rank 0) at a time, and at most one
// CheckpointWriter of a job in progress. Errors: environment failures (I/O, a corrupt LATEST)
// are returned; misuse (keep < 1, a negative step or round, writing with a finished writer)
// aborts.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/checkpoint/fs.h"
#include "daemon/core/result.h"

namespace elastic::checkpoint {

struct CheckpointRef {
  std::int64_t step = 0;
  std::string dir;  // full path of the step dir
  bool operator==(const CheckpointRef&) const = default;
};

class CheckpointStore;

// One checkpoint being written. Obtained from CheckpointStore::begin(); add() files, then
// publish() exactly once. Dropping a writer without publishing leaves a tmp dir that the next
// recover() removes. Move-only: a moved-from writer is finished.
class CheckpointWriter {
 public:
  CheckpointWriter(CheckpointWriter&& other) noexcept;
  CheckpointWriter& operator=(CheckpointWriter&& other) noexcept;
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  ~CheckpointWriter() = default;

  // Writes (and fsyncs) one file named `name` into the tmp dir. A name that is empty, contains
  // '/' or NUL, or is "." or ".." is an Error (nothing written, the writer still usable). If the
  // write fails the checkpoint is abandoned: the tmp dir is removed (best effort) and publish()
  // returns an Error.
  Status add(std::string_view name, std::string_view bytes);
  // Makes the checkpoint the newest complete one. `still_current` is asked right before the
  // rename; if it returns an Error the checkpoint is abandoned (a stale round must not publish):
  // the tmp dir is removed, LATEST is untouched and that Error is returned.
  //
  // Publishing a step <= LATEST's is allowed (a resumed job may re-write a step after a
  // crash): LATEST then names the new checkpoint and newer step dirs are removed as abandoned
  // history. Checkpoints are immutable, so re-publishing the very step LATEST names keeps the
  // published copy (the new files are discarded) and returns it. A failure after the step dir
  // rename leaves a complete step dir that is either published later or removed by recover().
  // Old checkpoints are garbage-collected after LATEST is durable; a failure there is not a
  // publish failure (the next publish() retries it).
  //
  // The writer is finished afterwards, whatever the outcome; calling add() or publish() again
  // aborts.
  Result<CheckpointRef> publish(const std::function<Status()>& still_current = {});

  const std::string& tmp_dir() const { return tmp_dir_; }
  std::int64_t step() const { return step_; }

 private:
  friend class CheckpointStore;
  CheckpointWriter(CheckpointStore* store, std::int64_t step, std::string tmp_dir)
      : store_(store), step_(step), tmp_dir_(std::move(tmp_dir)) {}
  void abandon();

  CheckpointStore* store_;
  std::int64_t step_;
  std::string tmp_dir_;
  bool finished_ = false;   // published, abandoned or moved from
  bool abandoned_ = false;  // an add() failed; publish() reports it
};

class CheckpointStore {
 public:
  // `keep` >= 1: how many complete checkpoints survive garbage collection.
  CheckpointStore(Fs& fs, std::string job_dir, int keep);

  // Creates the job dir if needed (fsyncing the parents of the dirs it creates) and removes
  // leftovers of interrupted writes: tmp dirs, LATEST.tmp, and step dirs newer than LATEST
  // (renamed but never published; all of them when there is no LATEST). An Error, touching no
  // step dir, when LATEST is corrupt. Idempotent, and safe to interrupt by a crash.
  Status recover();
  // The checkpoint LATEST names, or nullopt when there is none yet. An error when LATEST is
  // unreadable, malformed (not one line "step-NNNNNNNNN") or names a missing dir.
  Result<std::optional<CheckpointRef>> latest();
  // Reads one file of a complete checkpoint.
  Result<std::string> read(const CheckpointRef& ref, std::string_view name);
  // Starts writing the checkpoint of `step` during `round` (both >= 0): creates its tmp dir,
  // replacing one left by an earlier attempt of the same step and round.
  Result<CheckpointWriter> begin(std::int64_t step, std::int64_t round);
  // The published checkpoints present (steps <= LATEST's), oldest first; empty without LATEST.
  Result<std::vector<CheckpointRef>> list();
  // Claims the job dir for `round` of `job` (round >= 0; the job id must be a valid file name
  // part): an Error, creating nothing, when a newer round of the job has claimed it; otherwise
  // the claim is durable on return and the job's older claims are removed (best effort).
  Status claim_round(std::string_view job, std::int64_t round);
  // ok_status() unless a round of `job` newer than `round` has claimed the job dir; the Error
  // names both rounds. Meant as publish()'s `still_current`.
  Status check_round(std::string_view job, std::int64_t round);

  const std::string& job_dir() const { return job_dir_; }

  static std::string step_dir_name(std::int64_t step);  // "step-000001200"
  // The step a canonical step dir name stands for; nullopt for any other name.
  static std::optional<std::int64_t> parse_step_dir_name(std::string_view name);

 private:
  friend class CheckpointWriter;
  Result<CheckpointRef> publish(CheckpointWriter& writer, const std::function<Status()>& fence);
  Status collect_garbage(std::int64_t published_step);
  // rename() that, when the call reports an error, checks whether it happened anyway (NFS).
  Status rename_checked(const std::string& from, const std::string& to);
  // Removes a step dir by a durable rename to a tmp name first, so none is ever half there.
  Status remove_step_dir(std::int64_t step);
  // The rounds of `job` that hold a claim, ascending.
  Result<std::vector<std::int64_t>> claimed_rounds(std::string_view job);
  // Steps of the step dirs present, ascending.
  Result<std::vector<std::int64_t>> step_dirs();
  std::string path(std::string_view name) const;

  Fs& fs_;
  std::string job_dir_;
  int keep_;
};

}  // namespace elastic::checkpoint
