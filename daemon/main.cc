// elasticd: the per-host daemon. This version loads and validates the configuration; the node
// runtime (transport, gossip membership, Raft, rendezvous, spawner) arrives with later issues,
// so a plain start says so and exits 69 instead of pretending to run.
//
// Exit codes (sysexits.h): 0 ok, 64 bad command line, 69 the node cannot run (yet), 78 bad
// configuration (systemd: RestartPreventExitStatus=78).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "elastic/version.h"

namespace {

namespace cfg = elastic::config;

spdlog::level::level_enum to_spdlog(cfg::LogLevel level) {
  switch (level) {
    case cfg::LogLevel::kTrace:
      return spdlog::level::trace;
    case cfg::LogLevel::kDebug:
      return spdlog::level::debug;
    case cfg::LogLevel::kInfo:
      return spdlog::level::info;
    case cfg::LogLevel::kWarn:
      return spdlog::level::warn;
    case cfg::LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

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
  spdlog::set_level(to_spdlog(loaded->config.logging.level));
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
  std::cerr << "elasticd: configuration OK (" << loaded->source
            << "), but this build cannot run a node yet: the node runtime (transport, "
               "membership, consensus, jobs) is not implemented. Only --check-config and "
               "--print-config work. Exiting with status "
            << cfg::kExitUnavailable << " (EX_UNAVAILABLE).\n";
  return cfg::kExitUnavailable;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    // Only CLI11 and spdlog setup can throw here; report instead of calling terminate.
    std::cerr << "elasticd: " << e.what() << "\n";
    return 70;  // EX_SOFTWARE
  }
}
