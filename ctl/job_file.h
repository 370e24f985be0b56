// Job files: a TOML description of a job (examples/*.toml) and the `elasticctl submit` flags
// that override it, turned into the rendezvous::JobSpec that the daemon receives as JSON.
//
// A job file is a flat TOML document (every key optional except name and command, which the
// file or the flags must give):
//   name = "fmnist"                      job name; ids are "<name>-<n>"
//   command = ["elastic-trainer", "--model", "fmnist"]   argv, an array of strings
//   env = { OMP_PROC_BIND = "close" }    extra worker environment ([env] table works too);
//                                        values may hold placeholders (rendezvous/placeholders.h)
//   export = "ALL"                       the submitter's environment to pass on, as sbatch's
//                                        --export: "ALL" (the default), "NONE", or the names
//                                        to pass ("PYTHONPATH,NCCL_DEBUG" or an array of them)
//   nodes = "2:3"                        MIN:MAX, or N (or an integer) for exactly N; or
//   min_nodes = 2 / max_nodes = 3        (max defaults to min, min to 1; not with nodes)
//   workers_per_node = 0                 0 = one per GPU (CPU slot on GPU-less hosts);
//                                        alias gpus_per_node
//   checkpoint_root = "/nfs/ck"          "" = the daemon's checkpoint.root
//   max_restarts = 3
//   restart_backoff = "1s"               durations as in the daemon config
//   last_call = "5s"                     absent = the daemon's rendezvous.last_call
//   hang_timeout = "60s"                 restart when progress stops this long; "0s" = off;
//                                        absent = the daemon's default; at least 5s
//   priority = 10                        higher is served first (-1000000..1000000; above
//                                        the daemon's limits.priority_ceiling needs an admin)
//   preemptible = true                   may be suspended whole for a higher priority job
//   scale = "throughput"                 "fixed" (the default) or "throughput"
//   scale_min_gain = 0.05                throughput: the gain an added node must bring
//   scale_window = "60s"                 throughput: how long each size is measured
//   working_dir = "/home/alice/run"      absent = the caller's cwd; "" = the user's home
//   user = "alice"                       only the submitting user (documentation/safety net)
// Relative checkpoint_root and working_dir are resolved against the caller's cwd, because the
// daemon (another process, maybe another node) cannot know it. Precedence: JobSpec defaults <
// the file < flags (`-- CMD ARGS` replaces command; --env adds to or overrides env; --export
// replaces export).
//
// Export: the caller's environment (Caller::environment) becomes the spec's exported_env, less
// what rendezvous::is_unexported_env() names and names that are not variable names (bash's
// exported functions, "BASH_FUNC_f%%"), both left out without a word under ALL; under a list,
// naming one of them is an error, and a listed variable that is not set is left out. A value
// over rendezvous::kMaxEnvValueBytes, more than kMaxEnvVars variables, or an environment that
// brings the command and env past kMaxCommandAndEnvBytes is an error naming the limit and the
// largest variables, blamed on "--export", "<file>:<line>: export" or "export (the default,
// ALL)": "export (the default, ALL): the environment to export takes 300012 bytes; with the
// command and env that is 300100 bytes, more than the limit of 262144; the largest: BIG0
// (16006 bytes), ...; unset what the workers do not need before submitting, or name what to
// pass with --export NAME,... (or NONE)". In practice the control socket's request frame
// (oversized_request_problem() below) is met first.
//
// Errors: every problem at once, one line each (joined by '\n'), so one run shows them all.
// Reading stops only when the file cannot be read as TOML at all (one line, JobFileError says
// which exit code to use):
//   "<file>: cannot read the job file: <why>", "<file>:<line>: TOML syntax error: <reason>",
//   "<file>:<line>: TOML nested too deeply: ..." (config/toml_text.h: kMaxTomlNesting)
// Otherwise the file's own problems (wrong types, bad formats, unknown keys) are kept in
// JobFile::problems, in file order, and build_job_spec() reports them followed by the flags'
// problems and every rule of rendezvous::validate() that the merged spec breaks (the daemon
// runs the same check), each blamed on where its value came from:
//   "<file>:<line>: <key>: <problem>"    e.g. "job.toml:4: nodse: unknown key (did you mean
//                                              nodes?)"
//   "--<flag>: <problem>"                 e.g. "--nodes: min 3 is greater than max 2"
// A rule is not reported again for a key whose value the file already got wrong (it kept its
// default, so the rule would only add noise).
//
// Ownership: plain values. Thread safety: pure apart from reading the one file and
// resolve_command()'s look into the PATH directories (cwd and environment are read once, by
// current_caller(), and passed in).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/rendezvous/job_spec.h"

