// elasticctl's cluster verbs: `nodes` (the member table the local daemon knows), `nodes
// --topology` (this host's binding plan), `voters` (the Raft voters) and, for root and
// control.admin_group only, `voters add|remove NODE` (one change at a time), `drain NODE
// [--reason T]` / `undrain NODE` (stop / resume placing new rounds on a node) and `reload` (the
// local daemon re-reads its config file and says how it went; 78 when it refused the file).
// voters, drain and undrain go through the Raft leader. Each prints a table or one line, or the
// daemon's JSON with --json, and returns the exit code (ctl/main.cc lists them). The object
// binds its options to its own members: keep it in place from add_* to run().
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace elastic::ctl {

class ClusterVerbs {
 public:
  // Each adds its verbs to `app` (ctl/main.cc calls them in --help's order); add_drain adds
  // drain and undrain.
  void add_nodes(CLI::App& app);
  void add_drain(CLI::App& app);
  void add_voters(CLI::App& app);
  void add_reload(CLI::App& app);

  // Whether the command line named one of these verbs.
  bool parsed() const;
  // Runs it against the daemon at `socket` (unused with --connect: common.h's remote_daemon).
  int run(const std::string& socket) const;

 private:
  int run_drain(const std::string& socket) const;
  int run_voters(const std::string& socket) const;
  int run_reload(const std::string& socket) const;

  CLI::App* nodes_ = nullptr;
  bool topology_ = false;  // nodes --topology

  CLI::App* drain_ = nullptr;
  CLI::App* undrain_ = nullptr;
  std::string node_;  // drain NODE, undrain NODE
  std::string drain_reason_;

  CLI::App* voters_ = nullptr;
  std::string voter_action_;  // "", add or remove
  std::string voter_node_;

  CLI::App* reload_ = nullptr;
  bool as_json_ = false;
};

}  // namespace elastic::ctl
