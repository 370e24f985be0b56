// elasticd: the per-host daemon. It loads and validates the configuration, then runs the node
// (daemon/node/node.h): transport, SWIM membership, Raft, rendezvous, the job supervisor and
// the local control socket. SIGHUP re-reads the same file with the same --set overrides (the
// reload function handed to the Node); SIGTERM drains.
//
// Exit codes (sysexits.h, listed in --help): 0 ok (also after SIGTERM/SIGINT: a drain and a
// graceful leave), 64 bad command line, 69 the node cannot run (bind failed, another daemon owns
// the control socket), 73 the state directory or log file cannot be created, 74 the Raft log
// cannot be written or is damaged, 78 bad configuration (systemd: RestartPreventExitStatus=78).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/node/logging.h"
#include "daemon/node/node.h"
#include "daemon/spawner/cgroup_root.h"
#include "elastic/version.h"

namespace {

namespace cfg = elastic::config;

// The rest of the man page: what --help prints after the options.
constexpr const char* kManual = R"(FILES
  /etc/elastic/elasticd.toml   the configuration (every key, its default and why: the
                               annotated copy installed by make install)
  /var/lib/elastic             node.state_dir: generation, Raft log (raft/), worker logs (logs/)
  /run/elastic/elasticd.sock   control.socket: elasticctl's way in (peer credentials checked)
  /etc/elastic/node.key        transport.secret_key_file: this node's CURVE secret key (0600;
                               make install creates it)
  /etc/elastic/nodes/          transport.public_keys_dir: <node name>.pub of every node allowed
                               to speak to this one (a node key may act for any user)
  <prefix>/lib/systemd/system/elasticd.service, <prefix>/libexec/elastic/slurm/

SIGNALS
  SIGTERM  drain: take no new rounds, tell the leader this node leaves (its jobs shrink without
           a restart being counted), SIGTERM the workers (elastic-trainer checkpoints and exits
           75), SIGKILL what is left after spawner.stop_grace, leave the cluster, exit 0. The
           daemon keeps answering peers and elasticctl meanwhile.
  SIGINT   the same as SIGTERM. A second SIGTERM or SIGINT during the drain kills the workers
           at once.
  SIGHUP   reload: re-read the same config file with the same --set overrides. An invalid
           config changes nothing (one error line names the key; elasticctl status shows it);
           a valid one applies logging.level and control.admin_group at once and logs every
           other changed key as taking effect after a restart. `elasticctl reload` (the
           unit's ExecReload) does the same and waits for the result: it exits 78 when the
           file is refused, so `systemctl reload elasticd` fails too.

EXIT STATUS
  0   stopped by SIGTERM/SIGINT after a drain, or --check-config/--print-config succeeded
  64  bad command line (EX_USAGE)
  69  the node cannot run: transport.bind failed, another daemon owns control.socket, no
      topology (EX_UNAVAILABLE)
  70  internal error (EX_SOFTWARE)
  73  node.state_dir, the control socket or logging.file cannot be created (EX_CANTCREAT)
  74  the Raft log cannot be written, or is damaged or cut short: the sentence names the
      file, byte offset and record, and how to rebuild the voter from its peers (EX_IOERR)
  78  invalid configuration: one line per problem, naming the file:line and key, also a
      spawner.cgroup_root this host's cgroup layout does not have (EX_CONFIG; the systemd
      unit does not restart on it)

ENVIRONMENT
  NOTIFY_SOCKET  set by systemd for Type=notify: READY=1 once the config is valid, the sockets
                 are bound and the node joined a seed (at once without seeds); STATUS= lines;
                 RELOADING=1/READY=1 around a reload; STOPPING=1 on SIGTERM. Unset: no-op.
  WATCHDOG_USEC  set by systemd's WatchdogSec=: WATCHDOG=1 is sent every half of it.

SEE ALSO
  elasticctl --help, systemd/README.md, slurm/README.md)";

// Where a key's value came from, for errors found after load_config: the last --set of it, or
// the file (the line is not known here).
std::string source_of(const std::string& key, const std::string& file,
                      const std::vector<std::string>& overrides) {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    if (it->rfind(key + "=", 0) == 0) return "--set " + *it;
  }
  return file.empty() ? std::string("built-in defaults") : file;
}

// Every peer connection, control client and worker pipe is an fd, and outside systemd (whose
// unit sets LimitNOFILE) the soft limit is usually 1,024: a busy leader, or a flood of
// connects, would hit it and fail accepts. The soft limit may be raised to the hard one without
// privileges; capped so a huge hard limit does not make fd tables of workers huge.
constexpr rlim_t kWantedOpenFiles = rlim_t{1} << 20;
// Below this the daemon says how to give it more.
constexpr rlim_t kLowOpenFiles = 8192;

void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("cannot read the open file limit: {}", std::strerror(errno));
    return;
  }
  const rlim_t before = limit.rlim_cur;
  const rlim_t wanted = std::min(limit.rlim_max, kWantedOpenFiles);
  if (before < wanted) {
    limit.rlim_cur = wanted;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      spdlog::warn("cannot raise the open file limit from {} to {}: {}", before, wanted,
                   std::strerror(errno));
      limit.rlim_cur = before;
    } else {
      spdlog::info("open file limit raised from {} to {} (hard limit {})", before, wanted,
                   limit.rlim_max);
    }
  } else {
    spdlog::info("open file limit {} (hard limit {})", before, limit.rlim_max);
  }
  if (limit.rlim_cur < kLowOpenFiles) {
    spdlog::warn(
        "the open file limit is only {}: raise the hard limit (LimitNOFILE= in the unit, or "
        "ulimit -Hn before starting) so many peers and clients do not exhaust it",
        limit.rlim_cur);
  }
}

