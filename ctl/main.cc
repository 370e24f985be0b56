// elasticctl: the command-line client of elasticd. Every verb talks to the local daemon over
// its control socket (control.socket from the same config file and --set overrides the daemon
// uses; ELASTIC_CONTROL_SOCKET in the environment beats the file's control.socket but not
// --set control.socket); job verbs are forwarded by it to the Raft leader, `logs` to the daemon
// holding the rank. Human tables by default; --json (every verb) prints the daemon's JSON for
// scripts.
//   config                                the effective configuration (no daemon needed)
//   nodes [--topology]                    the member table; --topology: this host's binding plan
//   status [JOB]                          the local daemon (identity, Raft, rounds), or one job
//   jobs [--watch [--interval S]]         every job the leader knows; --watch: again every S
//                                         seconds (default 2) until Ctrl-C (exit 0)
//   top [--interval S]                    a live view of nodes and jobs (keys: q quit, n/j
//                                         sort nodes/jobs by the next column, N/J reverse,
//                                         r refresh); one frame when not on a terminal
//   submit [FILE.toml] [flags] [-- CMD..] submit a job (file < flags; prints its id); --wait
//                                         follows it until it ends; --dry-run only prints it
//   cancel JOB                            cancel a job (its owner, root or control.admin_group)
//   priority JOB N                        change a job's priority (owner or admin; above
//                                         limits.priority_ceiling admins only)
//   suspend JOB / resume JOB              hold a job (its workers stop) / queue it again
//   events [JOB] [--limit N]              job state changes, cluster events and recovery
//                                         incident timelines, oldest first
//   logs JOB [--rank N] [--follow]        worker output of the current round (all ranks
//                                         prefixed, or one raw)
//   logs JOB --round R | --all [--rank N] one round's, or every round's, output from every
//                                         member daemon (a dead one is named in a warning)
//   drain NODE [--reason T] / undrain NODE   stop / resume placing new rounds on a node (admins)
//   voters [add|remove NODE]              the Raft voters; change them one at a time (admins)
//   reload                                the local daemon re-reads its config file now and
//                                         says how it went; 78 if it refused the file (admins;
//                                         the systemd unit's ExecReload)
//   keygen --dir DIR [--name N]           a node's CURVE key pair
//   keygen --dir DIR --client USER        a remote control client's key pair
// Remote control (from a login node without a daemon): --connect tcp://HOST:PORT --client-key
// FILE --server-key FILE (or ELASTIC_CONNECT, ELASTIC_CLIENT_KEY, ELASTIC_SERVER_KEY) sends
// every verb to that daemon's control.remote_listen over CURVE; output and exit codes are the
// same, plus 77 when the daemon refuses the client key.
// This file is the command line's shared part (the options before the verb, the config file,
// --connect) and the list of verbs; each family of verbs is one file with its options, its
// registration and its run: ctl/local.h (config, keygen: no daemon needed), ctl/cluster.h
// (nodes, drain, undrain, voters, reload), ctl/jobs.h (status, jobs, cancel, priority, suspend,
// resume, events), ctl/top.h (top; its frame and keys in ctl/top_view.h, --interval and the stop
// signals in ctl/refresh.h), ctl/submit.h (submit), ctl/logs.h (logs). Job files and their
// errors: ctl/job_file.h. What the verbs share (asking, JSON access, tables): ctl/common.h.
//
// Exit codes (sysexits.h where one fits): 0 ok; 1 the daemon refused the request (its sentence
// is printed: unknown job, no leader...); 3 `submit --wait`: the job failed (the
// reason is printed); 4 `submit --wait`: the job was cancelled; 64 bad command line; 65 bad job
// spec (file or flags; found before anything is sent); 66 the job file cannot be read; 69 no
// daemon answers at the control socket (or it went away for good during --wait/--follow);
// 70 internal error; 73 key files cannot be written; 77 permission denied (the control socket,
// or the daemon refused: not the job's owner, not an admin, or a refused --connect client key);
// 78 bad configuration: a bad --set, or a broken config file for `config` and `keygen`. The
// verbs that talk to a daemon print the file's problems, warn, and go on with the control
// socket they can read (--set, ELASTIC_CONTROL_SOCKET, the file's control.socket if that key is
// fine, else the default): the daemon runs on with its previous file, and `status` shows why.
//
// Thread safety: single-threaded. Replies are decoded without exceptions (a malformed reply is
// an error message, never a crash).
#include "ctl/cluster.h"
#include "ctl/common.h"
#include "ctl/jobs.h"
#include "ctl/local.h"
#include "ctl/logs.h"
#include "ctl/submit.h"
#include "ctl/top.h"

