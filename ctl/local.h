// elasticctl's verbs that need no daemon: `config` prints the effective configuration (TOML, or
// JSON with --json); `keygen` writes a CURVE key pair, a node's (DIR/NAME.key and .pub) or with
// --client a remote control user's. Both use the configuration itself, so ctl/main.cc stops on a
// broken config file (78) before running them, where the verbs that talk to a daemon warn and go
// on. Exit codes: 0; 69 no key pair could be made; 73 key files cannot be written.
// The object binds its options to its own members: keep it in place from add_* to run().
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "daemon/config/config.h"

namespace elastic::ctl {

class LocalVerbs {
 public:
  // Each adds one verb to `app` (ctl/main.cc calls them in --help's order).
  void add_config(CLI::App& app);
  void add_keygen(CLI::App& app);

  // Whether the command line named one of these verbs.
  bool parsed() const;
  // Runs it with the loaded configuration (read from `config_path`, with --set and
  // ELASTIC_CONTROL_SOCKET applied); returns the exit code.
  int run(const config::LoadedConfig& loaded, const std::string& config_path) const;

 private:
  CLI::App* config_ = nullptr;
  bool as_json_ = false;

  CLI::App* keygen_ = nullptr;
  std::string key_dir_;
  std::string key_name_;     // default: node.name, else the hostname
  std::string client_user_;  // --client: a remote control client's key pair instead
};

}  // namespace elastic::ctl
