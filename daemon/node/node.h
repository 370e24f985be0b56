// Node: the elasticd shell. It owns what touches the world -- the ZeroMQ transport, the control
// socket, the metrics and dashboard HTTP servers, the signal fd, systemd notification, the Raft
// files and the Spawner it opens -- and one NodeCore (node_core.h) that makes every decision. Its
// loop gathers inputs for the core (envelopes, dropped connections, failed sends, client calls,
// worker progress, the time) and carries out the core's outputs (sends, replies). Control requests
// are dispatched by verb from one table (control/verbs.h, kControlHandlers); verbs of the job table
// become core calls to the Raft leader.
//
// Identity (start()):
//  - name: node.name, or the hostname when "";
//  - generation: transport::reserve_generation(node.state_dir) first, which creates the
//    directory; a state dir that cannot be created or written fails start with
//    kExitCantCreate (73). It is committed only when start() has opened everything, so a
//    start that fails (port in use, keys, data_dir) leaves no trace and can simply be retried;
//  - address: transport.advertise if set, else the bound endpoint; when bind's host is a
//    wildcard (0.0.0.0, *) the host part is derived by derive_advertise_host();
//  - cluster: node.cluster_id; messages of other clusters are dropped by the transport.
//
// Seeds: Membership knows a seed only by its address (its joins carry an empty Outgoing::to).
// The core remembers the name configured as "name@host:port" per seed address and sends to that
// name, so a CURVE client can find the seed's public key; an unnamed seed with CURVE on fails to
// send (config validation already refuses that combination).
//
// Loop (run()): wait in transport.receive() on the ROUTER, the control socket, the signal fd and
// the spawner's fd until the core's next_deadline() (at least once a second); handle signals
// and control requests; hand the envelopes and dropped connections to NodeCore::step() and carry
// out its output (a failed membership send or call forward goes back in as the next input);
// stamp the leader the core believes in on outgoing envelopes; close idle peers. Time is the
// Clock's (steady_clock in elasticd).
// Lifecycle (systemd: notify.h; the unit is systemd/elasticd.service):
//  - Bound and listening: logs one line (tests read the address from it)
//      elasticd ready: name=<n> generation=<g> address=<a> control=<path>[ metrics=<host:port>]
//    (metrics= when control.metrics_listen is set: the bound address, port 0 resolved; also
//    "metrics" in `status`). A metrics address that cannot be bound fails start with exit 69.
//    Likewise " dashboard=<host:port>" when dashboard.listen is set (the default), "dashboard"
//    in `status`; a dashboard address that cannot be bound fails start with exit 69 naming
//    dashboard.listen, and a dashboard.token_file that cannot be read (or is empty) with 78.
//  - Joined: READY=1 to systemd (and the log line "elasticd joined: ..."): at once for a node
//    without seeds (other than itself); otherwise once a seed or member answered and this node
//    is alive in membership. READY does not wait for a Raft leader: the first voter of a
//    3-voter cluster has none until a second voter starts, and systemd would time its start out.
//    STATUS= lines follow the state ("joining via 2 seeds", "member of 3 nodes (3 alive);
//    leader n1 term 4; 1 job, 2 workers", "draining: ...", "reload failed: ...") and are sent
//    only when the text changes.
//  - SIGTERM or SIGINT: drain. STOPPING=1; the node takes no new rounds, tells the leader it is
//    leaving (RoundService::announce_leaving: the leader re-plans its jobs without it as a lost
//    member, which costs no restart, and excuses its round's worker failures), SIGTERMs its
//    workers and keeps serving peers and elasticctl while they stop, SIGKILLs what is left after
//    spawner.stop_grace, then leaves membership gracefully (Membership::leave, then up to
//    kLeaveFlush spent serving the loop until every queued send has gone out or failed), and
//    run() returns 0. A second SIGTERM/SIGINT during the drain SIGKILLs the workers at once.
//  - SIGHUP: reload (set_reload): RELOADING=1, re-read the same file with the same --set
//    overrides; an invalid config, or anything that throws while it is read, changes nothing
//    and never stops the daemon (logged, STATUS says so); a valid one applies
//    its live keys (reload.h) and logs every key that needs a restart; READY=1. The result is in
//    `elasticctl status` as "config": {"source", "loaded_at_ms", "last_reload"}. The control
//    verb "reload" (root and control.admin_group; `elasticctl reload`, the unit's ExecReload)
//    runs the same reload and answers with its outcome: refused files get "code":"config".
//
// Raft: start() opens the ConsensusHost over its files (consensus_host.h) and hands it to the
// core. A voter whose log cannot be written stops the node (exit 74).
//
// Client requests (submit, cancel, jobs, job, events, voters): NodeCore::call() (node_core.h
// says how a call finds the leader, retries and is answered); the Node keeps which control
// client waits for which call and answers it when the core's reply comes out.
// A forwarded request carries the caller's uid, gid and admin flag, which the receiver acts on:
// that is safe only because CURVE (transport.curve) proves the sender holds a node key. With
// transport.curve = false (loopback only) a daemon refuses every forwarded client request
// (answered kDenied with a sentence, counted as messages_dropped reason forward_without_curve),
// so there a client must use the leader's own control socket. Nor does it act on another
// daemon's round reports (node_core.cc says why).
//
// Dashboard (dashboard.listen; daemon/dashboard/dashboard.h): its pages are constants; its /api
// paths are control requests handled exactly as the control socket's (handle_control: the
// same verb table, the leader's verbs forwarded to the leader), from a reader with the uid
// and gid of nobody (dashboard::kReaderUid), who is never an admin; the deferred answers are
// routed back to the HTTP request by a ReplyHandle with fd kDashboardReplyFd.
//
// Signals: start() blocks SIGTERM, SIGINT and SIGHUP in the calling thread before ZeroMQ starts
// its I/O threads (which inherit the mask), so they are only ever read from the signal fd. Call
// start() from the main thread before any other thread exists.
//
// Thread safety: none; one thread calls start() and run().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/control/protocol.h"
#include "daemon/core/clock.h"
#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/membership/membership.h"
#include "daemon/node/consensus_host.h"
#include "daemon/node/forward_codec.h"
#include "daemon/node/job_service.h"
#include "daemon/node/node_core.h"
#include "daemon/node/notify.h"

