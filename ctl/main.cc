// elasticctl: the command-line client of elasticd. Every verb talks to the local daemon over
// its control socket (control.socket from the same config file and --set overrides the daemon
// uses; ELASTIC_CONTROL_SOCKET in the environment beats the file's control.socket but not
// --set control.socket); job verbs are forwarded by it to the Raft leader, `logs` to the daemon
// holding the rank. Human tables by default; --json (every verb) prints the daemon's JSON for
// scripts.
//   config                                the effective configuration (no daemon needed)
//   nodes [--topology]                    the member table; --topology: this host's binding plan
//   status [JOB]                          the local daemon (identity, Raft, rounds), or one job
//   jobs                                  every job the leader knows
//   submit [FILE.toml] [flags] [-- CMD..] submit a job (file < flags; prints its id); --wait
//                                         follows it until it ends; --dry-run only prints it
//   cancel JOB                            cancel a job (its owner, root or control.admin_group)
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
// Job files and their errors: ctl/job_file.h. This file is the command line; the commands that
// read from a daemon are in ctl/commands.h, and what they share (asking, JSON access, tables) in
// ctl/common.h.
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
#include <charconv>

#include "ctl/commands.h"
#include "ctl/common.h"

namespace elastic::ctl {
namespace {

constexpr const char* kCommands =
    "cancel, config, drain, events, jobs, keygen, logs, nodes, reload, status, submit, undrain, "
    "voters";

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

// ---- the command line ---------------------------------------------------------------------

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
  CLI::Option* connect_option =
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
  bool as_json = false;
  const auto json_flag = [&](CLI::App* command) {
    command->add_flag("--json", as_json, "Print JSON (the daemon's reply) instead of a table");
  };

  CLI::App* config_cmd =
      app.add_subcommand("config", "Print the effective configuration (TOML, or JSON with --json)");
  config_cmd->add_flag("--json", as_json, "Print JSON instead of TOML");

  CLI::App* nodes_cmd = app.add_subcommand(
      "nodes",
      "Show every member the local daemon knows: state, slots, drained, incarnation, "
      "generation, address, last heard");
  bool topology = false;
  nodes_cmd->add_flag("--topology", topology,
                      "Show this host's binding plan instead: slot, GPU, PCI bus, CPUs, memory "
                      "nodes, OMP threads");
  json_flag(nodes_cmd);

  CLI::App* status_cmd = app.add_subcommand(
      "status", "Show the local daemon (identity, members, Raft, rounds), or one job");
  std::string job_id;
  status_cmd->add_option("job", job_id, "Show this job instead of the daemon");
  json_flag(status_cmd);

