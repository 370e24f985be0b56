// An elasticd under test on 127.0.0.1 (integration tier), shared by the integration tests: its
// files live in <TempDir>/<name>/, it binds port 0 and its address comes from its readiness line,
// and elasticctl reads it over its control socket. With it, what several tests would otherwise
// repeat: elasticctl on a daemon (elasticctl_on, ctl_json), its views (members_of, sees,
// all_alive), a two-daemon cluster (DaemonPair) and an incident wait. Header-only test support;
// every wait polls with a deadline.
//
// CURVE is on, as in production: each Daemon gets its own key pair (`elasticctl keygen`) in
// <TempDir>/<name>/keys/ and publishes its .pub in the test's shared allow-list
// <TempDir>/public_keys/, so the daemons of one TempDir trust each other (one started earlier
// re-reads the list when it changes). A test may override with set(), e.g.
// set("transport.curve=false") for a plain daemon (loopback binds allow that). The dashboard
// listens on a free loopback port (dashboard.listen=127.0.0.1:0), not the default 8474.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {

inline constexpr auto kConverge = std::chrono::seconds(20);
inline constexpr auto kReady = std::chrono::seconds(10);
// The interpreter the Python tests run their jobs with: the system one, the same whoever runs
// the test and whichever user a worker runs as (a test skips when it is not installed).
inline constexpr const char* kPython = "/usr/bin/python3";

// Short SWIM timers so a test sees joins and deaths within seconds.
inline const std::vector<std::string> kFastMembership = {
    "membership.probe_interval=200ms",
    "membership.probe_timeout=50ms",
    "membership.gossip_interval=50ms",
    "membership.suspicion_multiplier=2",
    "membership.suspicion_max_multiplier=3",
    "membership.push_pull_interval=1s",
    "membership.reconnect_interval=1s",
    "membership.rejoin_interval=1s",
    "membership.gossip_to_dead=5s",
    "transport.heartbeat_interval=200ms",
    "transport.heartbeat_timeout=1s",
    "consensus.election_timeout=300ms",
    "consensus.heartbeat_interval=50ms",
    "rendezvous.lease_duration=1s",
    "rendezvous.last_call=1s",
};

// One elasticd under test: its files live in <dir>/<name>/.
class Daemon {
 public:
  Daemon(const TempDir& dir, std::string name, std::vector<std::string> seeds)
      : dir_(dir.file(name)),
        public_keys_dir_(dir.file("public_keys")),
        name_(std::move(name)),
        seeds_(std::move(seeds)) {
    std::filesystem::create_directories(dir_);
    make_keys();
  }

  // This daemon's CURVE secret key file, and the allow-list it trusts.
  std::string secret_key_file() const { return dir_ + "/keys/" + name_ + ".key"; }
  const std::string& public_keys_dir() const { return public_keys_dir_; }

  std::string socket() const { return dir_ + "/ctl.sock"; }
  const std::string& name() const { return name_; }

  std::vector<std::string> args() const {
    std::string seeds = "membership.seeds=[";
    for (std::size_t i = 0; i < seeds_.size(); ++i) {
      seeds += (i ? ",\"" : "\"") + seeds_[i] + "\"";
    }
    seeds += "]";
    std::vector<std::string> argv = {
        ELASTICD_PATH, "-c", "", "--set", "node.name=" + name_, "--set",
        "node.state_dir=" + dir_ + "/state", "--set", "control.socket=" + socket(), "--set",
        // A restart keeps its port, so seeds naming it stay valid.
        "transport.bind=" + (address_.empty() ? std::string("tcp://127.0.0.1:0") : address_),
        "--set", seeds, "--set", "logging.level=debug", "--set", voters_setting(), "--set",
        "transport.curve=true", "--set", "transport.secret_key_file=" + secret_key_file(), "--set",
        "transport.public_keys_dir=" + public_keys_dir_};
    for (const auto& setting : kFastMembership) {
      argv.push_back("--set");
      argv.push_back(setting);
    }
    // Many daemons share this host's loopback: each takes a free dashboard port, never 8474.
    argv.push_back("--set");
    argv.push_back("dashboard.listen=127.0.0.1:0");
    for (const auto& setting : settings_) {
      argv.push_back("--set");
      argv.push_back(setting);
    }
    return argv;
  }

