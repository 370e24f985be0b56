// NetnsCluster: N hosts as Linux network namespaces on one private switch, for tests that run
// real daemons over a real network stack and cut, heal and degrade its links.
//
// Topology (nothing is added to the root namespace: no interface, route or address):
//
//   <prefix>-s   the "switch": a bridge br0 with one port p<i> per host
//   <prefix>-h<i> host i: loopback up, eth0 (the veth peer of p<i>) with 10.A.B.(i+1)/24
//
// The hosts have only the connected /24 route, so they can reach only each other: traffic to
// any other address fails with ENETUNREACH and never leaves the namespaces. Each cluster has its
// own switch, so clusters are isolated even if two used the same subnet; the subnet still differs
// per cluster (A from the pid, B from a counter) so logs from parallel tests are not confusing.
// <prefix> is "elxn<pid>c<counter>": unique per process and cluster, so tests run in parallel
// with themselves, and short (interface names are per namespace, so only "br0", "p<i>" and
// "eth0" are ever limited to 15 characters).
//
// Faults are one classic-BPF tc filter (cls_bpf, direct action) on each host's eth0 egress
// under a clsact qdisc, rebuilt whenever that host's rules change:
//   - cut(a, b): a drops every IPv4 packet to b and b every IPv4 packet to a (silent loss, as a
//     broken link looks to TCP: no ICMP, no RST); partition() cuts every cross pair;
//   - set_loss(h, p): h drops p% of the IPv4 packets it sends (the BPF random number source).
// We use cls_bpf rather than tc netem/gact because it works on minimal kernels too (the dev VM's
// kernel has neither sch_netem nor act_gact) and needs no nftables.
//
// Delay: set_delay(h, d) uses tc netem on h's eth0 where the kernel has sch_netem
// (netem_available()). Kernels without it (the dev VM has only htb/tbf/pfifo, no netem, fq or
// etf, so no qdisc can hold packets for a time) get a userspace delay line instead, in the
// switch:
//
//   host h eth0 ==veth== p<h> --[netns_delay]-- r<h> ==veth== d<h> -- br0
//
// p<h> leaves the bridge, a new veth pair r<h>/d<h> is made with d<h> on the bridge, and the
// netns_delay process (netns_delay.cc, run by pid in the switch namespace) copies every frame
// between p<h> and r<h> through AF_PACKET sockets, holding h's egress frames for d (+ jitter,
// order kept) and passing frames to h at once, as netem on eth0 would. Cut and loss filters sit
// on eth0 inside the host, before the delay line, so they keep applying unchanged. Changing a
// delay restarts the line (frames in flight are lost, as on a re-plugged link); set_delay(h, 0)
// kills it by pid, puts p<h> back on the bridge and deletes r<h>/d<h>. Switching a host over
// drops the few frames sent meanwhile (milliseconds), never duplicates them.
//
// Processes: run() starts argv inside a host's namespace through `ip netns exec` (which execs,
// so the Process's pid is the program's pid: signals, /proc/<pid>/stat and kill -9 hit it).
//
// Cleanup: the destructor stops its delay lines by pid, SIGKILLs (by pid) every process still
// inside the cluster's namespaces (only this cluster's processes can be there), then deletes the
// namespaces, which removes every veth, the delay lines' extra pairs and the bridge with them.
// Delay lines die with the test process (PR_SET_PDEATHSIG) and live in the switch namespace, so
// the leftover cleaner below removes theirs too, and their log folders
// ($TMPDIR/<prefix>-delay-logs) by the same dead-owner rule. create() first removes leftovers of
// crashed earlier runs: the namespaces named elxn<pid>c* whose <pid> is no longer running (never
// anyone else's names).
//
// Errors: create() and every fault call return Result/Status with a sentence that includes the
// failing command and its stderr. Needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN) and iproute2;
// check_environment() says which is missing.
// Thread safety: a NetnsCluster belongs to one test thread; different clusters are independent.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/result.h"
#include "tests/support/process.h"

