#include "tests/netns/daemon_cluster.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

namespace elastic::netns {
namespace {

using namespace std::chrono_literals;

std::string ms(std::chrono::milliseconds value) { return std::to_string(value.count()) + "ms"; }

}  // namespace

std::chrono::milliseconds Timers::min_suspicion(int members) const {
  const double scale = std::log10(std::max(members, 1));
  return std::chrono::milliseconds(static_cast<long>(suspicion_multiplier * scale *
                                                     static_cast<double>(probe_interval.count())));
}

std::chrono::milliseconds Timers::max_suspicion(int members) const {
  return min_suspicion(members) * suspicion_max_multiplier;
}

std::vector<std::string> Timers::overrides() const {
  if (defaults) return {};
  return {
      "membership.probe_interval=" + ms(probe_interval),
      "membership.probe_timeout=" + ms(probe_timeout),
      "membership.gossip_interval=" + ms(gossip_interval),
      "membership.push_pull_interval=" + ms(push_pull_interval),
      "membership.reconnect_interval=" + ms(reconnect_interval),
      "membership.rejoin_interval=" + ms(rejoin_interval),
      "membership.suspicion_multiplier=" + std::to_string(suspicion_multiplier),
      "membership.suspicion_max_multiplier=" + std::to_string(suspicion_max_multiplier),
  };
}

Timers default_timers() { return Timers{}; }

Timers short_timers() {
  Timers timers;
  timers.defaults = false;
  // 500 ms probes keep the suspicion window (1.4 s .. 8.4 s at N = 5) well above the scheduling
  // noise of a loaded 2-core machine, while a death still settles within about 10 s.
  timers.probe_interval = 500ms;
  timers.probe_timeout = 150ms;
  timers.gossip_interval = 100ms;
  timers.push_pull_interval = 3s;
  timers.reconnect_interval = 1s;
  timers.rejoin_interval = 2s;
  return timers;
}

std::vector<std::string> RaftTimers::overrides() const {
  if (defaults) return {};
  return {
      "consensus.election_timeout=" + ms(election_timeout),
      "consensus.heartbeat_interval=" + ms(heartbeat_interval),
  };
}

RaftTimers default_raft_timers() { return RaftTimers{}; }

RaftTimers short_raft_timers() {
  RaftTimers timers;
  timers.defaults = false;
  // 300 ms (randomised to 300-600 ms) elects within a second after a kill, yet stays far above
  // the sub-millisecond RTT of the bridge; 50 ms heartbeats are a sixth of it, so a busy
  // 2-core machine must stall a leader for 250+ ms before a follower campaigns.
  timers.election_timeout = 300ms;
  timers.heartbeat_interval = 50ms;
  return timers;
}

std::string state_of(const View& view, const std::string& name) {
  const auto found = view.members.find(name);
  return found == view.members.end() ? "" : found->second.state;
}

DaemonCluster::DaemonCluster(NetnsCluster& hosts, std::string elasticd, std::string elasticctl,
                             std::string work_dir, Timers timers, RaftTimers raft)
    : hosts_(hosts),
      elasticd_(std::move(elasticd)),
      elasticctl_(std::move(elasticctl)),
      work_dir_(std::move(work_dir)),
      timers_(timers),
      raft_timers_(raft),
      daemons_(hosts.size()) {
  for (int host = 0; host < std::min(3, hosts.size()); ++host) voters_.push_back(host);
}

DaemonCluster::~DaemonCluster() {
  for (auto& daemon : daemons_) {
    if (daemon && daemon->running()) {
      daemon->signal(SIGCONT);  // a stopped daemon must not outlive the test stopped
      daemon->signal(SIGKILL);
      daemon->wait(10s);
    }
  }
}

Status DaemonCluster::start(int host, std::chrono::milliseconds timeout) {
  const std::string dir = work_dir_ + "/" + name(host);
  std::filesystem::create_directories(dir);
  std::string seeds;
  for (int other = 0; other < hosts_.size(); ++other) {
    if (other == host) continue;
    seeds += std::string(seeds.empty() ? "" : ",") + "\"" + hosts_.ip(other) + ":" +
             std::to_string(kDaemonPort) + "\"";
  }
  std::vector<std::string> sets = {
      "node.name=" + name(host),
      "node.state_dir=" + dir + "/state",
      "transport.bind=tcp://" + hosts_.ip(host) + ":" + std::to_string(kDaemonPort),
      "membership.seeds=[" + seeds + "]",
      "control.socket=" + dir + "/ctl.sock",
  };
  std::string voters;
  for (const int voter : voters_) {
    voters += std::string(voters.empty() ? "" : ",") + "\"" + name(voter) + "\"";
  }
  sets.push_back("consensus.voters=[" + voters + "]");
  for (const auto& timer : timers_.overrides()) sets.push_back(timer);
  for (const auto& timer : raft_timers_.overrides()) sets.push_back(timer);
  std::vector<std::string> argv{elasticd_, "--config", "/dev/null"};
  for (const auto& set : sets) {
    argv.push_back("--set");
    argv.push_back(set);
  }
  if (daemons_.at(host) && daemons_[host]->running()) {
    return Error{"The daemon on host " + std::to_string(host) + " is already running."};
  }
  daemons_[host] = hosts_.run(host, argv, {}, dir, "elasticd");
  auto& daemon = *daemons_[host];
  const bool ready = testing::wait_until(
      [&] {
        return !daemon.running() || daemon.err().find("elasticd ready:") != std::string::npos;
      },
      timeout);
  if (!ready || !daemon.running()) {
    return Error{"elasticd on host " + std::to_string(host) + " did not get ready (" +
                 (daemon.running() ? "still starting" : "exited") + "); its stderr:\n" +
                 daemon.err()};
  }
  return ok_status();
}

Status DaemonCluster::start_all(std::chrono::milliseconds timeout) {
  for (int host = 0; host < hosts_.size(); ++host) {
    if (auto started = start(host, timeout); !started.ok()) return started;
  }
  return ok_status();
}

std::string DaemonCluster::log(int host) const {
  return daemons_.at(host) ? daemons_[host]->err() : "";
}

Result<View> DaemonCluster::view(int host) {
  const std::string socket = work_dir_ + "/" + name(host) + "/ctl.sock";
  const auto result = hosts_.exec(host,
                                  {elasticctl_, "--config", "/dev/null", "--set",
                                   "control.socket=" + socket, "nodes", "--json"},
                                  20s);
  if (!result.status.exited_with(0)) {
    return Error{"elasticctl nodes on host " + std::to_string(host) + " failed (exit " +
                 std::to_string(result.status.code) + "): " + result.err};
  }
  const auto json = nlohmann::json::parse(result.out, nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("members")) {
    return Error{"elasticctl nodes --json on host " + std::to_string(host) +
                 " printed no member table: " + result.out};
  }
  View view;
  view.self = json.value("self", nlohmann::json::object()).value("name", "");
  for (const auto& row : json["members"]) {
    MemberSeen seen;
    seen.state = row.value("state", "");
    seen.incarnation = row.value("incarnation", 0u);
    seen.generation = row.value("generation", std::uint64_t{0});
    view.members[row.value("name", "")] = seen;
  }
  const auto stats = json.value("stats", nlohmann::json::object());
  view.deaths = stats.value("deaths", std::uint64_t{0});
  view.suspicions = stats.value("suspicions", std::uint64_t{0});
  view.refutations = stats.value("refutations", std::uint64_t{0});
  view.probe_timeouts = stats.value("probe_timeouts", std::uint64_t{0});
  return view;
}

bool DaemonCluster::wait_view(int host, const std::function<bool(const View&)>& condition,
                              std::chrono::milliseconds timeout) {
  return testing::wait_until(
      [&] {
        const auto seen = view(host);
        return seen.ok() && condition(*seen);
      },
      timeout);
}

bool DaemonCluster::wait_all_see(const std::vector<int>& observers, const std::vector<int>& targets,
                                 const std::string& state, std::chrono::milliseconds timeout) {
  return testing::wait_until(
      [&] {
        for (const int observer : observers) {
          const auto seen = view(observer);
          if (!seen.ok()) return false;
          for (const int target : targets) {
            if (state_of(*seen, name(target)) != state) return false;
          }
        }
        return true;
      },
      timeout);
}

std::string DaemonCluster::describe(const std::vector<int>& hosts) {
  std::string text;
  for (const int host : hosts) {
    text += name(host) + " sees:";
    const auto seen = view(host);
    if (!seen.ok()) {
      text += " (" + seen.error().message + ")\n";
      continue;
    }
    for (const auto& [member, row] : seen->members) {
      text += " " + member + "=" + row.state + "/i" + std::to_string(row.incarnation);
    }
    text += " deaths=" + std::to_string(seen->deaths) + "\n";
  }
  return text;
}

int DaemonCluster::host_of(const std::string& name) const {
  for (int host = 0; host < hosts_.size(); ++host) {
    if (DaemonCluster::name(host) == name) return host;
  }
  return -1;
}

bool DaemonCluster::is_voter(int host) const {
  return std::find(voters_.begin(), voters_.end(), host) != voters_.end();
}

testing::RunResult DaemonCluster::ctl(int host, const std::vector<std::string>& args,
                                      std::chrono::milliseconds timeout) const {
  std::vector<std::string> argv = {elasticctl_, "--config", "/dev/null", "--set",
                                   "control.socket=" + work_dir_ + "/" + name(host) + "/ctl.sock"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run(argv, {}, timeout);
}

Result<RaftView> DaemonCluster::raft(int host) const {
  const auto result = ctl(host, {"status", "--json"}, 20s);
  if (!result.status.exited_with(0)) {
    return Error{"elasticctl status on host " + std::to_string(host) + " failed (exit " +
                 std::to_string(result.status.code) + "): " + result.err};
  }
  const auto json = nlohmann::json::parse(result.out, nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("consensus") ||
      !json["consensus"].is_object()) {
    return Error{"elasticctl status --json on host " + std::to_string(host) +
                 " printed no consensus object: " + result.out};
  }
  const auto& raft = json["consensus"];
  RaftView view;
  view.voter = raft.value("voter", false);
  view.role = raft.value("role", "");
  view.leader = raft.value("leader", "");
  view.term = raft.value("term", std::uint64_t{0});
  view.commit_index = raft.value("commit_index", std::uint64_t{0});
  view.last_index = raft.value("last_index", std::uint64_t{0});
  view.jobs = raft.value("jobs", std::uint64_t{0});
  return view;
}

Submitted DaemonCluster::submit(int host, const std::string& job_name) const {
  // Longer than elasticctl's own 15 s call timeout, so a refusal is its answer, not our kill.
  const auto result =
      ctl(host, {"submit", "--name", job_name, "--nodes", "1", "--", "/bin/true"}, 30s);
  Submitted submitted;
  submitted.exit_code = result.timed_out || result.status.signal != 0 ? -1 : result.status.code;
  submitted.output = result.out + result.err;
  const std::string prefix = "submitted ";
  if (submitted.exit_code == 0 && result.out.rfind(prefix, 0) == 0) {
    submitted.id = result.out.substr(prefix.size(), result.out.find('\n') - prefix.size());
  }
  return submitted;
}

Result<std::vector<std::string>> DaemonCluster::job_ids(int host) const {
  const auto result = ctl(host, {"jobs", "--json"}, 30s);
  if (!result.status.exited_with(0)) {
    return Error{"elasticctl jobs on host " + std::to_string(host) + " failed (exit " +
                 std::to_string(result.status.code) + "): " + result.out + result.err};
  }
  const auto json = nlohmann::json::parse(result.out, nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("jobs") ||
      !json["jobs"].is_array()) {
    return Error{"elasticctl jobs --json on host " + std::to_string(host) +
                 " printed no job list: " + result.out};
  }
  std::vector<std::string> ids;
  for (const auto& job : json["jobs"]) {
    if (job.is_object()) ids.push_back(job.value("id", ""));
  }
  return ids;
}

std::string DaemonCluster::agreed_leader(const std::vector<int>& hosts) const {
  std::set<std::string> named;
  std::map<int, RaftView> seen;
  for (const int host : hosts) {
    if (!is_voter(host)) continue;
    const auto view = raft(host);
    if (!view.ok()) continue;  // killed, or not started yet: only the answering voters count
    named.insert(view->leader);
    seen[host] = *view;
  }
  if (named.size() != 1 || named.begin()->empty()) return "";
  const std::string leader = *named.begin();
  const int leader_host = host_of(leader);
  const auto found = seen.find(leader_host);
  const bool leader_says_so = found != seen.end() && found->second.role == "leader";
  return leader_says_so ? leader : "";
}

std::string DaemonCluster::wait_leader(const std::vector<int>& hosts,
                                       std::chrono::milliseconds timeout) const {
  std::string leader;
  testing::wait_until(
      [&] {
        leader = agreed_leader(hosts);
        return !leader.empty();
      },
      timeout);
  return leader;
}

std::string DaemonCluster::describe_raft(const std::vector<int>& hosts) const {
  std::string text;
  for (const int host : hosts) {
    const auto view = raft(host);
    if (!view.ok()) {
      text += name(host) + ": (" + view.error().message + ")\n";
      continue;
    }
    text +=
        name(host) + ": " + (view->voter ? "voter " + view->role : std::string("non-voter")) +
        " leader=" + (view->leader.empty() ? "-" : view->leader) +
        " term=" + std::to_string(view->term) + " commit=" + std::to_string(view->commit_index) +
        " last=" + std::to_string(view->last_index) + " jobs=" + std::to_string(view->jobs) + "\n";
  }
  return text;
}

}  // namespace elastic::netns
