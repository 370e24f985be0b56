#include "tests/netns/netns_cluster.h"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>

namespace elastic::netns {
namespace {

using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kCommandTimeout = 20s;
constexpr const char* kNetnsDir = "/run/netns";
// SKF_AD_OFF + SKF_AD_RANDOM: the classic-BPF ancillary load of a random u32.
constexpr std::uint32_t kLoadRandom = 0xfffff000u + 56u;
// TC_ACT_OK / TC_ACT_SHOT returned by a direct-action classifier.
constexpr std::uint32_t kActOk = 0;
constexpr std::uint32_t kActShot = 2;

std::atomic<int> g_counter{0};

std::string find_binary(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    const std::string path = std::string(dir) + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

std::string tc_binary() {
  static const std::string path = find_binary("tc");
  return path;
}

std::string join(const std::vector<std::string>& argv) {
  std::string text;
  for (const auto& arg : argv) text += (text.empty() ? "" : " ") + arg;
  return text;
}

// Runs one iproute2 command; the Error quotes the command and its stderr.
Status command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0].empty()) {
    return Error{"iproute2 (ip, tc) is not installed: apt-get install iproute2."};
  }
  const auto result = testing::run(argv, {}, kCommandTimeout);
  if (result.timed_out) return Error{"`" + join(argv) + "` did not finish in 20 s."};
  if (!result.status.exited_with(0)) {
    std::string err = result.err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    return Error{"`" + join(argv) + "` failed (exit " + std::to_string(result.status.code) +
                 "): " + err};
  }
  return ok_status();
}

std::uint32_t ipv4_value(const std::string& dotted) {
  std::uint32_t value = 0;
  std::istringstream in(dotted);
  std::string part;
  while (std::getline(in, part, '.')) value = (value << 8) | std::stoul(part);
  return value;
}

// Classic BPF for one host's egress: drop IPv4 packets to `blocked`, then `loss_percent` of the
// rest; pass everything else (ARP included). Printed in tc's "bytecode" syntax.
std::string filter_bytecode(const std::vector<std::uint32_t>& blocked, double loss_percent) {
  struct Insn {
    std::uint16_t code;
    int jt_target;  // absolute index, or -1 for "next"
    int jf_target;
    std::uint32_t k;
  };
  const bool loss = loss_percent > 0;
  const int count = 3 + static_cast<int>(blocked.size()) + (loss ? 2 : 0) + 2;
  const int pass = count - 2;
  const int drop = count - 1;
  std::vector<Insn> prog;
  prog.push_back({0x28, -1, -1, 12});        // ldh [12]: ethertype
  prog.push_back({0x15, -1, pass, 0x0800});  // jeq #IPv4 ? next : pass
  prog.push_back({0x20, -1, -1, 30});        // ld [30]: IPv4 destination
  for (const auto address : blocked) {
    prog.push_back({0x15, drop, -1, address});  // jeq #address ? drop : next
  }
  if (loss) {
    const double share = std::min(loss_percent, 100.0) / 100.0;
    const double cut = std::round(share * 4294967296.0) - 1.0;
    const auto threshold = static_cast<std::uint32_t>(std::clamp(cut, 0.0, 4294967295.0));
    prog.push_back({0x20, -1, -1, kLoadRandom});    // ld rand
    prog.push_back({0x25, pass, drop, threshold});  // jgt #threshold ? pass : drop
  }
  prog.push_back({0x06, -1, -1, kActOk});    // pass: ret #TC_ACT_OK
  prog.push_back({0x06, -1, -1, kActShot});  // drop: ret #TC_ACT_SHOT
  std::string text = std::to_string(prog.size());
  for (int i = 0; i < static_cast<int>(prog.size()); ++i) {
    const auto& insn = prog[i];
    const int jt = insn.jt_target < 0 ? 0 : insn.jt_target - i - 1;
    const int jf = insn.jf_target < 0 ? 0 : insn.jf_target - i - 1;
    text += "," + std::to_string(insn.code) + " " + std::to_string(jt) + " " + std::to_string(jf) +
            " " + std::to_string(insn.k);
  }
  return text;
}