int run(int argc, char** argv) {
  CLI::App app{
      "elasticd - the elastic training daemon; one runs on every GPU host.\n\n"
      "The daemons find each other through membership.seeds (SWIM gossip over ZeroMQ), elect a\n"
      "leader among consensus.voters (Raft), run each job's rendezvous and start one worker per\n"
      "local GPU as the submitting user. elasticctl talks to the local daemon through\n"
      "control.socket. Settings come from built-in defaults, then the config file, then --set.\n",
      "elasticd"};
  app.footer(kManual);
  app.set_version_flag("--version", std::string("elasticd ") + elastic::kVersion);
  std::string config_path = cfg::kDefaultConfigPath;
  CLI::Option* config_option =
      app.add_option("-c,--config", config_path,
                     "TOML config file; a missing default file means built-in defaults, a "
                     "missing explicit one is an error; '' for none")
          ->capture_default_str();
  std::vector<std::string> overrides;
  app.add_option("--set", overrides,
                 "Override one setting, e.g. --set membership.seeds='[\"n1:7946\"]' (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  bool check_config = false;
  bool print_config = false;
  CLI::Option* check_option = app.add_flag(
      "--check-config", check_config, "Validate the configuration, print 'config OK' and exit");
  app.add_flag("--print-config", print_config, "Print the effective configuration as TOML and exit")
      ->excludes(check_option);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::cerr << "elasticd: " << e.what() << "\nRun 'elasticd --help' for usage.\n";
    return cfg::kExitUsage;
  }

  // Logs go to stderr: stdout carries --print-config output.
  auto logger = spdlog::stderr_color_mt("elasticd");
  spdlog::set_default_logger(logger);

  const bool explicit_file = config_option->count() > 0;
  auto loaded = cfg::load_config(cfg::LoadOptions{
      .file = config_path, .file_must_exist = explicit_file, .overrides = overrides});
  if (!loaded.ok()) {
    std::cerr << loaded.error().message << "\n"
              << "elasticd: invalid configuration; exiting with status " << cfg::kExitConfig
              << " (EX_CONFIG)\n";
    return cfg::kExitConfig;
  }
  // --check-config and --print-config always log to stderr; a node logs where logging.file says.
  cfg::LoggingConfig logging = loaded->config.logging;
  if (check_config || print_config) logging.file = "";
  if (const elastic::Status set_up = elastic::node::setup_logging(logging); !set_up.ok()) {
    std::cerr << "elasticd: " << set_up.error().message << "\n";
    return elastic::node::kExitCantCreate;
  }
  if (loaded->file_missing) {
    spdlog::info("config file {} not found; using built-in defaults", config_path);
  }

  if (print_config) {
    std::cout << cfg::to_toml(loaded->config);
    return 0;
  }
  // spawner.cgroup_root depends on the host's cgroup layout, which load_config cannot see. A
  // wrong one is a configuration error found here, before anything starts: exit 78, which the
  // unit does not restart, rather than a spawner that fails with 69 every RestartSec.
  const std::string& cgroup_root = loaded->config.spawner.cgroup_root;
  const elastic::spawner::CgroupLayout layout = elastic::spawner::this_process_cgroup_layout();
  const auto cgroup = check_config ? elastic::spawner::check_cgroup_root(cgroup_root, layout)
                                   : elastic::spawner::resolve_cgroup_root(cgroup_root, layout);
  if (!cgroup.ok()) {
    std::cerr << source_of("spawner.cgroup_root", config_path, overrides)
              << ": spawner.cgroup_root: " << cgroup.error().message << "\n"
              << "elasticd: invalid configuration; exiting with status " << cfg::kExitConfig
              << " (EX_CONFIG)\n";
    return cfg::kExitConfig;
  }
  if (check_config) {
    std::cout << "config OK (" << loaded->source << ")\n";
    if (!cgroup_root.empty()) std::cout << "spawner.cgroup_root: " << *cgroup << "\n";
    return 0;
  }
  spdlog::info("elasticd {} starting ({})", elastic::kVersion, loaded->source);
  raise_open_file_limit();
  elastic::node::StartFailure failure;
  std::unique_ptr<elastic::node::Node> node = elastic::node::Node::start(loaded->config, failure);
  if (!node) {
    if (!loaded->config.logging.file.empty()) spdlog::error("{}", failure.message);
    std::cerr << "elasticd: " << failure.message << "; exiting with status " << failure.exit_code
              << "\n";
    return failure.exit_code;
  }
  // SIGHUP: the same file and overrides again. A default path that has gone missing means the
  // built-in defaults, exactly as at start.
  node->set_reload(
      [config_path, explicit_file, overrides] {
        return cfg::load_config(cfg::LoadOptions{
            .file = config_path, .file_must_exist = explicit_file, .overrides = overrides});
      },
      loaded->source);
  return node->run();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    // CLI11, spdlog setup and allocation failures can throw; report instead of terminating.
    std::cerr << "elasticd: " << e.what() << "\n";
    return 70;  // EX_SOFTWARE
  }
}
