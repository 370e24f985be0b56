// elasticd: the per-host daemon. It loads and validates the configuration, then runs the node
// (daemon/node/node.h): transport, SWIM membership and the local control socket. Consensus,
// rendezvous and the spawner arrive with later issues.
//
// Exit codes (sysexits.h): 0 ok (also after SIGTERM/SIGINT: a graceful leave), 64 bad command
// line, 69 the node cannot run (bind failed, another daemon owns the control socket), 73 the
// state directory or log file cannot be created, 78 bad configuration (systemd:
// RestartPreventExitStatus=78).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/node/logging.h"
#include "daemon/node/node.h"
#include "elastic/version.h"

namespace {

namespace cfg = elastic::config;

int run(int argc, char** argv) {
  CLI::App app{
      "elasticd: the elastic training daemon; one runs on every GPU host.\n"
      "Settings come from built-in defaults, then the config file, then --set.",
      "elasticd"};
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

  if (check_config) {
    std::cout << "config OK (" << loaded->source << ")\n";
    return 0;
  }
  if (print_config) {
    std::cout << cfg::to_toml(loaded->config);
    return 0;
  }
  spdlog::info("elasticd {} starting ({})", elastic::kVersion, loaded->source);
  elastic::node::StartFailure failure;
  std::unique_ptr<elastic::node::Node> node = elastic::node::Node::start(loaded->config, failure);
  if (!node) {
    if (!loaded->config.logging.file.empty()) spdlog::error("{}", failure.message);
    std::cerr << "elasticd: " << failure.message << "; exiting with status " << failure.exit_code
              << "\n";
    return failure.exit_code;
  }
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