  // Adds a "section.key=value" override for the next start().
  void set(std::string setting) { settings_.push_back(std::move(setting)); }
  // The cluster's Raft voters (the same list on every daemon); by default the daemon "n1", so
  // a test cluster seeded from n1 has one voter and any other daemon is not one.
  void set_voters(std::vector<std::string> voters) { voters_ = std::move(voters); }
  std::string voters_setting() const {
    std::string list;
    for (const auto& voter : voters_) list += (list.empty() ? "\"" : ",\"") + voter + "\"";
    return "consensus.voters=[" + list + "]";
  }

  // Starts (or restarts) the daemon and waits for its readiness line; returns its address.
  std::string start() {
    ++starts_;
    process_.reset();
    process_ = std::make_unique<Process>(args(), std::map<std::string, std::string>{}, dir_,
                                         name_ + "-" + std::to_string(starts_));
    const std::regex ready("elasticd ready: name=\\S+ generation=(\\d+) address=(\\S+) control=");
    std::smatch match;
    const bool up = wait_until(
        [&] {
          const std::string err = process_->err();
          if (!std::regex_search(err, match, ready)) return false;
          address_ = match[2];
          generation_ = std::stoull(match[1]);
          return true;
        },
        kReady);
    EXPECT_TRUE(up) << name_ << " never became ready:\n" << process_->err();
    return address_;
  }

  Process& process() { return *process_; }
  const std::string& address() const { return address_; }
  std::uint64_t generation() const { return generation_; }
  // "NAME@127.0.0.1:PORT" for other daemons' seed lists (CURVE needs the name).
  std::string seed() const { return named_seed(); }
  std::string named_seed() const { return name_ + "@" + address_.substr(std::strlen("tcp://")); }
  // The port of its transport, for raw TCP clients.
  int port() const { return std::stoi(address_.substr(address_.rfind(':') + 1)); }

 private:
  void make_keys() {
    const std::string keys = dir_ + "/keys";
    const RunResult r = run({ELASTICCTL_PATH, "-c", "", "keygen", "--dir", keys, "--name", name_},
                            {}, std::chrono::seconds(10));
    EXPECT_TRUE(r.status.exited_with(0)) << r.err;
    // Published by rename, so a daemon re-reading the list never sees half a file (.tmp files
    // are not .pub files, so the list ignores them).
    std::filesystem::create_directories(public_keys_dir_);
    std::filesystem::permissions(public_keys_dir_, std::filesystem::perms(0755));
    const std::string tmp = public_keys_dir_ + "/" + name_ + ".pub.tmp";
    std::filesystem::copy_file(keys + "/" + name_ + ".pub", tmp,
                               std::filesystem::copy_options::overwrite_existing);
    std::filesystem::rename(tmp, public_keys_dir_ + "/" + name_ + ".pub");
  }

  std::string dir_;
  std::string public_keys_dir_;
  std::string name_;
  std::vector<std::string> seeds_;
  std::vector<std::string> settings_;
  std::vector<std::string> voters_ = {"n1"};
  std::unique_ptr<Process> process_;
  std::string address_;
  std::uint64_t generation_ = 0;
  int starts_ = 0;
};

inline RunResult elasticctl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ELASTICCTL_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {}, std::chrono::seconds(10));
}

// elasticctl on `daemon`'s control socket with no config file, as root (uid < 0) or, through
// setpriv, as uid/gid with no supplementary groups (gid < 0: the uid's number).
inline RunResult elasticctl_on(const Daemon& daemon, const std::vector<std::string>& args,
                               int uid = -1, int gid = -1,
                               std::chrono::seconds timeout = std::chrono::seconds(30)) {
  std::vector<std::string> argv;
  if (uid >= 0) {
    argv = {"/usr/bin/setpriv", "--reuid=" + std::to_string(uid),
            "--regid=" + std::to_string(gid >= 0 ? gid : uid), "--clear-groups"};
  }
  argv.insert(argv.end(),
              {ELASTICCTL_PATH, "-c", "", "--set", "control.socket=" + daemon.socket()});
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {}, timeout);
}

// The JSON reply of `elasticctl ARGS` (ARGS asking for --json) on `daemon`, run as root through
// elasticctl_on; null when elasticctl failed or printed no JSON, so a poll simply tries again.
inline nlohmann::json ctl_json(const Daemon& daemon, const std::vector<std::string>& args) {
  const RunResult r = elasticctl_on(daemon, args);
  if (!r.status.exited_with(0)) return nullptr;
  const nlohmann::json reply = nlohmann::json::parse(r.out, nullptr, false);
  return reply.is_discarded() ? nlohmann::json(nullptr) : reply;
}