  CLI::App* submit_cmd = app.add_subcommand(
      "submit",
      "Submit a job: elasticctl submit [JOB.toml] [flags] [-- COMMAND ARGS...]; flags override "
      "the file, -- COMMAND replaces its command");
  std::string job_file;
  std::string job_name, node_range, restart_backoff, last_call, checkpoint_root, working_dir;
  std::string hang_timeout;
  std::uint32_t workers_per_node = 0;
  std::uint32_t max_restarts = 0;
  std::vector<std::string> env_pairs;
  bool wait = false;
  bool dry_run = false;
  submit_cmd->add_option("jobfile", job_file, "A TOML job file (examples/*.toml)");
  CLI::Option* name_opt =
      submit_cmd->add_option("--name", job_name, "Job name ([A-Za-z0-9._-], at most 64)");
  CLI::Option* nodes_opt = submit_cmd->add_option("--nodes", node_range,
                                                  "MIN:MAX nodes, or N for exactly N (default 1)");
  CLI::Option* workers_opt = submit_cmd->add_option(
      "--workers-per-node,--gpus-per-node", workers_per_node,
      "Workers per node; 0 = one per GPU, or per CPU slot on hosts without GPUs (default 0)");
  CLI::Option* restarts_opt = submit_cmd->add_option(
      "--max-restarts", max_restarts, "Worker failures tolerated before the job fails (default 3)");
  CLI::Option* backoff_opt = submit_cmd->add_option("--restart-backoff", restart_backoff,
                                                    "Pause after a worker failure (default 1s)");
  CLI::Option* last_call_opt = submit_cmd->add_option(
      "--last-call", last_call, "Wait this long for more nodes past MIN (default: the daemon's)");
  CLI::Option* hang_opt = submit_cmd->add_option(
      "--hang-timeout", hang_timeout,
      "Restart the job when its progress-reporting workers send no step for this long (at least "
      "5s; default 0s = off)");
  CLI::Option* ckpt_opt = submit_cmd->add_option(
      "--checkpoint-root", checkpoint_root,
      "Shared checkpoint directory; relative to the cwd (default: the daemon's checkpoint.root)");
  CLI::Option* workdir_opt = submit_cmd->add_option(
      "--workdir,--working-dir", working_dir,
      "Workers' working directory; relative to the cwd (default: the cwd; '' = the user's home)");
  submit_cmd->add_option("--env", env_pairs, "NAME=VALUE for the workers (repeatable)")
      ->allow_extra_args(false);
  std::string export_setting;
  CLI::Option* export_opt = submit_cmd->add_option(
      "--export", export_setting,
      "Your environment to pass to the workers, as sbatch: ALL (default), NONE or VAR,VAR,... "
      "(never host-specific ones such as HOSTNAME, SSH_*, DISPLAY, SLURM_*); --env beats it");
  bool warm_flag = false;
  CLI::Option* warm_opt = submit_cmd->add_flag(
      "--warm,!--no-warm", warm_flag,
      "Keep a started Python interpreter (torch imported) per slot for the next round; the "
      "command must be python [OPTIONS] SCRIPT|-m MODULE [ARGS]");
  submit_cmd->add_flag("--wait", wait,
                       "Follow the job until it ends: exit 0 succeeded, 3 failed, 4 cancelled");
  submit_cmd->add_flag("--dry-run", dry_run,
                       "Check the spec and print it as JSON; send nothing to the daemon");
  json_flag(submit_cmd);

  CLI::App* jobs_cmd = app.add_subcommand("jobs", "List the jobs the leader knows");
  json_flag(jobs_cmd);

  CLI::App* cancel_cmd = app.add_subcommand("cancel", "Cancel a job");
  cancel_cmd->add_option("job", job_id, "The job id (elasticctl jobs)")->required();
  json_flag(cancel_cmd);

  CLI::App* events_cmd =
      app.add_subcommand("events",
                         "Show job state changes (replicated), the leader's cluster events "
                         "(members, elections, drains, rounds) and recovery incident timelines, "
                         "oldest first; cluster events and incidents are the leader's memory, "
                         "lost when leadership moves");
  events_cmd->add_option("job", job_id, "Only this job");
  std::int64_t limit = 0;
  events_cmd->add_option("--limit", limit, "At most the last N events")->check(CLI::PositiveNumber);
  json_flag(events_cmd);

  CLI::App* logs_cmd = app.add_subcommand(
      "logs",
      "Show a job's worker output: every rank of the current round, each line prefixed "
      "[rank N], or one rank raw; --round R or --all: that round's or every round's output "
      "wherever it ran (a member that does not answer is named in a warning, exit status "
      "unchanged)");
  std::uint32_t rank = 0;
  bool follow = false;
  std::string logs_round;
  bool all_rounds = false;
  logs_cmd->add_option("job", job_id, "The job id")->required();
  CLI::Option* rank_opt = logs_cmd->add_option("--rank", rank, "Only this rank, unprefixed");
  logs_cmd->add_flag("-f,--follow", follow,
                     "Keep printing new output of the current round until the job ends");
  CLI::Option* round_opt = logs_cmd->add_option(
      "--round", logs_round, "Only this round's output, every rank of it (wherever it ran)");
  logs_cmd->add_flag("--all", all_rounds,
                     "Every round's output, round then rank, each line prefixed "
                     "[round R rank N]");
  json_flag(logs_cmd);