std::vector<pid_t> pids_in(const std::string& ns) {
  std::vector<pid_t> pids;
  const auto result = testing::run({ip_binary(), "netns", "pids", ns}, {}, kCommandTimeout);
  std::istringstream in(result.out);
  long pid = 0;
  while (in >> pid) {
    if (pid > 0) pids.push_back(static_cast<pid_t>(pid));
  }
  return pids;
}

// SIGKILLs every process inside `ns` (they are the harness's own: the name is unique to one
// cluster), waits until none is left, then deletes the namespace name.
void kill_and_delete(const std::string& ns) {
  testing::wait_until(
      [&] {
        const auto pids = pids_in(ns);
        for (const pid_t pid : pids) ::kill(pid, SIGKILL);
        return pids.empty();
      },
      10s);
  (void)command({ip_binary(), "netns", "delete", ns});
}

}  // namespace

std::string ip_binary() {
  static const std::string path = find_binary("ip");
  return path;
}

Status NetnsCluster::check_environment() {
  static std::mutex mutex;
  static std::optional<Status> cached;
  std::lock_guard lock(mutex);
  if (cached) return *cached;
  if (::geteuid() != 0) {
    cached = Error{"The network-namespace harness needs root (it creates namespaces and links)."};
  } else if (ip_binary().empty() || tc_binary().empty()) {
    cached = Error{"iproute2 (ip, tc) is not installed: apt-get install iproute2."};
  } else {
    // A one-host cluster with a loss rule exercises every kernel feature the harness uses.
    auto probe = create(1);
    if (!probe.ok()) {
      cached = Error{"Cannot build a namespace host: " + probe.error().message};
    } else if (auto loss = (*probe)->set_loss(0, 1); !loss.ok()) {
      cached = Error{
          "Cannot install a cls_bpf filter (kernel needs NET_SCH_INGRESS/clsact and "
          "NET_CLS_BPF): " +
          loss.error().message};
    } else {
      cached = ok_status();
    }
  }
  return *cached;
}

bool NetnsCluster::netem_available() {
  static std::mutex mutex;
  static std::optional<bool> cached;
  std::lock_guard lock(mutex);
  if (cached) return *cached;
  auto probe = create(1);
  cached = probe.ok() && command({tc_binary(), "-n", (*probe)->netns(0), "qdisc", "add", "dev",
                                  "eth0", "root", "netem", "delay", "1ms"})
                             .ok();
  return *cached;
}

int NetnsCluster::remove_leftovers() {
  static const std::regex ours("^elxn([0-9]+)c[0-9]+-(s|h[0-9]+)$");
  static const std::regex our_logs("^elxn([0-9]+)c[0-9]+-delay-logs$");
  const auto owner_dead = [](const std::smatch& match) {
    const long owner = std::stol(match[1].str());
    if (owner == ::getpid()) return false;
    return ::kill(static_cast<pid_t>(owner), 0) != 0 && errno == ESRCH;
  };
  int removed = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(kNetnsDir, error)) {
    const std::string name = entry.path().filename().string();
    std::smatch match;
    if (!std::regex_match(name, match, ours) || !owner_dead(match)) continue;
    kill_and_delete(name);
    ++removed;
  }
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::temp_directory_path(error), error)) {
    const std::string name = entry.path().filename().string();
    std::smatch match;
    if (!std::regex_match(name, match, our_logs) || !owner_dead(match)) continue;
    std::error_code ignored;
    std::filesystem::remove_all(entry.path(), ignored);
  }
  return removed;
}

Result<std::unique_ptr<NetnsCluster>> NetnsCluster::create(int hosts) {
  if (hosts < 1 || hosts > 250) {
    return Error{"A namespace cluster has 1 to 250 hosts, not " + std::to_string(hosts) + "."};
  }
  remove_leftovers();
  const pid_t pid = ::getpid();
  const int counter = g_counter.fetch_add(1);
  const std::string prefix = "elxn" + std::to_string(pid) + "c" + std::to_string(counter);
  const std::string subnet =
      "10." + std::to_string(64 + pid % 128) + "." + std::to_string(counter % 256) + ".";
  std::vector<std::string> ips;
  for (int i = 0; i < hosts; ++i) ips.push_back(subnet + std::to_string(i + 1));
  std::unique_ptr<NetnsCluster> cluster(new NetnsCluster(prefix, std::move(ips)));
  if (auto built = cluster->build(); !built.ok()) return built.error();  // destructor cleans up
  return cluster;
}

