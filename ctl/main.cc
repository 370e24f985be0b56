// elasticctl: the command-line client of elasticd.
//   config [--json]              the effective configuration (no daemon needed)
//   nodes [--json]               the local daemon's member table, over the control socket
//   status [--json]              the local daemon's identity and member counts
//   keygen --dir DIR [--name N]  a node's CURVE key pair: DIR/N.key (0600) and DIR/N.pub
//   submit [flags] -- CMD...     submit a job (forwarded to the Raft leader; prints its id)
//   jobs [--json]                every job the leader knows
//   status JOB [--json]          one job: state, round, ranks, recent events
//   cancel JOB                   cancel a job (its owner, root or control.admin_group)
//   voters [add|remove NODE]     the current Raft voters; add or remove one (admins only)
// The daemon is found at control.socket from the same config file and --set overrides the
// daemon uses. Human tables by default; --json prints the daemon's reply for scripts.
//
// Exit codes (sysexits.h): 0 ok, 64 bad command line, 69 no daemon answers at the control
// socket, 73 key files cannot be written, 78 bad configuration, 1 the daemon refused the request
// (its sentence is printed: a bad job spec, not permitted, unknown job, no leader).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/config/config.h"
#include "daemon/control/client.h"
#include "daemon/control/protocol.h"
#include "daemon/transport/curve_keys.h"
#include "elastic/version.h"

namespace {

namespace cfg = elastic::config;

constexpr const char* kCommands = "cancel, config, jobs, keygen, nodes, status, submit, voters";
constexpr int kExitCantCreate = 73;  // EX_CANTCREAT
constexpr std::chrono::seconds kCallTimeout{5};
// Job verbs may wait for a leader election and a commit (the daemon gives up after 10 s).
constexpr std::chrono::seconds kLeaderCallTimeout{15};
constexpr int kExitRefused = 1;

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
      elastic::control::call(socket, elastic::control::Request{.verb = verb, .text = ""},
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
  const elastic::control::ConsensusInfo& raft = status->consensus;
  std::string voters;
  for (const std::string& voter : raft.voters) voters += (voters.empty() ? "" : ",") + voter;
  std::cout << "leader:     " << (raft.leader.empty() ? "unknown" : raft.leader) << "\n";
  if (raft.voter) {
    std::cout << "raft:       " << raft.role << ", term " << raft.term << ", commit "
              << raft.commit_index << " of " << raft.last_index << ", voters " << voters << "\n";
  } else {
    std::cout << "raft:       not a voter (voters " << voters << ")\n";
  }
  for (const auto& r : status->rounds) {
    std::cout << "round:      job " << r.job << " round " << r.round << " (term " << r.term
              << "): ranks " << r.first_rank << ".." << r.first_rank + r.slots - 1 << " of "
              << r.world << ", store " << r.store_endpoint << (r.fenced ? ", FENCED" : "")
              << "; job tier: " << r.suspicions << " suspicions (" << r.suspicions_cleared
              << " cleared), " << r.declared << " lost\n";
  }
  return 0;
}

// Sends a job verb with its arguments; prints the daemon's refusal and returns its exit code.
int ask_leader(const std::string& socket, const nlohmann::json& request, nlohmann::json& reply) {
  auto answer = elastic::control::call(
      socket, elastic::control::Request{.verb = request["verb"], .text = request.dump()},
      std::chrono::duration_cast<std::chrono::milliseconds>(kLeaderCallTimeout));
  if (!answer.ok()) {
    std::cerr << "elasticctl: " << answer.error().message << "\n";
    return cfg::kExitUnavailable;
  }
  reply = nlohmann::json::parse(*answer, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object()) {
    std::cerr << "elasticctl: the daemon's reply is not a JSON object\n";
    return cfg::kExitUnavailable;
  }
  if (!reply.value("ok", false)) {
    std::cerr << "elasticctl: " << reply.value("error", std::string("the request failed")) << "\n";
    return kExitRefused;
  }
  return 0;
}

std::string field(const nlohmann::json& object, const char* key) {
  const auto found = object.find(key);
  if (found == object.end() || found->is_null()) return "-";
  return found->is_string() ? found->get<std::string>() : found->dump();
}

// "2026-11-26 04:51:43.120Z" from milliseconds since the epoch.
std::string utc_time(std::int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm parts{};
  ::gmtime_r(&seconds, &parts);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &parts);
  std::snprintf(text + n, sizeof(text) - n, ".%03dZ", static_cast<int>(ms % 1000));
  return text;
}