  CLI::App* drain_cmd = app.add_subcommand(
      "drain", "Place no new rounds on a node (its running jobs keep running; admins only)");
  std::string node_name;
  std::string drain_reason;
  drain_cmd->add_option("node", node_name, "The daemon's node name")->required();
  drain_cmd->add_option("--reason", drain_reason, "Why (shown in nodes and events)");
  json_flag(drain_cmd);
  CLI::App* undrain_cmd = app.add_subcommand("undrain", "Let a drained node take rounds again");
  undrain_cmd->add_option("node", node_name, "The daemon's node name")->required();
  json_flag(undrain_cmd);

  CLI::App* voters_cmd = app.add_subcommand(
      "voters", "Show the Raft voters, or change them one at a time: voters add|remove NODE");
  std::string voter_action;
  std::string voter_node;
  voters_cmd->add_option("action", voter_action, "add or remove")
      ->check(CLI::IsMember({"add", "remove"}));
  voters_cmd->add_option("node", voter_node, "The daemon's node name");
  json_flag(voters_cmd);

  CLI::App* reload_cmd = app.add_subcommand(
      "reload",
      "Make the local daemon re-read its config file now and print the outcome; exits 78 when "
      "it refuses the file (it keeps running with the previous one). Root and "
      "control.admin_group only; `systemctl reload elasticd` runs this");
  json_flag(reload_cmd);