NetnsCluster::NetnsCluster(std::string prefix, std::vector<std::string> ips)
    : prefix_(std::move(prefix)),
      ips_(std::move(ips)),
      rules_(ips_.size()),
      netem_on_(ips_.size(), false),
      relays_(ips_.size()) {}

NetnsCluster::~NetnsCluster() { destroy(); }

std::string NetnsCluster::netns(int host) const {
  (void)ips_.at(host);  // range check
  return prefix_ + "-h" + std::to_string(host);
}

std::string NetnsCluster::switch_netns() const { return prefix_ + "-s"; }

std::vector<std::string> NetnsCluster::namespaces() const {
  std::vector<std::string> names{switch_netns()};
  for (int i = 0; i < size(); ++i) names.push_back(netns(i));
  return names;
}

Status NetnsCluster::build() {
  const std::string ip = ip_binary();
  const std::string tc = tc_binary();
  const std::string sw = switch_netns();
  std::vector<std::vector<std::string>> steps = {
      {ip, "netns", "add", sw},
      {ip, "-n", sw, "link", "set", "lo", "up"},
      {ip, "-n", sw, "link", "add", "br0", "type", "bridge", "stp_state", "0"},
      {ip, "-n", sw, "link", "set", "br0", "up"},
  };
  for (int i = 0; i < size(); ++i) {
    const std::string host = netns(i);
    const std::string port = "p" + std::to_string(i);
    std::vector<std::vector<std::string>> host_steps = {
        {ip, "netns", "add", host},
        {ip, "-n", host, "link", "set", "lo", "up"},
        // Created inside the switch with its peer moved straight into the host: the root
        // namespace never sees either end.
        {ip, "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host},
        {ip, "-n", sw, "link", "set", port, "master", "br0"},
        {ip, "-n", sw, "link", "set", port, "up"},
        {ip, "-n", host, "addr", "add", ips_[i] + "/24", "dev", "eth0"},
        {ip, "-n", host, "link", "set", "eth0", "up"},
        {tc, "-n", host, "qdisc", "add", "dev", "eth0", "clsact"},
    };
    steps.insert(steps.end(), host_steps.begin(), host_steps.end());
  }
  for (const auto& step : steps) {
    if (auto done = command(step); !done.ok()) {
      return Error{"Building namespace cluster " + prefix_ + " failed: " + done.error().message};
    }
  }
  return ok_status();
}

void NetnsCluster::destroy() {
  if (destroyed_) return;
  destroyed_ = true;
  // Delay lines first, by pid (each Process SIGKILLs and reaps its own); kill_and_delete below
  // would find them in the switch too, but could not reap them.
  for (auto& relay : relays_) relay.reset();
  if (!relay_log_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(relay_log_dir_, ignored);
  }
  // Hosts first: their processes die and their eth0 ends vanish, then the switch.
  for (int i = 0; i < size(); ++i) kill_and_delete(netns(i));
  kill_and_delete(switch_netns());
}

std::unique_ptr<testing::Process> NetnsCluster::run(int host, const std::vector<std::string>& argv,
                                                    const std::map<std::string, std::string>& env,
                                                    const std::string& log_dir,
                                                    const std::string& name) {
  std::vector<std::string> full{ip_binary(), "netns", "exec", netns(host)};
  full.insert(full.end(), argv.begin(), argv.end());
  return std::make_unique<testing::Process>(full, env, log_dir, name);
}

testing::RunResult NetnsCluster::exec(int host, const std::vector<std::string>& argv,
                                      std::chrono::milliseconds timeout) {
  std::vector<std::string> full{ip_binary(), "netns", "exec", netns(host)};
  full.insert(full.end(), argv.begin(), argv.end());
  return testing::run(full, {}, timeout);
}

Status NetnsCluster::apply_filter(int host) {
  const auto& rules = rules_.at(host);
  const std::string ns = netns(host);
  if (rules.blocked.empty() && rules.loss_percent <= 0) {
    // Deleting a filter that is not there fails; that is the state we want anyway.
    const auto shown = testing::run(
        {tc_binary(), "-n", ns, "filter", "show", "dev", "eth0", "egress"}, {}, kCommandTimeout);
    if (shown.out.find("bpf") == std::string::npos) return ok_status();
    return command({tc_binary(), "-n", ns, "filter", "del", "dev", "eth0", "egress", "pref", "1"});
  }
  std::vector<std::uint32_t> blocked;
  for (const int other : rules.blocked) blocked.push_back(ipv4_value(ips_.at(other)));
  return command({tc_binary(), "-n", ns, "filter", "replace", "dev", "eth0", "egress", "pref", "1",
                  "handle", "1", "bpf", "da", "bytecode",
                  filter_bytecode(blocked, rules.loss_percent)});
}

Status NetnsCluster::cut(int a, int b) {
  if (a == b) return Error{"Cannot cut host " + std::to_string(a) + " from itself."};
  rules_.at(a).blocked.insert(b);
  rules_.at(b).blocked.insert(a);
  if (auto done = apply_filter(a); !done.ok()) return done;
  return apply_filter(b);
}

Status NetnsCluster::heal(int a, int b) {
  rules_.at(a).blocked.erase(b);
  rules_.at(b).blocked.erase(a);
  if (auto done = apply_filter(a); !done.ok()) return done;
  return apply_filter(b);
}

Status NetnsCluster::partition(const std::vector<int>& side_a, const std::vector<int>& side_b) {
  for (const int a : side_a) {
    for (const int b : side_b) {
      if (a == b) return Error{"Host " + std::to_string(a) + " is on both sides of a partition."};
      rules_.at(a).blocked.insert(b);
      rules_.at(b).blocked.insert(a);
    }
  }
  std::set<int> touched(side_a.begin(), side_a.end());
  touched.insert(side_b.begin(), side_b.end());
  for (const int host : touched) {
    if (auto done = apply_filter(host); !done.ok()) return done;
  }
  return ok_status();
}

Status NetnsCluster::heal_all() {
  for (int host = 0; host < size(); ++host) {
    rules_[host] = HostRules{};
    if (auto done = apply_filter(host); !done.ok()) return done;
  }
  return ok_status();
}

Status NetnsCluster::set_loss(int host, double percent) {
  if (!(percent >= 0 && percent <= 100)) {
    return Error{"Loss must be 0 to 100 percent, not " + std::to_string(percent) + "."};
  }
  rules_.at(host).loss_percent = percent;
  return apply_filter(host);
}

Status NetnsCluster::set_delay(int host, std::chrono::milliseconds delay,
                               std::chrono::milliseconds jitter) {
  const std::string ns = netns(host);
  if (delay.count() > 0 && (jitter.count() < 0 || jitter > delay)) {
    return Error{"A delay's jitter must be 0 to the delay (" + std::to_string(delay.count()) +
                 " ms), not " + std::to_string(jitter.count()) + " ms."};
  }
  if (!netem_available()) {
    if (delay.count() <= 0) return stop_delay_line(host);
    return start_delay_line(host, delay, jitter);
  }
  if (delay.count() <= 0) {
    if (!netem_on_.at(host)) return ok_status();
    netem_on_[host] = false;
    return command({tc_binary(), "-n", ns, "qdisc", "del", "dev", "eth0", "root"});
  }
  std::vector<std::string> argv{tc_binary(), "-n", ns, "qdisc", "replace", "dev", "eth0", "root"};
  argv.insert(argv.end(), {"netem", "delay", std::to_string(delay.count()) + "ms"});
  if (jitter.count() > 0) argv.push_back(std::to_string(jitter.count()) + "ms");
  if (auto done = command(argv); !done.ok()) {
    return Error{"Cannot delay host " + std::to_string(host) +
                 " with tc netem: " + done.error().message};
  }
  netem_on_[host] = true;
  return ok_status();
}

pid_t NetnsCluster::delay_line_pid(int host) const {
  const auto& relay = relays_.at(host);
  return relay ? relay->pid() : -1;
}

Status NetnsCluster::start_delay_line(int host, std::chrono::milliseconds delay,
                                      std::chrono::milliseconds jitter) {
  // A new delay replaces the old line (simpler than re-tuning a running one).
  if (auto stopped = stop_delay_line(host); !stopped.ok()) return stopped;
  const std::string ip = ip_binary();
  const std::string sw = switch_netns();
  const std::string index = std::to_string(host);
  const std::string port = "p" + index;
  const std::string line_end = "r" + index;
  const std::string bridge_end = "d" + index;
  const auto failed = [&](const std::string& why) -> Status {
    (void)stop_delay_line(host);
    return Error{"Cannot delay host " + index +
                 " (no sch_netem, so with the netns_delay line): " + why};
  };
  // The line's bridge side is ready before the port leaves the bridge, so the gap without a path
  // is only the line's start-up.
  const std::vector<std::vector<std::string>> steps = {
      {ip, "-n", sw, "link", "add", line_end, "type", "veth", "peer", "name", bridge_end},
      {ip, "-n", sw, "link", "set", bridge_end, "master", "br0"},
      {ip, "-n", sw, "link", "set", bridge_end, "up"},
      {ip, "-n", sw, "link", "set", line_end, "up"},
      {ip, "-n", sw, "link", "set", port, "nomaster"},
  };
  // stop_delay_line() undoes these; it must see that there is something to undo.
  line_ends_.insert(host);
  for (const auto& step : steps) {
    if (auto done = command(step); !done.ok()) return failed(done.error().message);
  }
  if (relay_log_dir_.empty()) {
    std::error_code error;
    const auto dir = std::filesystem::temp_directory_path(error) / (prefix_ + "-delay-logs");
    if (!error) std::filesystem::create_directories(dir, error);
    if (error) return failed("cannot make a log folder for it: " + error.message() + ".");
    relay_log_dir_ = dir.string();
  }
  const auto micros = [](std::chrono::milliseconds ms) {
    return std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(ms).count());
  };
  relays_.at(host) = std::make_unique<testing::Process>(
      std::vector<std::string>{ip, "netns", "exec", sw, NETNS_DELAY_PATH, port, line_end,
                               micros(delay), micros(jitter)},
      std::map<std::string, std::string>{}, relay_log_dir_, "delay" + index);
  auto& relay = *relays_[host];
  const bool ready = testing::wait_until(
      [&] { return relay.out().find("ready") != std::string::npos || !relay.running(); }, 10s);
  if (!ready || relay.out().find("ready") == std::string::npos) {
    std::string err = relay.err();
    while (!err.empty() && err.back() == '\n') err.pop_back();
    return failed(NETNS_DELAY_PATH + std::string(" did not start: ") +
                  (err.empty() ? "no message." : err));
  }
  return ok_status();
}