int jobs_command(const std::string& socket, bool json) {
  nlohmann::json reply;
  if (const int code = ask_leader(socket, {{"verb", "jobs"}}, reply); code != 0) return code;
  if (json) {
    std::cout << reply.dump(2) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "STATE", "ROUND", "NODES", "WORLD", "RESTARTS", "USER", "REASON"}};
  for (const auto& job : reply.value("jobs", nlohmann::json::array())) {
    const auto ranks = job.value("ranks", nlohmann::json::array());
    std::uint64_t world = 0;
    for (const auto& r : ranks) world += r.value("slots", 0U);
    const auto spec = job.value("spec", nlohmann::json::object());
    rows.push_back({field(job, "id"), field(job, "state"), field(job, "round"),
                    std::to_string(ranks.size()), std::to_string(world), field(job, "restarts"),
                    field(spec, "user"), field(job, "reason")});
  }
  print_table(rows);
  return 0;
}

int job_status_command(const std::string& socket, const std::string& id, bool json) {
  nlohmann::json reply;
  if (const int code = ask_leader(socket, {{"verb", "job"}, {"job", id}}, reply); code != 0) {
    return code;
  }
  const auto job = reply.value("job", nlohmann::json::object());
  if (json) {
    std::cout << job.dump(2) << "\n";
    return 0;
  }
  std::cout << "job:      " << field(job, "id") << "\n"
            << "state:    " << field(job, "state") << " (" << field(job, "reason") << ")\n"
            << "round:    " << field(job, "round") << ", store "
            << (field(job, "store_endpoint").empty() ? "-" : field(job, "store_endpoint")) << "\n"
            << "restarts: " << field(job, "restarts") << "\n";
  std::vector<std::vector<std::string>> rows = {{"NODE", "GENERATION", "SLOTS", "FIRST-RANK"}};
  for (const auto& r : job.value("ranks", nlohmann::json::array())) {
    rows.push_back(
        {field(r, "node"), field(r, "generation"), field(r, "slots"), field(r, "first_rank")});
  }
  if (rows.size() > 1) print_table(rows);
  for (const auto& event : job.value("events", nlohmann::json::array())) {
    std::cout << "  " << utc_time(event.value("at_ms", std::int64_t{0})) << "  round "
              << field(event, "round") << "  " << field(event, "from") << " -> "
              << field(event, "to") << "  " << field(event, "reason") << "\n";
  }
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

  CLI::App* submit_cmd = app.add_subcommand(
      "submit", "Submit a job: elasticctl submit --name N --nodes MIN:MAX -- COMMAND ARGS...");
  std::string job_name;
  std::string node_range = "1";
  std::uint32_t workers_per_node = 0;
  std::uint32_t max_restarts = 3;
  std::string restart_backoff;
  std::string last_call;
  std::string checkpoint_root;
  std::string working_dir;
  std::vector<std::string> env_pairs;
  std::vector<std::string> job_command;
  submit_cmd->add_option("--name", job_name, "Job name ([A-Za-z0-9._-], at most 64)")->required();
  submit_cmd->add_option("--nodes", node_range, "MIN:MAX nodes (or N for exactly N)")
      ->capture_default_str();
  submit_cmd
      ->add_option("--gpus-per-node,--workers-per-node", workers_per_node,
                   "Workers per node; 0 = one per GPU (or CPU slot)")
      ->capture_default_str();
  submit_cmd->add_option("--max-restarts", max_restarts, "Worker failures tolerated")
      ->capture_default_str();
  submit_cmd->add_option("--restart-backoff", restart_backoff, "Pause after a worker failure");
  submit_cmd->add_option("--last-call", last_call, "Wait this long for more nodes past MIN");
  submit_cmd->add_option("--checkpoint-root", checkpoint_root, "Shared checkpoint directory");
  submit_cmd->add_option("--workdir", working_dir, "Workers' working directory");
  submit_cmd->add_option("--env", env_pairs, "NAME=VALUE for the workers (repeatable)");
  submit_cmd->add_option("command", job_command, "The worker command (after --)")->required();
  submit_cmd->add_flag("--json", json, "Print the daemon's JSON reply");

  CLI::App* jobs_cmd = app.add_subcommand("jobs", "List the jobs the leader knows");
  jobs_cmd->add_flag("--json", json, "Print the daemon's JSON reply");
  std::string job_id;
  status_cmd->add_option("job", job_id, "Show this job instead of the daemon");
  CLI::App* cancel_cmd = app.add_subcommand("cancel", "Cancel a job");
  cancel_cmd->add_option("job", job_id, "The job id (elasticctl jobs)")->required();

  CLI::App* voters_cmd = app.add_subcommand(
      "voters", "Show the Raft voters, or change them one at a time: voters add|remove NODE");
  std::string voter_action;
  std::string voter_node;
  voters_cmd->add_option("action", voter_action, "add or remove")
      ->check(CLI::IsMember({"add", "remove"}));
  voters_cmd->add_option("node", voter_node, "The daemon's node name");
  voters_cmd->add_flag("--json", json, "Print the daemon's JSON reply");

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
  const std::string& socket = loaded->config.control.socket;
  if (nodes_cmd->parsed()) return nodes_command(socket, json);
  if (status_cmd->parsed()) {
    return job_id.empty() ? status_command(socket, json) : job_status_command(socket, job_id, json);
  }
  if (jobs_cmd->parsed()) return jobs_command(socket, json);
  if (voters_cmd->parsed()) {
    if (!voter_action.empty() && voter_node.empty()) {
      std::cerr << "elasticctl: voters " << voter_action << " needs a NODE name\n";
      return cfg::kExitUsage;
    }
    nlohmann::json request{{"verb", "voters"}};
    if (!voter_action.empty()) {
      request["action"] = voter_action;
      request["node"] = voter_node;
    }
    nlohmann::json reply;
    if (const int code = ask_leader(socket, request, reply); code != 0) return code;
    if (json) {
      std::cout << reply.dump(2) << "\n";
      return 0;
    }
    std::string voters;
    for (const auto& v : reply.value("voters", nlohmann::json::array())) {
      voters += (voters.empty() ? "" : " ") + v.get<std::string>();
    }
    std::cout << "voters: " << voters << "\n";
    return 0;
  }
  if (cancel_cmd->parsed()) {
    nlohmann::json reply;
    const int code = ask_leader(socket, {{"verb", "cancel"}, {"job", job_id}}, reply);
    if (code == 0) std::cout << "cancelled " << job_id << "\n";
    return code;
  }
  if (submit_cmd->parsed()) {
    nlohmann::json spec{{"name", job_name},
                        {"command", job_command},
                        {"workers_per_node", workers_per_node},
                        {"max_restarts", max_restarts}};
    const auto colon = node_range.find(':');
    try {
      const std::string low = node_range.substr(0, colon);
      const std::string high = colon == std::string::npos ? low : node_range.substr(colon + 1);
      std::size_t used_low = 0, used_high = 0;
      const unsigned long min_nodes = std::stoul(low, &used_low);
      const unsigned long max_nodes = std::stoul(high, &used_high);
      if (used_low != low.size() || used_high != high.size()) throw std::invalid_argument("");
      spec["min_nodes"] = min_nodes;
      spec["max_nodes"] = max_nodes;
    } catch (const std::exception&) {
      std::cerr << "elasticctl: --nodes: expected MIN:MAX or N, got \"" << node_range << "\"\n";
      return cfg::kExitUsage;
    }
    nlohmann::json env = nlohmann::json::object();
    for (const std::string& pair : env_pairs) {
      const auto eq = pair.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::cerr << "elasticctl: --env: expected NAME=VALUE, got \"" << pair << "\"\n";
        return cfg::kExitUsage;
      }
      env[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    spec["env"] = env;
    if (!restart_backoff.empty()) spec["restart_backoff"] = restart_backoff;
    if (!last_call.empty()) spec["last_call"] = last_call;
    if (!checkpoint_root.empty()) spec["checkpoint_root"] = checkpoint_root;
    if (!working_dir.empty()) spec["working_dir"] = working_dir;
    nlohmann::json reply;
    const int code = ask_leader(socket, {{"verb", "submit"}, {"spec", spec}}, reply);
    if (code != 0) return code;
    if (json) {
      std::cout << reply.dump(2) << "\n";
    } else {
      std::cout << "submitted " << field(reply.value("job", nlohmann::json::object()), "id")
                << "\n";
    }
    return 0;
  }
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
