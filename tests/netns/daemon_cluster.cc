#include "tests/netns/daemon_cluster.h"

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

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

Status DaemonCluster::ensure_keys(int host) const {
  const std::string keys = work_dir_ + "/keys";
  if (std::filesystem::exists(secret_key_file(host))) return ok_status();
  const testing::RunResult made = testing::run(
      {elasticctl_, "--config", "/dev/null", "keygen", "--dir", keys, "--name", name(host)}, {},
      20s);
  if (!made.status.exited_with(0)) {
    return Error{"elasticctl keygen for " + name(host) + " failed: " + made.err};
  }
  // Published by rename: a running daemon re-reads the directory when it changes and must
  // never see half a file (a .tmp name is not a .pub file, so the list ignores it).
  std::error_code ec;
  std::filesystem::create_directories(public_keys_dir(), ec);
  std::filesystem::permissions(public_keys_dir(), std::filesystem::perms(0755), ec);
  const std::string tmp = public_keys_dir() + "/" + name(host) + ".pub.tmp";
  std::filesystem::copy_file(keys + "/" + name(host) + ".pub", tmp,
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (!ec) std::filesystem::rename(tmp, public_keys_dir() + "/" + name(host) + ".pub", ec);
  if (ec) return Error{"Cannot publish the public key of " + name(host) + ": " + ec.message()};
  return ok_status();
}

Status DaemonCluster::start(int host, std::chrono::milliseconds timeout) {
  const std::string dir = work_dir_ + "/" + name(host);
  std::filesystem::create_directories(dir);
  // Every host's pair at once, so a daemon finds its peers' keys from its first send.
  for (int other = 0; other < hosts_.size(); ++other) {
    if (Status keys = ensure_keys(other); !keys.ok()) return keys;
  }
  std::string seeds;
  for (int other = 0; other < hosts_.size(); ++other) {
    if (other == host) continue;
    seeds += std::string(seeds.empty() ? "" : ",") + "\"" + name(other) + "@" + hosts_.ip(other) +
             ":" + std::to_string(kDaemonPort) + "\"";
  }
  std::vector<std::string> sets = {
      "node.name=" + name(host),
      "node.state_dir=" + dir + "/state",
      "transport.bind=tcp://" + hosts_.ip(host) + ":" + std::to_string(kDaemonPort),
      "membership.seeds=[" + seeds + "]",
      "control.socket=" + dir + "/ctl.sock",
      "transport.curve=true",
      "transport.secret_key_file=" + secret_key_file(host),
      "transport.public_keys_dir=" + public_keys_dir(),
  };
  std::string voters;
  for (const int voter : voters_) {
    voters += std::string(voters.empty() ? "" : ",") + "\"" + name(voter) + "\"";
  }
  sets.push_back("consensus.voters=[" + voters + "]");
  for (const auto& timer : timers_.overrides()) sets.push_back(timer);
  for (const auto& timer : raft_timers_.overrides()) sets.push_back(timer);
  sets.insert(sets.end(), overrides_.begin(), overrides_.end());
  if (const auto found = host_overrides_.find(host); found != host_overrides_.end()) {
    sets.insert(sets.end(), found->second.begin(), found->second.end());
  }
  std::vector<std::string> argv{elasticd_, "--config", config_file_};
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

// ---- jobs

bool JobView::terminal() const {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

bool JobView::has_node(const std::string& node) const {
  return std::any_of(ranks.begin(), ranks.end(),
                     [&](const RankView& rank) { return rank.node == node; });
}

std::vector<std::string> JobView::nodes() const {
  std::vector<std::string> names;
  for (const auto& rank : ranks) names.push_back(rank.node);
  return names;
}

std::string JobView::summary() const {
  std::string names;
  for (const auto& rank : ranks) names += (names.empty() ? "" : ",") + rank.node;
  return id + " " + state + " round " + std::to_string(round) + " (" + names + ") restarts " +
         std::to_string(restarts) + ": " + reason;
}

namespace {

// The NUL-separated environment of `pid` as a map; empty if unreadable (gone, a kernel thread).
std::map<std::string, std::string> process_environment(pid_t pid) {
  std::map<std::string, std::string> env;
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

// The value of "<key>:\t..." in /proc/<pid>/status ("" if absent).
std::string status_field(const std::string& status, const std::string& key) {
  std::istringstream lines(status);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    auto value = line.substr(key.size() + 1);
    const auto begin = value.find_first_not_of(" \t");
    return begin == std::string::npos ? "" : value.substr(begin);
  }
  return "";
}

// The state letter of /proc/<pid>/stat (after the parenthesised command), or 0 if gone.
char process_state(pid_t pid) {
  const std::string stat = testing::read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return 0;
  return stat[paren + 2];
}

long to_long(const std::string& text, long fallback) {
  try {
    std::size_t used = 0;
    const long value = std::stol(text, &used);
    return used == text.size() ? value : fallback;
  } catch (const std::exception&) {
    return fallback;
  }
}

}  // namespace

bool process_gone(pid_t pid) {
  const char state = process_state(pid);
  return state == 0 || state == 'Z' || state == 'X';
}

std::set<int> parse_cpu_list(const std::string& list) {
  std::set<int> cpus;
  std::istringstream parts(list);
  std::string part;
  while (std::getline(parts, part, ',')) {
    if (part.empty()) continue;
    const auto dash = part.find('-');
    const long low = to_long(part.substr(0, dash), -1);
    const long high = dash == std::string::npos ? low : to_long(part.substr(dash + 1), -1);
    if (low < 0 || high < low || high > 65535) return {};
    for (long cpu = low; cpu <= high; ++cpu) cpus.insert(static_cast<int>(cpu));
  }
  return cpus;
}

std::vector<WorkerProc> find_workers(const std::string& job_id) {
  std::vector<WorkerProc> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (const dirent* entry = ::readdir(proc)) {
    const long pid = to_long(entry->d_name, -1);
    if (pid <= 0) continue;
    auto env = process_environment(static_cast<pid_t>(pid));
    const auto job = env.find("ELASTIC_JOB_ID");
    if (job == env.end() || job->second != job_id) continue;
    if (process_gone(static_cast<pid_t>(pid))) continue;
    const std::string status = testing::read_file("/proc/" + std::to_string(pid) + "/status");
    WorkerProc worker;
    worker.pid = static_cast<pid_t>(pid);
    worker.job = job->second;
    worker.node = env["ELASTIC_NODE"];
    worker.rank = static_cast<int>(to_long(env["RANK"], -1));
    worker.round = static_cast<std::uint64_t>(std::max(0L, to_long(env["ELASTIC_ROUND"], 0)));
    worker.slot = env["ELASTIC_SLOT"];
    worker.cuda_devices = env["CUDA_VISIBLE_DEVICES"];
    worker.omp_threads = env["OMP_NUM_THREADS"];
    // "Uid:\treal\teffective\tsaved\tfs": the real ids.
    const std::string uids = status_field(status, "Uid");
    const std::string gids = status_field(status, "Gid");
    worker.uid = static_cast<uid_t>(to_long(uids.substr(0, uids.find('\t')), 0));
    worker.gid = static_cast<gid_t>(to_long(gids.substr(0, gids.find('\t')), 0));
    worker.cpus = status_field(status, "Cpus_allowed_list");
    found.push_back(std::move(worker));
  }
  ::closedir(proc);
  std::sort(found.begin(), found.end(),
            [](const WorkerProc& a, const WorkerProc& b) { return a.pid < b.pid; });
  return found;
}

std::vector<std::string> small_fmnist_trainer(const std::string& trainer, int checkpoint_interval,
                                              int epochs) {
  return {trainer,
          "--model",
          "fmnist",
          "--threads",
          "1",
          "--batch-size",
          "32",
          "--train-limit",
          "8192",
          "--no-eval",
          "--checkpoint-interval",
          std::to_string(checkpoint_interval),
          "--log-interval",
          "1",
          "--epochs",
          std::to_string(epochs)};
}

std::string_view without_log_stamp(std::string_view line) {
  // "YYYY-MM-DDTHH:MM:SS.mmmZ " (spawner.h, Logs).
  constexpr std::size_t kStamp = 25;
  const auto digits = [&](std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
      if (line[i] < '0' || line[i] > '9') return false;
    }
    return true;
  };
  if (line.size() < kStamp || line[4] != '-' || line[7] != '-' || line[10] != 'T' ||
      line[13] != ':' || line[16] != ':' || line[19] != '.' || line[23] != 'Z' || line[24] != ' ' ||
      !digits(0, 4) || !digits(20, 23)) {
    return line;
  }
  return line.substr(kStamp);
}

namespace {

// One rank's log file of one round: <job dir>/round-<R>/rank-<N>.log.
struct RankLog {
  long round = -1;
  int rank = -1;
  std::string path;
};

// The rank-<N>.log files of every round-<R> directory in `job_dir`, by round, then rank.
std::vector<RankLog> rank_logs(const std::string& job_dir) {
  std::vector<RankLog> logs;
  std::error_code error;
  for (const auto& round_dir : std::filesystem::directory_iterator(job_dir, error)) {
    const std::string name = round_dir.path().filename().string();
    if (name.rfind("round-", 0) != 0) continue;
    const long round = to_long(name.substr(6), -1);
    if (round < 0) continue;
    std::error_code inner;
    for (const auto& entry : std::filesystem::directory_iterator(round_dir.path(), inner)) {
      const std::string file = entry.path().filename().string();
      if (file.rfind("rank-", 0) != 0 || file.size() <= 9 ||
          file.substr(file.size() - 4) != ".log") {
        continue;
      }
      const long rank = to_long(file.substr(5, file.size() - 9), -1);
      if (rank >= 0) logs.push_back(RankLog{round, static_cast<int>(rank), entry.path().string()});
    }
  }
  std::sort(logs.begin(), logs.end(), [](const RankLog& a, const RankLog& b) {
    return std::tie(a.round, a.rank) < std::tie(b.round, b.rank);
  });
  return logs;
}

}  // namespace

std::string DaemonCluster::worker_log(int host, const std::string& job, int rank) const {
  std::string text;
  for (const RankLog& log : rank_logs(worker_log_dir(host) + "/" + job)) {
    if (log.rank == rank) text += testing::read_file(log.path);
  }
  return text;
}

std::vector<TrainerLine> DaemonCluster::trainer_lines(const std::string& job) const {
  std::vector<TrainerLine> lines;
  for (int host = 0; host < hosts_.size(); ++host) {
    for (const RankLog& log : rank_logs(worker_log_dir(host) + "/" + job)) {
      const int rank = log.rank;
      std::istringstream text(testing::read_file(log.path));
      std::string line;
      while (std::getline(text, line)) {
        line = std::string(without_log_stamp(line));
        if (line.empty() || line.front() != '{') continue;
        // The last line may be half written; a parse failure just skips it until next time.
        const auto json = nlohmann::json::parse(line, nullptr, false);
        if (json.is_discarded() || !json.is_object() || !json.contains("event")) continue;
        TrainerLine parsed;
        parsed.host = host;
        parsed.rank = rank;
        parsed.event = json.value("event", "");
        parsed.step = json.value("step", std::int64_t{-1});
        parsed.round = json.value("round", std::int64_t{-1});
        parsed.world_size = json.value("world_size", std::int64_t{0});
        if (json.contains("test_accuracy") && json["test_accuracy"].is_number()) {
          parsed.test_accuracy = json["test_accuracy"].get<double>();
        }
        parsed.text = line;
        lines.push_back(std::move(parsed));
      }
    }
  }
  return lines;
}

std::string DaemonCluster::daemon_log_lines(int host, const std::string& job) const {
  std::string result;
  for (const RankLog& log : rank_logs(worker_log_dir(host) + "/" + job)) {
    std::istringstream text(testing::read_file(log.path));
    std::string line;
    while (std::getline(text, line)) {
      if (line.rfind("[elasticd", 0) == 0) {
        result += "round-" + std::to_string(log.round) + "/rank-" + std::to_string(log.rank) +
                  ".log: " + line + "\n";
      }
    }
  }
  return result;
}

testing::RunResult DaemonCluster::ctl_as(uid_t uid, gid_t gid, int host,
                                         const std::vector<std::string>& args,
                                         std::chrono::milliseconds timeout) const {
  std::vector<std::string> argv = {"/usr/bin/setpriv",
                                   "--reuid=" + std::to_string(uid),
                                   "--regid=" + std::to_string(gid),
                                   "--clear-groups",
                                   elasticctl_,
                                   "--config",
                                   "/dev/null",
                                   "--set",
                                   "control.socket=" + socket(host)};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run(argv, {}, timeout);
}

Submitted DaemonCluster::submit_job(int host, const std::vector<std::string>& args,
                                    std::optional<uid_t> as_uid) const {
  std::vector<std::string> full = {"submit", "--json"};
  full.insert(full.end(), args.begin(), args.end());
  // Longer than elasticctl's own call timeout, so a refusal is its answer, not our kill.
  const auto result =
      as_uid ? ctl_as(*as_uid, static_cast<gid_t>(*as_uid), host, full, 30s) : ctl(host, full, 30s);
  Submitted submitted;
  submitted.exit_code = result.timed_out || result.status.signal != 0 ? -1 : result.status.code;
  submitted.output = result.out + result.err;
  if (submitted.exit_code != 0) return submitted;
  // --json prints the daemon's reply {"ok":true,"job":{"id":...}}; older clients print
  // "submitted <id>".
  const auto json = nlohmann::json::parse(result.out, nullptr, false);
  if (!json.is_discarded() && json.is_object()) {
    const auto job = json.value("job", nlohmann::json::object());
    if (job.is_object()) submitted.id = job.value("id", "");
    if (submitted.id.empty()) submitted.id = json.value("id", "");
  }
  const std::string prefix = "submitted ";
  if (submitted.id.empty() && result.out.rfind(prefix, 0) == 0) {
    submitted.id = result.out.substr(prefix.size(), result.out.find('\n') - prefix.size());
  }
  return submitted;
}

Result<JobView> DaemonCluster::job(int host, const std::string& id) const {
  const auto result = ctl(host, {"status", id, "--json"}, 30s);
  if (!result.status.exited_with(0)) {
    return Error{"elasticctl status " + id + " on host " + std::to_string(host) + " failed (exit " +
                 std::to_string(result.status.code) + "): " + result.out + result.err};
  }
  auto json = nlohmann::json::parse(result.out, nullptr, false);
  // The job object itself, or a whole reply that wraps it.
  if (!json.is_discarded() && json.is_object() && json.contains("job") && json["job"].is_object()) {
    json = json["job"];
  }
  if (json.is_discarded() || !json.is_object() || !json.contains("state")) {
    return Error{"elasticctl status " + id + " --json on host " + std::to_string(host) +
                 " printed no job: " + result.out};
  }
  JobView view;
  view.json = result.out;
  view.id = json.value("id", "");
  view.state = json.value("state", "");
  view.reason = json.value("reason", "");
  view.round = json.value("round", std::uint64_t{0});
  view.restarts = json.value("restarts", std::uint64_t{0});
  view.world_size = json.value("world_size", std::uint64_t{0});
  for (const auto& row : json.value("ranks", nlohmann::json::array())) {
    if (!row.is_object()) continue;
    RankView rank;
    rank.node = row.value("node", "");
    rank.generation = row.value("generation", std::uint64_t{0});
    rank.slots = row.value("slots", 0U);
    rank.first_rank = row.value("first_rank", 0U);
    view.ranks.push_back(std::move(rank));
  }
  if (view.world_size == 0) {
    for (const auto& rank : view.ranks) view.world_size += rank.slots;
  }
  for (const auto& row : json.value("events", nlohmann::json::array())) {
    if (!row.is_object()) continue;
    JobEventView event;
    event.at_ms = row.value("at_ms", std::int64_t{0});
    event.round = row.value("round", std::uint64_t{0});
    event.from = row.value("from", "");
    event.to = row.value("to", "");
    event.reason = row.value("reason", "");
    view.events.push_back(std::move(event));
  }
  return view;
}

bool DaemonCluster::wait_job(int host, const std::string& id,
                             const std::function<bool(const JobView&)>& condition,
                             std::chrono::milliseconds timeout, JobView* last) const {
  return testing::wait_until(
      [&] {
        auto view = job(host, id);
        if (!view.ok()) return false;
        const bool holds = condition(*view);
        if (last != nullptr) *last = std::move(view).value();
        return holds;
      },
      timeout);
}

}  // namespace elastic::netns