namespace elastic::ctl {
namespace {

constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok; 1 the daemon refused the request (its reason is printed); 3 submit "
    "--wait: the job failed; 4 submit --wait: the job was cancelled; 64 bad command line; 65 "
    "bad job spec (file or flags); 66 job file unreadable; 69 no daemon answers at the control "
    "socket (or --connect's daemon did not answer); 70 internal error; 73 key files cannot be "
    "written; 77 permission denied (on the control socket, by the daemon: not your job, not an "
    "admin, or --connect's client key refused); 78 bad configuration (also: reload, the daemon "
    "refused its config file).\n\n"
    "Files: /etc/elastic/elasticd.toml (the config read with -c; its control.socket names the "
    "local daemon's socket, default /run/elastic/elasticd.sock).\n"
    "Environment: ELASTIC_CONTROL_SOCKET (the local daemon's socket; set by the Slurm "
    "TaskProlog; --set control.socket=... wins); ELASTIC_CONNECT, ELASTIC_CLIENT_KEY, "
    "ELASTIC_SERVER_KEY (remote control through CURVE, like --connect, --client-key, "
    "--server-key).";

// The verbs' names in alphabetical order, for "unknown command" and "a command is required".
std::string command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands({})) names.push_back(command->get_name());
  std::sort(names.begin(), names.end());
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}