Status NetnsCluster::stop_delay_line(int host) {
  Status first = ok_status();
  const auto step = [&](const std::vector<std::string>& argv) {
    if (auto done = command(argv); !done.ok() && first.ok()) first = done;
  };
  if (auto& relay = relays_.at(host)) {
    relay->signal(SIGTERM);
    // Process's destructor SIGKILLs it if it did not stop in time, and reaps it either way. A
    // line that had died, or did not stop cleanly (a sanitizer report, say), is an Error.
    const auto status = relay->wait(5s);
    if (!status || !status->exited_with(0)) {
      std::string err = relay->err();
      while (!err.empty() && err.back() == '\n') err.pop_back();
      first = Error{"netns_delay " +
                    (status ? "exited with code " + std::to_string(status->code) + ", signal " +
                                  std::to_string(status->signal)
                            : std::string("did not stop on SIGTERM")) +
                    (err.empty() ? "." : ": " + err)};
    }
    relay.reset();
  }
  if (line_ends_.erase(host) == 0) return first;
  const std::string ip = ip_binary();
  const std::string sw = switch_netns();
  const std::string index = std::to_string(host);
  // Back on the bridge first, then the pair goes (deleting one end deletes both).
  step({ip, "-n", sw, "link", "set", "p" + index, "master", "br0"});
  const auto links = testing::run({ip, "-n", sw, "-o", "link", "show"}, {}, kCommandTimeout);
  if (links.out.find(" r" + index + "@") != std::string::npos) {
    step({ip, "-n", sw, "link", "del", "r" + index});
  }
  if (!first.ok()) {
    return Error{"Cannot remove host " + index + "'s delay line: " + first.error().message};
  }
  return ok_status();
}

}  // namespace elastic::netns
