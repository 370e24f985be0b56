#include "ctl/local.h"

#include "ctl/common.h"

namespace elastic::ctl {
namespace {

// Writes a CURVE key pair (a node's, or with `client` a remote-control user's).
int keygen_command(const std::string& dir, const std::string& name, bool client) {
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
  if (client) {
    std::cout << "wrote " << dir << "/" << name << ".key (your secret key for elasticctl "
              << "--client-key, mode 0600) and " << dir << "/" << name << ".pub (an admin "
              << "copies it into the daemon's control.client_keys_dir as " << name
              << ".pub; the file name is the user the key acts as)\n";
    return 0;
  }
  std::cout << "wrote " << dir << "/" << name << ".key (secret, mode 0600) and " << dir << "/"
            << name << ".pub (public: copy it into every node's transport.public_keys_dir)\n";
  return 0;
}

}  // namespace

void LocalVerbs::add_config(CLI::App& app) {
  config_ =
      app.add_subcommand("config", "Print the effective configuration (TOML, or JSON with --json)");
  config_->add_flag("--json", as_json_, "Print JSON instead of TOML");
}

void LocalVerbs::add_keygen(CLI::App& app) {
  keygen_ = app.add_subcommand(
      "keygen", "Write a node's CURVE key pair: DIR/NAME.key (secret) and DIR/NAME.pub");
  keygen_->add_option("--dir", key_dir_, "Directory for the key files (created)")->required();
  CLI::Option* key_name_opt =
      keygen_->add_option("--name", key_name_, "Node name (default: node.name, else the hostname)");
  keygen_
      ->add_option("--client", client_user_,
                   "Write a remote control client key pair for this user instead "
                   "(DIR/USER.key for --client-key, DIR/USER.pub for control.client_keys_dir)")
      ->excludes(key_name_opt);
}

bool LocalVerbs::parsed() const { return config_->parsed() || keygen_->parsed(); }

int LocalVerbs::run(const cfg::LoadedConfig& loaded, const std::string& config_path) const {
  if (config_->parsed()) {
    if (loaded.file_missing) {
      std::cerr << "elasticctl: " << config_path << " not found; showing built-in defaults\n";
    }
    std::cout << (as_json_ ? cfg::to_json(loaded.config) : cfg::to_toml(loaded.config));
    return 0;
  }
  if (!client_user_.empty()) return keygen_command(key_dir_, client_user_, /*client=*/true);
  std::string name = key_name_;
  if (name.empty()) name = loaded.config.node.name;
  if (name.empty()) name = host_name();
  return keygen_command(key_dir_, name, /*client=*/false);
}

}  // namespace elastic::ctl