namespace elastic::transport {
class ZmqTransport;
}
namespace elastic::control {
class Server;
struct PeerCredentials;
struct ReplyHandle;
}  // namespace elastic::control

namespace elastic::node {

class HttpServer;
struct HttpRequest;
struct HttpResponse;

inline constexpr int kExitCantCreate = 73;  // EX_CANTCREAT: state dir or control socket
inline constexpr std::chrono::milliseconds kLeaveFlush{500};

// A failed start: what to print and which exit code to use.
struct StartFailure {
  int exit_code = 1;
  std::string message;
};

// One membership.seeds entry, "[name@]host:port". The name is what the transport needs to dial
// the seed with CURVE (it selects public_keys_dir/<name>.pub); without CURVE it is unused.
struct Seed {
  std::string name;      // "" when the entry has no "name@"
  std::string endpoint;  // "tcp://host:port"
};

// Splits a seed that config validation accepted (config/rules.cc checks the syntax).
Seed parse_seed(const std::string& seed);

// The IPv4 address peers should dial when bind's host is a wildcard: the source address of the
// route to the first seed (a connected UDP socket; no packet is sent), else the first
// non-loopback IPv4 address of an interface that is up, else 127.0.0.1.
std::string derive_advertise_host(const std::vector<std::string>& seeds);

class Node {
 public:
  // Sets up identity, transport, control socket and signal fd. On failure returns nullptr and
  // fills `failure`. Time, wall time and seeds come from `clock` (core/clock.h) and nowhere else.
  static std::unique_ptr<Node> start(const config::DaemonConfig& config, StartFailure& failure,
                                     Clock& clock = system_clock());
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Joins through the seeds and runs until SIGTERM or SIGINT; returns the exit code (0, or 74
  // when this voter can no longer write its Raft log).
  int run();

  // SIGHUP reloads through `reload` (main.cc: the same file and --set overrides as at start);
  // without one SIGHUP is logged and ignored. `source` describes where the running config
  // came from (LoadedConfig::source).
  using Reloader = std::function<Result<config::LoadedConfig>()>;
  void set_reload(Reloader reload, std::string source);

 private:
  explicit Node(Clock& clock);
  // Carries out the core's output: sends (failed membership sends and call forwards go back in
  // as input, a few passes until nothing new comes of it) and replies to control clients.
  void carry_out(TimePoint now, CoreOutput output);
  void handle_signals(TimePoint now);
  void leave_gracefully();
  // Control requests: one handler per verb of control::verbs() (control/verbs.h): the leader's
  // verbs go to control_to_leader, the others to their entry in kControlHandlers, after the
  // table's caller rule is checked. A handler returns the reply, or
  // nullopt when the reply comes later through the handle (a call to the leader or a node).
  struct ControlCall {
    const control::Request& request;
    const control::PeerCredentials& peer;
    const control::ReplyHandle& handle;
    TimePoint now;
  };
  using ControlHandler = std::optional<std::string> (Node::*)(const ControlCall& call);
  struct ControlEntry {
    std::string_view verb;
    ControlHandler handler;
  };
  static const ControlEntry kControlHandlers[];
  std::optional<std::string> handle_control(const control::Request& request,
                                            const control::PeerCredentials& peer,
                                            control::ReplyHandle handle);
  std::optional<std::string> control_to_leader(const ControlCall& call);
  std::optional<std::string> control_logs(const ControlCall& call);
  std::optional<std::string> control_progress(const ControlCall& call);
  std::optional<std::string> control_topology(const ControlCall& call);
  std::optional<std::string> control_nodes(const ControlCall& call);
  std::optional<std::string> control_reload(const ControlCall& call);
  std::optional<std::string> control_status(const ControlCall& call);
  // Hands `call` to the core (target "" = the leader, else the named node); the reply goes back
  // through the call's handle when the core answers it.
  void start_call(const ControlCall& call, const std::string& session, const std::string& target,
                  Duration timeout);
  bool is_admin(const control::PeerCredentials& peer) const;
  // One dashboard request (see the header comment): a page, or an /api read answered now or
  // later (through dashboard_->respond()).
  std::optional<HttpResponse> serve_dashboard(const HttpRequest& request, std::uint64_t id);
  static constexpr int kDashboardReplyFd = -3;  // ReplyHandle.fd of a dashboard read
  TimePoint next_deadline(TimePoint now) const;
  control::SelfInfo self_info(TimePoint now) const;
  // Metrics (node_metrics.cc): the text of one scrape, and control requests counted by verb.
  std::string render_metrics(TimePoint now) const;
  void count_control_request(const std::string& verb);

  // Lifecycle (see the header comment): readiness, STATUS, reload and drain.
  struct Lifecycle {
    Notifier notifier;
    Reloader reload;
    std::string source;             // where the running config came from
    std::int64_t loaded_at_ms = 0;  // wall clock, ms since the epoch
    std::int64_t reload_at_ms = 0;  // 0 = never reloaded
    bool reload_ok = true;
    std::string reload_message;
    std::size_t seeds = 0;  // seeds other than this node
    bool ready = false;     // READY=1 sent
    bool draining = false;
    bool killed = false;  // the drain's grace is over: workers SIGKILLed
    TimePoint drain_deadline{};
    TimePoint next_announce{};
    TimePoint next_watchdog = kNever;
  };
  void on_stop_signal(TimePoint now, const char* signal_name, std::uint32_t from_pid);
  void reload(TimePoint now);
  // Readiness, drain progress, STATUS and the watchdog; once per loop pass.
  void update_lifecycle(TimePoint now);
  std::string status_line() const;
  std::string config_json() const;

  Clock* clock_;  // time, wall time and seeds (start())
  Lifecycle life_;
  std::string name_;
  std::uint64_t generation_ = 0;
  std::string address_;
  TimePoint started_{};
  std::unique_ptr<transport::ZmqTransport> transport_;
  std::unique_ptr<control::Server> control_;
  std::unique_ptr<HttpServer> metrics_;    // control.metrics_listen; null when "" (off)
  std::unique_ptr<HttpServer> dashboard_;  // dashboard.listen; null when "" (off)
  std::unique_ptr<NodeCore> core_;         // every decision (node_core.h)
  std::map<std::string, std::uint64_t> control_requests_;  // by verb (bounded: node_metrics.cc)
  std::uint64_t control_requests_other_ = 0;
  int signal_fd_ = -1;
  bool stop_ = false;
  std::uint64_t sends_attempted_ = 0;
  std::vector<SeedPeer> seeds_;                         // membership.seeds without this node
  std::pair<std::string, std::uint64_t> stamped_hint_;  // what the transport stamps now
  // Core call id -> the control client waiting for it (ReplyHandle fd, serial).
  std::map<std::uint64_t, std::pair<int, std::uint64_t>> replies_;
  int exit_code_ = 0;
};

}  // namespace elastic::node
