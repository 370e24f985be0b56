// Placeholders in a job's env values and command arguments: `{job_id}`,
// `{checkpoint_dir}` and `{round}`, expanded by the daemon when it starts each worker, so a
// script that keeps its own checkpoint path needs no shell wrapper:
//   command = ["python3", "train.py", "--save", "{checkpoint_dir}"]
//   env = { RUN_NAME = "{job_id}-r{round}" }
// In env values the syntax is Python's str.format without format specs: `{name}` is replaced,
// `{{` is a literal `{` and `}}` a literal `}`, and every other brace is an error found when the
// job is submitted (rendezvous::validate() runs placeholder_problem() on every env value), so
// a typo such as {jobid} is named at once.
// In the command's arguments only the three placeholders themselves are replaced, and not
// right after a `$`; every other character, braces included, is left as it is, so arguments
// written for a shell or holding JSON (`sh -c 'echo ${HOME}'`, '{"lr": 0.1}') run unchanged,
// as they did before placeholders existed. (There, a literal "{round}" cannot be written.)
// The program (command[0]) and the submitter's exported environment are never expanded: the
// program is resolved at submit, and an exported value is passed on exactly as it was.
//
// Values: job_id is the job's id; round is the round number the worker starts in (a restart
// or a regrow starts a new round, so a value that uses it changes); checkpoint_dir is
// <checkpoint_root>/<job_id>, the same as ELASTIC_CHECKPOINT_DIR (the job's checkpoint_root,
// else the node's checkpoint.root; expansion fails when neither is set).
//
// Errors: one sentence naming the placeholder. Thread safety: pure functions on values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/rendezvous/job_spec.h"

namespace elastic::rendezvous {

// What the placeholders stand for when one worker starts.
struct PlaceholderValues {
  std::string job_id;
  std::optional<std::string> checkpoint_dir;  // nullopt: no checkpoint root anywhere
  std::uint64_t round = 0;
};

// "" when `text` is well formed and names only known placeholders; otherwise the problem,
// e.g. "uses {ckpt}, which is not a placeholder (the placeholders are {job_id},
// {checkpoint_dir} and {round}; write {{ and }} for literal braces)".
std::string placeholder_problem(std::string_view text);

// `text` with every placeholder replaced and every doubled brace halved. Fails with the
// problem of placeholder_problem(), or when {checkpoint_dir} is used without a checkpoint
// directory.
Result<std::string> expand_placeholders(std::string_view text, const PlaceholderValues& values);

// One command argument with {job_id}, {checkpoint_dir} and {round} replaced (not after a `$`)
// and nothing else touched; fails only when {checkpoint_dir} has no checkpoint directory.
Result<std::string> expand_argument(std::string_view text, const PlaceholderValues& values);

// A job's command and env as one worker gets them.
struct JobText {
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
};
// spec.command (the program as is, every argument expanded) and spec.env (every value
// expanded). The error names where: "the value of CKPT uses {checkpoint_dir}, but ..." or
// "argument 2 uses ...".
Result<JobText> expand_job_text(const JobSpec& spec, const PlaceholderValues& values);

}  // namespace elastic::rendezvous