namespace elastic::netns {

class NetnsCluster {
 public:
  // Root, `ip` and the kernel features the harness needs (netns, veth, bridge, clsact, cls_bpf).
  // The Error says exactly what is missing.
  static Status check_environment();
  // Whether the kernel has sch_netem (set_delay uses it if so, else a userspace delay line).
  static bool netem_available();
  // Deletes namespaces (and delay-line log folders) named like ours whose owning pid is dead;
  // returns how many namespaces it removed.
  static int remove_leftovers();

  // Builds the switch and `hosts` hosts (1..250). On error nothing is left behind.
  static Result<std::unique_ptr<NetnsCluster>> create(int hosts);
  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  int size() const { return static_cast<int>(ips_.size()); }
  const std::string& prefix() const { return prefix_; }
  const std::string& ip(int host) const { return ips_.at(host); }
  std::string netns(int host) const;            // the host's namespace name
  std::string switch_netns() const;             // the switch's namespace name
  std::vector<std::string> namespaces() const;  // every namespace this cluster made

  // Starts argv (argv[0] a path) inside `host`; stdout/stderr go to <log_dir>/<name>.{out,err}.
  std::unique_ptr<testing::Process> run(int host, const std::vector<std::string>& argv,
                                        const std::map<std::string, std::string>& env,
                                        const std::string& log_dir, const std::string& name);
  // Runs argv inside `host` to completion (killed after `timeout`).
  testing::RunResult exec(int host, const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout);

  // Link faults; every call applies at once (existing TCP connections included).
  Status cut(int a, int b);
  Status heal(int a, int b);
  // Cuts every pair across the two sides (hosts in neither side are untouched).
  Status partition(const std::vector<int>& side_a, const std::vector<int>& side_b);
  // Removes every cut and every loss rule (delays stay; set_delay(h, 0) removes one).
  Status heal_all();
  // Drops `percent` (0..100) of the IPv4 packets `host` sends; 0 removes the rule.
  Status set_loss(int host, double percent);
  // Delays every packet `host` sends by `delay`, plus a uniform jitter within +-`jitter`
  // (<= delay; order is kept with the delay line, netem may reorder); 0 removes it. tc netem
  // where the kernel has it, else the netns_delay line (see the top of this file).
  Status set_delay(int host, std::chrono::milliseconds delay,
                   std::chrono::milliseconds jitter = std::chrono::milliseconds(0));
  // Whether `host` has a delay (either mechanism).
  bool delayed(int host) const { return netem_on_.at(host) || relays_.at(host) != nullptr; }
  // The pid of `host`'s delay line, or -1 (none, or netem does the delay).
  pid_t delay_line_pid(int host) const;

 private:
  NetnsCluster(std::string prefix, std::vector<std::string> ips);
  Status build();
  Status apply_filter(int host);
  Status start_delay_line(int host, std::chrono::milliseconds delay,
                          std::chrono::milliseconds jitter);
  // Best effort: every step runs even if an earlier one failed; the first Error is returned.
  Status stop_delay_line(int host);
  void destroy();

  struct HostRules {
    std::set<int> blocked;  // hosts whose address this host's egress drops
    double loss_percent = 0;
  };

  std::string prefix_;
  std::vector<std::string> ips_;
  std::vector<HostRules> rules_;
  std::vector<bool> netem_on_;
  std::vector<std::unique_ptr<testing::Process>> relays_;  // per host; null if none
  // $TMPDIR/<prefix>-delay-logs: the lines' stdout/stderr, made with the first line.
  std::string relay_log_dir_;
  std::set<int> line_ends_;  // hosts whose p<h> is off the bridge, with an r<h>/d<h> pair
  bool destroyed_ = false;
};

// The first `ip` binary found in /usr/sbin, /sbin, /usr/bin, /bin ("" if none).
std::string ip_binary();

}  // namespace elastic::netns