  CLI::App* keygen_cmd = app.add_subcommand(
      "keygen", "Write a node's CURVE key pair: DIR/NAME.key (secret) and DIR/NAME.pub");
  std::string key_dir;
  std::string key_name;
  keygen_cmd->add_option("--dir", key_dir, "Directory for the key files (created)")->required();
  CLI::Option* key_name_opt = keygen_cmd->add_option(
      "--name", key_name, "Node name (default: node.name, else the hostname)");
  std::string client_user;
  keygen_cmd
      ->add_option("--client", client_user,
                   "Write a remote control client key pair for this user instead "
                   "(DIR/USER.key for --client-key, DIR/USER.pub for control.client_keys_dir)")
      ->excludes(key_name_opt);

  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    const auto remaining = app.remaining();
    if (app.get_subcommands().empty() && !remaining.empty() && remaining.front()[0] != '-') {
      std::cerr << "elasticctl: unknown command \"" << remaining.front()
                << "\" (commands: " << kCommands << ")\n";
    } else if (app.get_subcommands().empty() && remaining.empty() &&
               dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      std::cerr << "elasticctl: a command is required (commands: " << kCommands << ")\n";
    } else {
      std::cerr << "elasticctl: " << e.what() << "\n";
    }
    std::cerr << "Run 'elasticctl --help' for usage.\n";
    return cfg::kExitUsage;
  }
  if (command_after_dashes && !submit_cmd->parsed()) {
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
    if (config_cmd->parsed() || keygen_cmd->parsed() || !without_file.ok()) {
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
  if (file_is_broken) {
    std::cerr << "elasticctl: warning: " << config_path
              << " is not a valid configuration (see above); going on with "
              << (remote.endpoint.empty() ? "the control socket " + loaded->config.control.socket
                                          : "--connect " + remote.endpoint)
              << "\n";
  }

  if (config_cmd->parsed()) {
    if (loaded->file_missing) {
      std::cerr << "elasticctl: " << config_path << " not found; showing built-in defaults\n";
    }
    std::cout << (as_json ? cfg::to_json(loaded->config) : cfg::to_toml(loaded->config));
    return 0;
  }
  (void)connect_option;
  if (!remote.endpoint.empty() && !keygen_cmd->parsed() && !config_cmd->parsed()) {
    if (remote.client_key_file.empty() || remote.server_key_file.empty()) {
      std::cerr << "elasticctl: --connect needs --client-key FILE and --server-key FILE (or "
                   "ELASTIC_CLIENT_KEY and ELASTIC_SERVER_KEY)\n";
      return cfg::kExitUsage;
    }
    remote_daemon = remote;
  }
  const std::string& socket = loaded->config.control.socket;
  if (nodes_cmd->parsed()) {
    return topology ? topology_command(socket, as_json) : nodes_command(socket, as_json);
  }
  if (status_cmd->parsed()) {
    return job_id.empty() ? status_command(socket, as_json)
                          : job_status_command(socket, job_id, as_json);
  }
  if (jobs_cmd->parsed()) return jobs_command(socket, as_json);
  if (events_cmd->parsed()) return events_command(socket, job_id, limit, as_json);
  if (logs_cmd->parsed()) {
    LogsOptions options;
    options.all = all_rounds;
    options.follow = follow;
    options.as_json = as_json;
    if (rank_opt->count() > 0) options.rank = rank;
    if (round_opt->count() > 0) {
      std::uint64_t round = 0;
      const char* end = logs_round.data() + logs_round.size();
      const auto parsed = std::from_chars(logs_round.data(), end, round);
      if (logs_round.empty() || parsed.ec != std::errc() || parsed.ptr != end) {
        std::cerr << "elasticctl: --round must be a round number (0, 1, 2, ...; elasticctl "
                     "status JOB shows the current one), not \""
                  << logs_round << "\"\n";
        return cfg::kExitUsage;
      }
      options.round = round;
    }
    if (options.round && options.all) {
      std::cerr << "elasticctl: logs takes --round R or --all, not both\n";
      return cfg::kExitUsage;
    }
    if (follow && (options.round || options.all)) {
      std::cerr << "elasticctl: --follow reads the current round; it does not combine with "
                << (options.all ? "--all" : "--round") << "\n";
      return cfg::kExitUsage;
    }
    return logs_command(socket, job_id, options);
  }
  if (drain_cmd->parsed() || undrain_cmd->parsed()) {
    const bool drain = drain_cmd->parsed();
    json request{{"verb", drain ? "drain" : "undrain"}, {"node", node_name}};
    if (drain && !drain_reason.empty()) request["reason"] = drain_reason;
    json reply;
    if (int code = ask_or_report(socket, request, kLeaderTimeout, reply)) return code;
    if (as_json) {
      std::cout << dump(reply) << "\n";
    } else {
      std::cout << (drain ? "drained " : "undrained ") << str(reply, "node", node_name) << "\n";
    }
    return 0;
  }
  if (voters_cmd->parsed()) {
    if (!voter_action.empty() && voter_node.empty()) {
      std::cerr << "elasticctl: voters " << voter_action << " needs a NODE name\n";
      return cfg::kExitUsage;
    }
    json request{{"verb", "voters"}};
    if (!voter_action.empty()) {
      request["action"] = voter_action;
      request["node"] = voter_node;
    }
    json reply;
    if (int code = ask_or_report(socket, request, kLeaderTimeout, reply)) return code;
    if (as_json) {
      std::cout << dump(reply) << "\n";
      return 0;
    }
    std::string voters;
    const json& list = member(reply, "voters");
    if (list.is_array()) {
      for (const json& v : list) {
        if (v.is_string()) voters += (voters.empty() ? "" : " ") + v.get<std::string>();
      }
    }
    std::cout << "voters: " << voters << "\n";
    return 0;
  }
  if (reload_cmd->parsed()) {
    json reply;
    if (int code = ask_or_report(socket, {{"verb", "reload"}}, kLocalTimeout, reply)) return code;
    if (as_json) {
      std::cout << dump(reply) << "\n";
    } else {
      std::cout << "reloaded " << str(reply, "source") << ": " << str(reply, "message") << "\n";
    }
    return 0;
  }
  if (cancel_cmd->parsed()) {
    json reply;
    const int code =
        ask_or_report(socket, {{"verb", "cancel"}, {"job", job_id}}, kLeaderTimeout, reply);
    if (code != 0) return code;
    if (as_json) {
      std::cout << dump(reply) << "\n";
    } else {
      std::cout << "cancelled " << job_id << "\n";
    }
    return 0;
  }
  if (submit_cmd->parsed()) {
    std::optional<elastic::ctl::JobFile> file;
    if (!job_file.empty()) {
      elastic::ctl::JobFileError kind = elastic::ctl::JobFileError::kInvalid;
      auto read = elastic::ctl::read_job_file(job_file, &kind);
      if (!read.ok()) {
        std::cerr << read.error().message << "\n";
        if (kind == elastic::ctl::JobFileError::kInvalid) {
          std::cerr << "elasticctl: the job spec is invalid; nothing was submitted\n";
        }
        if (kind == elastic::ctl::JobFileError::kUnreadable && !job_file.ends_with(".toml")) {
          std::cerr << "elasticctl: (a job's command goes after --: elasticctl submit --name N "
                       "-- "
                    << job_file << " ...)\n";
        }
        return kind == elastic::ctl::JobFileError::kUnreadable ? elastic::ctl::kExitNoInput
                                                               : elastic::ctl::kExitDataError;
      }
      file = std::move(*read);
    }
    elastic::ctl::JobOverrides flags;
    if (name_opt->count() > 0) flags.name = job_name;
    if (command_after_dashes) flags.command = *command_after_dashes;
    flags.env = env_pairs;
    if (nodes_opt->count() > 0) flags.nodes = node_range;
    if (workers_opt->count() > 0) flags.workers_per_node = workers_per_node;
    if (restarts_opt->count() > 0) flags.max_restarts = max_restarts;
    if (backoff_opt->count() > 0) flags.restart_backoff = restart_backoff;
    if (last_call_opt->count() > 0) flags.last_call = last_call;
    if (hang_opt->count() > 0) flags.hang_timeout = hang_timeout;
    if (ckpt_opt->count() > 0) flags.checkpoint_root = checkpoint_root;
    if (workdir_opt->count() > 0) flags.working_dir = working_dir;
    if (export_opt->count() > 0) flags.export_setting = export_setting;
    if (warm_opt->count() > 0) flags.warm = warm_flag;
    auto caller = elastic::ctl::current_caller();
    if (!caller.ok()) {
      std::cerr << "elasticctl: " << caller.error().message << "\n";
      return elastic::ctl::kExitDataError;
    }
    auto spec = elastic::ctl::build_job_spec(file ? &*file : nullptr, flags, *caller);
    // The program as the submitter's shell would find it (a venv's python3, not the daemon's).
    if (spec.ok()) {
      if (elastic::Status resolved = elastic::ctl::resolve_command(&*spec, *caller);
          !resolved.ok()) {
        spec = resolved.error();
      }
    }
    if (!spec.ok()) {
      std::cerr << spec.error().message << "\n"
                << "elasticctl: the job spec is invalid; nothing was submitted\n";
      return elastic::ctl::kExitDataError;
    }
    const json spec_json = json::parse(elastic::rendezvous::to_json(*spec), nullptr, false);
    const json submit_request{{"verb", "submit"}, {"spec", spec_json}};
    // The daemon closes a connection whose request is over the frame limit: say why here.
    if (const std::string too_big = elastic::ctl::oversized_request_problem(
            *spec, submit_request.dump().size(), elastic::control::kMaxRequestBytes);
        !too_big.empty()) {
      std::cerr << too_big << "\n"
                << "elasticctl: the job spec is invalid; nothing was submitted\n";
      return elastic::ctl::kExitDataError;
    }
    if (dry_run) {
      std::cout << dump(spec_json) << "\n";
      return 0;
    }
    json reply;
    const int code = ask_or_report(socket, submit_request, kLeaderTimeout, reply);
    if (code != 0) return code;
    const std::string id = str(member(reply, "job"), "id");
    if (as_json && !wait) {
      std::cout << dump(reply) << "\n";
      return 0;
    }
    (as_json ? std::cerr : std::cout)
        << "submitted " << id << (flag(reply, "duplicate") ? " (already submitted)" : "")
        << std::endl;
    return wait ? wait_for_job(socket, id, as_json) : 0;
  }
  if (keygen_cmd->parsed()) {
    if (key_name.empty()) key_name = loaded->config.node.name;
    if (key_name.empty()) key_name = host_name();
    if (!client_user.empty()) return keygen_command(key_dir, client_user, /*client=*/true);
    return keygen_command(key_dir, key_name, /*client=*/false);
  }
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