namespace elastic::ctl {

// sysexits.h codes elasticctl uses for job specs.
inline constexpr int kExitDataError = 65;  // EX_DATAERR: the job spec is wrong
inline constexpr int kExitNoInput = 66;    // EX_NOINPUT: the job file cannot be read

// A job file as read: the spec plus what the file set, and where (for errors and merging).
struct JobFile {
  std::string path;
  rendezvous::JobSpec spec;
  // key as written ("nodes", "gpus_per_node", "env.FOO", ...) -> its line (0 = unknown).
  std::map<std::string, int> lines;
  bool has_working_dir = false;
  std::optional<std::string> user;
  // export as written: a string as is, an array of names joined with ','.
  std::optional<std::string> export_setting;
  // The file's own problems, "<file>:<line>: <key>: <problem>" in file order (see above), and
  // the keys they concern as written ("name", "command[1]", "env.FOO"); those keep defaults.
  std::vector<std::string> problems;
  std::set<std::string> broken;
};

// Why read_job_file failed: the file could not be read at all (exit 66), or its content is
// wrong (exit 65).
enum class JobFileError { kUnreadable, kInvalid };

// Reads one job file and checks its types and formats (not the rules of validate()). Fails
// only when it cannot be read as TOML; *kind (if given) then says why. A file with problems
// comes back with JobFile::problems filled: build_job_spec() reports them. parse_job_toml takes
// the text directly; `label` names it in errors.
Result<JobFile> read_job_file(const std::string& path, JobFileError* kind = nullptr);
Result<JobFile> parse_job_toml(std::string_view text, const std::string& label);

// `elasticctl submit` flags; unset ones leave the file's value (or the default).
struct JobOverrides {
  std::optional<std::string> name;
  std::optional<std::vector<std::string>> command;  // after --
  std::vector<std::string> env;                     // NAME=VALUE, in order
  std::optional<std::string> nodes;                 // "MIN:MAX" or "N"
  std::optional<std::uint32_t> workers_per_node;
  std::optional<std::string> checkpoint_root;
  std::optional<std::uint32_t> max_restarts;
  std::optional<std::string> restart_backoff;
  std::optional<std::string> last_call;
  std::optional<std::string> hang_timeout;
  std::optional<std::string> working_dir;
  std::optional<std::string> export_setting;  // --export
  std::optional<bool> warm;                   // --warm / --no-warm
  std::optional<std::string> priority;        // --priority N
  std::optional<bool> preemptible;            // --preemptible / --no-preemptible
  std::optional<std::string> scale;           // --scale fixed|throughput
  std::optional<std::string> scale_min_gain;  // --scale-min-gain X
  std::optional<std::string> scale_window;    // --scale-window D
};

// Who submits: jobs always run as this user (the daemon takes it from the socket's peer
// credentials; the client knows it to refuse a file naming someone else early).
struct Caller {
  std::string user;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::string cwd;  // absolute
  // The caller's environment (what export selects from, and PATH for resolve_command()).
  std::map<std::string, std::string> environment;
};

// The calling process's identity, cwd and environment.
Result<Caller> current_caller();

// file (optional) + flags -> a spec that passed rendezvous::validate(). Errors as above: the
// file's problems, then the flags' and the rules', all in one Error; every one of them is a
// kExitDataError problem.
Result<rendezvous::JobSpec> build_job_spec(const JobFile* file, const JobOverrides& flags,
                                           const Caller& caller);

// Resolves spec->command[0] as the caller's shell would, so the job runs the program the
// submitter means (a venv's or conda's python3) and not whatever the daemon's PATH finds:
//  - a name without '/' is looked up in the caller's PATH (environment["PATH"]; without one,
//    execvp's default /bin:/usr/bin; an empty entry is the cwd) and becomes the first entry's
//    path whose file is executable by the caller (access(X_OK): elasticctl runs as the
//    submitting user). Symlinks are kept, not followed (a venv's python3 is a link, and Python
//    finds its venv through the link's path);
//  - a relative path is made absolute against the caller's cwd; an absolute one is kept.
// Only the submitting host's files are consulted: the resolved path must exist on every host
// that runs the job (as with sbatch and srun on a shared filesystem). Error (exit 65):
//   "command: 'python3' was not found in PATH (/venv/bin:/usr/bin); give its full path, or
//    submit from the environment (venv, conda, module) that provides it"
Status resolve_command(rendezvous::JobSpec* spec, const Caller& caller);

// The problem when `spec`, sent as a submit request of `request_bytes`, is over the control
// socket's frame limit `limit` (control::kMaxRequestBytes; "" = it fits): the bound an
// exported environment meets first. Names the limit and the largest exported variables (env's
// when nothing is exported) and how to send less:
//   "export: the submit request takes 80123 bytes, more than the control socket's limit of
//    65536; the largest exported variables: A (15006 bytes), ...; unset what ..."
std::string oversized_request_problem(const rendezvous::JobSpec& spec, std::size_t request_bytes,
                                      std::size_t limit);

// "MIN:MAX" or "N" -> (min, max); the error is the problem without a key ("expected ...").
Result<std::pair<std::uint32_t, std::uint32_t>> parse_node_range(std::string_view text);

// "10", "-5", "+3" -> the number; the error is the problem without a key ("expected an
// integer ..."). The range is validate()'s rule (priority: ...).
Result<std::int32_t> parse_priority(std::string_view text);

// The keys a job file may hold (aliases included), for help texts and did-you-mean.
const std::vector<std::string>& job_file_keys();

}  // namespace elastic::ctl
