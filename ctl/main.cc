// elasticctl: the command-line client of elasticd. Today it has one verb, `config`, which
// prints the effective configuration; the verbs that talk to the daemon (submit, jobs, nodes,
// status, ...) arrive with the control API.
//
// Exit codes (sysexits.h): 0 ok, 64 bad command line, 78 bad configuration.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "elastic/version.h"

namespace {

namespace cfg = elastic::config;

constexpr const char* kCommands = "config";

int run(int argc, char** argv) {
  CLI::App app{"elasticctl: control the elastic training daemons.", "elasticctl"};
  app.set_version_flag("--version", std::string("elasticctl ") + elastic::kVersion);
  std::string config_path = cfg::kDefaultConfigPath;
  CLI::Option* config_option =
      app.add_option("-c,--config", config_path,
                     "elasticd's TOML config file (to find the daemon); '' for none")
          ->capture_default_str();
  std::vector<std::string> overrides;
  app.add_option("--set", overrides, "Override one setting (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false);
  app.fallthrough();  // -c and --set may also follow the command
  app.require_subcommand(1);

  CLI::App* config_command =
      app.add_subcommand("config", "Print the effective configuration (TOML, or JSON with --json)");
  bool json = false;
  config_command->add_flag("--json", json, "Print JSON instead of TOML");

  try {
    app.parse(argc, argv);
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

  auto loaded = cfg::load_config(cfg::LoadOptions{
      .file = config_path, .file_must_exist = config_option->count() > 0, .overrides = overrides});
  if (!loaded.ok()) {
    std::cerr << loaded.error().message << "\n"
              << "elasticctl: invalid configuration; exiting with status " << cfg::kExitConfig
              << " (EX_CONFIG)\n";
    return cfg::kExitConfig;
  }

  if (config_command->parsed()) {
    if (loaded->file_missing) {
      std::cerr << "elasticctl: " << config_path << " not found; showing built-in defaults\n";
    }
    std::cout << (json ? cfg::to_json(loaded->config) : cfg::to_toml(loaded->config));
    return 0;
  }
  return cfg::kExitUsage;  // unreachable: require_subcommand(1)
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "elasticctl: " << e.what() << "\n";
    return 70;  // EX_SOFTWARE
  }
}