int run(int argc, char** argv) {
  // Everything after the first "--" is the job's command, taken before CLI11 sees it: its
  // positional JOBFILE would otherwise swallow the program name.
  std::vector<std::string> args;
  std::optional<std::vector<std::string>> command_after_dashes;
  for (int i = 1; i < argc; ++i) {
    if (!command_after_dashes && std::string_view(argv[i]) == "--") {
      command_after_dashes.emplace();
      continue;
    }
    (command_after_dashes ? *command_after_dashes : args).push_back(argv[i]);
  }
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector

  CLI::App app{"elasticctl: control the elastic training daemons.", "elasticctl"};
  app.set_version_flag("--version", std::string("elasticctl ") + elastic::kVersion);
  app.footer(kExitCodesHelp);
  std::string config_path = cfg::kDefaultConfigPath;
  CLI::Option* config_option =
      app.add_option("-c,--config", config_path,
                     "elasticd's TOML config file (to find the daemon); '' for none")
          ->capture_default_str();
  std::vector<std::string> overrides;
  app.add_option("--set", overrides, "Override one setting (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  elastic::transport::RemoteControlClient remote;
  app.add_option("--connect", remote.endpoint,
                 "Talk to the daemon at this control.remote_listen (tcp://HOST:PORT) over "
                 "CURVE instead of the local socket, e.g. from a login node")
      ->envname("ELASTIC_CONNECT");
  app.add_option("--client-key", remote.client_key_file,
                 "With --connect: your secret key (elasticctl keygen --client USER); the daemon "
                 "acts as the user its USER.pub in control.client_keys_dir names")
      ->envname("ELASTIC_CLIENT_KEY");
  app.add_option("--server-key", remote.server_key_file,
                 "With --connect: the daemon's public key (its transport NODE.pub)")
      ->envname("ELASTIC_SERVER_KEY");
  app.fallthrough();  // -c and --set may also follow the command
  app.require_subcommand(1);

  // Every verb, in the order --help lists them (families interleave there, so each family adds
  // its verbs one by one).
  LocalVerbs local;
  ClusterVerbs cluster;
  JobVerbs jobs;
  SubmitVerb submit;
  LogsVerb logs;
  TopVerb top;
  local.add_config(app);
  cluster.add_nodes(app);
  jobs.add_status(app);
  submit.add(app);
  jobs.add_jobs(app);
  top.add(app);
  jobs.add_cancel(app);
  jobs.add_priority(app);
  jobs.add_suspend(app);
  jobs.add_events(app);
  logs.add(app);
  cluster.add_drain(app);  // drain, undrain
  cluster.add_voters(app);
  cluster.add_reload(app);
  local.add_keygen(app);

  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    const auto remaining = app.remaining();
    if (app.get_subcommands().empty() && !remaining.empty() && remaining.front()[0] != '-') {
      std::cerr << "elasticctl: unknown command \"" << remaining.front()
                << "\" (commands: " << command_names(app) << ")\n";
    } else if (app.get_subcommands().empty() && remaining.empty() &&
               dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      std::cerr << "elasticctl: a command is required (commands: " << command_names(app) << ")\n";
    } else {
      std::cerr << "elasticctl: " << e.what() << "\n";
    }
    std::cerr << "Run 'elasticctl --help' for usage.\n";
    return cfg::kExitUsage;
  }
  if (command_after_dashes && !submit.parsed()) {
    std::cerr << "elasticctl: only submit takes a command after --\n"
              << "Run 'elasticctl --help' for usage.\n";
    return cfg::kExitUsage;
  }

  const cfg::LoadOptions load_options{
      .file = config_path, .file_must_exist = config_option->count() > 0, .overrides = overrides};
  auto loaded = cfg::load_config(load_options);
  bool file_is_broken = false;
  if (!loaded.ok()) {
    // While the file is broken the daemon runs on with its previous configuration (a refused
    // reload), and `status` is where it says so: verbs that only talk to the daemon still reach
    // it, through the control socket that can be read (--set, the environment, the file's own
    // control.socket if that key is fine, else the default). `config` and `keygen` use the
    // configuration itself, and a broken --set was typed right here: those stop.
    auto without_file = cfg::load_config(
        cfg::LoadOptions{.file = "", .file_must_exist = false, .overrides = overrides});
    std::cerr << loaded.error().message << "\n";
    if (local.parsed() || !without_file.ok()) {
      std::cerr << "elasticctl: invalid configuration; exiting with status " << cfg::kExitConfig
                << " (EX_CONFIG)\n";
      return cfg::kExitConfig;
    }
    loaded = std::move(without_file);
    loaded->config.control.socket = cfg::readable_values(load_options).control.socket;
    file_is_broken = true;
  }
  // ELASTIC_CONTROL_SOCKET (exported by the Slurm TaskProlog for the allocation's own daemon,
  // and set for every worker) beats the config file but not an explicit --set control.socket.
  if (const char* env_socket = std::getenv("ELASTIC_CONTROL_SOCKET");
      env_socket != nullptr && *env_socket != '\0' &&
      std::none_of(overrides.begin(), overrides.end(),
                   [](const std::string& o) { return o.rfind("control.socket=", 0) == 0; })) {
    loaded->config.control.socket = env_socket;
  }
  if (local.parsed()) return local.run(*loaded, config_path);
  if (file_is_broken) {
    std::cerr << "elasticctl: warning: " << config_path
              << " is not a valid configuration (see above); going on with "
              << (remote.endpoint.empty() ? "the control socket " + loaded->config.control.socket
                                          : "--connect " + remote.endpoint)
              << "\n";
  }

  // The verbs that talk to a daemon: the local one, or --connect's.
  if (!remote.endpoint.empty()) {
    if (remote.client_key_file.empty() || remote.server_key_file.empty()) {
      std::cerr << "elasticctl: --connect needs --client-key FILE and --server-key FILE (or "
                   "ELASTIC_CLIENT_KEY and ELASTIC_SERVER_KEY)\n";
      return cfg::kExitUsage;
    }
    remote_daemon = remote;
  }
  const std::string& socket = loaded->config.control.socket;
  if (cluster.parsed()) return cluster.run(socket);
  if (jobs.parsed()) return jobs.run(socket);
  if (submit.parsed()) return submit.run(socket, command_after_dashes);
  if (logs.parsed()) return logs.run(socket);
  if (top.parsed()) return top.run(socket);
  return cfg::kExitUsage;  // unreachable: require_subcommand(1)
}

}  // namespace
}  // namespace elastic::ctl

int main(int argc, char** argv) {
  try {
    return elastic::ctl::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "elasticctl: " << e.what() << "\n";
    return elastic::ctl::kExitSoftware;
  }
}
