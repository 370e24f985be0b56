// elasticctl: the command-line client of elasticd.
//   config [--json]              the effective configuration (no daemon needed)
//   nodes [--json]               the local daemon's member table, over the control socket
//   status [--json]              the local daemon's identity and member counts
//   keygen --dir DIR [--name N]  a node's CURVE key pair: DIR/N.key (0600) and DIR/N.pub
// The daemon is found at control.socket from the same config file and --set overrides the
// daemon uses. Human tables by default; --json prints the daemon's reply for scripts.
//
// Exit codes (sysexits.h): 0 ok, 64 bad command line, 69 no daemon answers at the control
// socket, 73 key files cannot be written, 78 bad configuration.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/control/client.h"
#include "daemon/control/protocol.h"
#include "daemon/transport/curve_keys.h"
#include "elastic/version.h"

namespace {

namespace cfg = elastic::config;

constexpr const char* kCommands = "config, keygen, nodes, status";
constexpr int kExitCantCreate = 73;  // EX_CANTCREAT
constexpr std::chrono::seconds kCallTimeout{5};

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// "1.2s", "250ms", "-" (never heard), for the LAST-HEARD column.
std::string ago(double ms) {
  if (ms < 0) return "-";
  char text[32];
  if (ms < 1000) {
    std::snprintf(text, sizeof(text), "%.0fms", ms);
  } else {
    std::snprintf(text, sizeof(text), "%.1fs", ms / 1000);
  }
  return text;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

// Asks the daemon; on failure prints why and returns nullopt-like empty with exit 69.
bool ask_daemon(const std::string& socket, const std::string& verb, std::string& reply) {
  auto answer =
      elastic::control::call(socket, elastic::control::Request{.verb = verb},
                             std::chrono::duration_cast<std::chrono::milliseconds>(kCallTimeout));
  if (!answer.ok()) {
    std::cerr << "elasticctl: " << answer.error().message << "\n";
    return false;
  }
  reply = std::move(answer.value());
  return true;
}

int nodes_command(const std::string& socket, bool json) {
  std::string reply;
  if (!ask_daemon(socket, "nodes", reply)) return cfg::kExitUnavailable;
  auto nodes = elastic::control::decode_nodes_reply(reply);
  if (!nodes.ok()) {
    std::cerr << "elasticctl: " << nodes.error().message << "\n";
    return cfg::kExitUnavailable;
  }
  if (json) {
    std::cout << elastic::control::pretty_json(reply);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "STATE", "INCARNATION", "GENERATION", "ADDRESS", "LAST-HEARD"}};
  for (const auto& member : nodes->members) {
    const bool self = member.name == nodes->self.name;
    rows.push_back({member.name + (self ? " (self)" : ""), member.state,
                    std::to_string(member.incarnation), std::to_string(member.generation),
                    member.address, self ? "-" : ago(member.last_heard_ms_ago)});
  }
  print_table(rows);
  return 0;
}

int status_command(const std::string& socket, bool json) {
  std::string reply;
  if (!ask_daemon(socket, "status", reply)) return cfg::kExitUnavailable;
  auto status = elastic::control::decode_status_reply(reply);
  if (!status.ok()) {
    std::cerr << "elasticctl: " << status.error().message << "\n";
    return cfg::kExitUnavailable;
  }
  if (json) {
    std::cout << elastic::control::pretty_json(reply);
    return 0;
  }
  std::cout << "name:       " << status->self.name << "\n"
            << "generation: " << status->self.generation << "\n"
            << "address:    " << status->self.address << "\n"
            << "cluster:    " << status->self.cluster_id << "\n"
            << "uptime:     " << ago(status->self.uptime_s * 1000) << "\n"
            << "members:    " << status->alive << " alive, " << status->suspect << " suspect, "
            << status->dead << " dead, " << status->left << " left\n";
  return 0;
}

int keygen_command(const std::string& dir, const std::string& name) {
  auto keys = elastic::transport::generate_curve_keypair();
  if (!keys.ok()) {
    std::cerr << "elasticctl: " << keys.error().message << "\n";
    return cfg::kExitUnavailable;
  }
  const elastic::Status written = elastic::transport::write_curve_keypair(dir, name, *keys);
  if (!written.ok()) {
    std::cerr << "elasticctl: " << written.error().message << "\n";
    return kExitCantCreate;
  }
  std::cout << "wrote " << dir << "/" << name << ".key (secret, mode 0600) and " << dir << "/"
            << name << ".pub (public: copy it into every node's transport.public_keys_dir)\n";
  return 0;
}

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

  CLI::App* nodes_cmd = app.add_subcommand(
      "nodes",
      "Show every member the local daemon knows: state, incarnation, generation, "
      "address, last heard");
  nodes_cmd->add_flag("--json", json, "Print the daemon's JSON reply");
  CLI::App* status_cmd =
      app.add_subcommand("status", "Show the local daemon's identity and member counts");
  status_cmd->add_flag("--json", json, "Print the daemon's JSON reply");

  CLI::App* keygen_cmd = app.add_subcommand(
      "keygen", "Write a node's CURVE key pair: DIR/NAME.key (secret) and DIR/NAME.pub");
  std::string key_dir;
  std::string key_name;
  keygen_cmd->add_option("--dir", key_dir, "Directory for the key files (created)")->required();
  keygen_cmd->add_option("--name", key_name, "Node name (default: node.name, else the hostname)");

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
  if (nodes_cmd->parsed()) return nodes_command(loaded->config.control.socket, json);
  if (status_cmd->parsed()) return status_command(loaded->config.control.socket, json);
  if (keygen_cmd->parsed()) {
    if (key_name.empty()) key_name = loaded->config.node.name;
    if (key_name.empty()) key_name = host_name();
    return keygen_command(key_dir, key_name);
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