// Polls `elasticctl events JOB --json` on `daemon` until the job's first incident is complete;
// false after `timeout`. `incident` is the first incident last read (null before there is one),
// for the failure message and the test's checks.
inline bool wait_first_incident_complete(const Daemon& daemon, const std::string& job,
                                         nlohmann::json& incident,
                                         std::chrono::milliseconds timeout) {
  return wait_until(
      [&] {
        const nlohmann::json reply = ctl_json(daemon, {"events", job, "--json"});
        if (reply.is_null() || !reply["incidents"].is_array() || reply["incidents"].empty()) {
          return false;
        }
        incident = reply["incidents"][0];
        return incident["complete"] == true;
      },
      timeout);
}

struct MemberSeen {
  std::string state;
  std::uint64_t generation = 0;
  std::string address;
};

// name -> what `elasticctl nodes --json` on that daemon says; nullopt if it did not answer.
inline std::optional<std::map<std::string, MemberSeen>> members_of(const Daemon& daemon) {
  const RunResult r =
      elasticctl({"-c", "", "--set", "control.socket=" + daemon.socket(), "nodes", "--json"});
  if (!r.status.exited_with(0)) return std::nullopt;
  const auto reply = nlohmann::json::parse(r.out, nullptr, false);
  if (reply.is_discarded() || !reply.contains("members")) return std::nullopt;
  std::map<std::string, MemberSeen> members;
  for (const auto& member : reply["members"]) {
    members[member["name"].get<std::string>()] =
        MemberSeen{member["state"].get<std::string>(), member["generation"].get<std::uint64_t>(),
                   member["address"].get<std::string>()};
  }
  return members;
}

// One of the daemon's transport counters from `elasticctl nodes --json` ("transport" object).
inline std::optional<std::uint64_t> transport_counter(const Daemon& daemon,
                                                      const std::string& key) {
  const RunResult r =
      elasticctl({"-c", "", "--set", "control.socket=" + daemon.socket(), "nodes", "--json"});
  if (!r.status.exited_with(0)) return std::nullopt;
  const auto reply = nlohmann::json::parse(r.out, nullptr, false);
  if (reply.is_discarded() || !reply.contains("transport") || !reply["transport"].contains(key)) {
    return std::nullopt;
  }
  return reply["transport"][key].get<std::uint64_t>();
}

// True when `observer` sees `name` in `state` (and at `generation`, if given).
inline bool sees(const Daemon& observer, const std::string& name, const std::string& state,
                 std::uint64_t generation = 0) {
  const auto members = members_of(observer);
  if (!members) return false;
  const auto it = members->find(name);
  return it != members->end() && it->second.state == state &&
         (generation == 0 || it->second.generation == generation);
}

inline bool all_alive(const std::vector<Daemon*>& daemons) {
  for (const Daemon* observer : daemons) {
    for (const Daemon* member : daemons) {
      if (!sees(*observer, member->name(), "alive", member->generation())) return false;
    }
  }
  return true;
}

inline std::string describe(const std::vector<Daemon*>& daemons) {
  std::string text;
  for (const Daemon* d : daemons) {
    const RunResult r = elasticctl({"-c", "", "--set", "control.socket=" + d->socket(), "nodes"});
    text += "--- " + d->name() + " sees:\n" + r.out + r.err;
  }
  return text;
}

// Two daemons in `dir`: n1 (seeded by nobody, so the default single voter and leader) and n2
// seeded from n1, each with `settings`. The constructor starts them in that order and waits
// (kConverge) until each sees both alive; a test failure with both views otherwise.
struct DaemonPair {
  explicit DaemonPair(const TempDir& dir, const std::vector<std::string>& settings = {})
      : n1(dir, "n1", {}) {
    for (const std::string& s : settings) n1.set(s);
    n1.start();
    n2 = std::make_unique<Daemon>(dir, "n2", std::vector<std::string>{n1.seed()});
    for (const std::string& s : settings) n2->set(s);
    n2->start();
    EXPECT_TRUE(wait_until(
        [&] {
          return all_alive({&n1, n2.get()});
        },
        kConverge))
        << describe({&n1, n2.get()});
  }

  Daemon n1;
  std::unique_ptr<Daemon> n2;  // made once n1 has an address to seed it from
};

}  // namespace elastic::testing
