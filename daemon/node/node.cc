#include "daemon/node/node.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "daemon/control/requests.h"
#include "daemon/control/server.h"
#include "daemon/control/verbs.h"
#include "daemon/dashboard/dashboard.h"
#include "daemon/node/body_limits.h"
#include "daemon/node/host.h"
#include "daemon/node/http_server.h"
#include "daemon/node/logging.h"
#include "daemon/node/port_probe.h"
#include "daemon/node/reload.h"
#include "daemon/node/worker_log_verbs.h"
#include "daemon/rendezvous/job_codec.h"
#include "daemon/rendezvous/job_spec.h"
#include "daemon/spawner/spawner.h"
#include "daemon/topology/topology.h"
#include "daemon/transport/generation.h"
#include "daemon/transport/zmq_transport.h"
#include "daemon/wire/codec.h"

namespace elastic::node {

namespace {

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Splits "tcp://HOST:PORT" (HOST may be [v6]); false when it does not look like that.
bool split_endpoint(const std::string& endpoint, std::string& host, std::string& port) {
  constexpr std::string_view kScheme = "tcp://";
  if (endpoint.rfind(kScheme, 0) != 0) return false;
  const std::string rest = endpoint.substr(kScheme.size());
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) return false;
  host = rest.substr(0, colon);
  port = rest.substr(colon + 1);
  return true;
}

bool is_wildcard_host(const std::string& host) {
  return host == "0.0.0.0" || host == "*" || host == "::" || host == "[::]";
}

// Source address the kernel would use to reach host:port (UDP connect sends nothing).
std::string route_source(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return "";
  }
  std::string source;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t length = sizeof(local);
    char text[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr &&
        local.sin_addr.s_addr != htonl(INADDR_ANY)) {
      source = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return source;
}

std::string first_interface_address() {
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) return "";
  std::string address;
  for (ifaddrs* i = interfaces; i != nullptr && address.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) address = text;
  }
  ::freeifaddrs(interfaces);
  return address;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// A control reply as the dashboard's /api JSON.
HttpResponse api_response(std::string reply) {
  HttpResponse response =
      ok_response("application/json", std::move(reply), "Cache-Control: no-store\r\n");
  response.status = dashboard::api_status(response.body);
  return response;
}

// The token of dashboard.token_file: its first line, without surrounding white space.
Result<std::string> read_dashboard_token(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    return Error{"cannot read " + path + ": " + std::strerror(errno) + "."};
  }
  std::string line;
  std::getline(file, line);
  const auto first = line.find_first_not_of(" \t\r");
  const auto last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) return Error{path + " holds no token (its first line is empty)."};
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && (info.st_mode & S_IROTH) != 0) {
    spdlog::warn("dashboard.token_file {} is readable by every user of this host; chmod o-r it",
                 path);
  }
  return line.substr(first, last - first + 1);
}

}  // namespace

Seed parse_seed(const std::string& seed) {
  // Node names cannot contain '@' and hosts may not either, so the first '@' splits them.
  const auto at = seed.find('@');
  if (at == std::string::npos) return Seed{.name = "", .endpoint = "tcp://" + seed};
  return Seed{.name = seed.substr(0, at), .endpoint = "tcp://" + seed.substr(at + 1)};
}

std::string derive_advertise_host(const std::vector<std::string>& seeds) {
  std::string host, port;
  if (!seeds.empty() && split_endpoint(parse_seed(seeds.front()).endpoint, host, port)) {
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    const std::string source = route_source(host, port);
    if (!source.empty()) return source;
  }
  const std::string address = first_interface_address();
  return address.empty() ? "127.0.0.1" : address;
}

Node::Node(Clock& clock) : clock_(&clock) {}

std::unique_ptr<Node> Node::start(const config::DaemonConfig& config, StartFailure& failure,
                                  Clock& clock) {
  std::unique_ptr<Node> node(new Node(clock));
  node->started_ = clock.now();
  // Before ZeroMQ's threads exist: from_environment() unsets NOTIFY_SOCKET (setenv and getenv
  // race with other threads).
  node->life_.notifier = Notifier::from_environment();
  node->life_.loaded_at_ms = clock.wall_ms();

  // Before ZeroMQ creates its I/O threads: they inherit the mask, so these signals can only be
  // read from the signal fd, never delivered to a random thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) {
    failure = {1, "Cannot block SIGTERM/SIGINT/SIGHUP."};
    return nullptr;
  }
  node->signal_fd_ = ::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (node->signal_fd_ < 0) {
    failure = {1, std::string("Cannot create a signalfd: ") + std::strerror(errno) + "."};
    return nullptr;
  }
  // A client that hangs up mid-reply must not kill the daemon (sends use MSG_NOSIGNAL too).
  ::signal(SIGPIPE, SIG_IGN);

  node->name_ = config.node.name.empty() ? host_name() : config.node.name;
  // Reserved now (the transport's routing id carries it), committed at the end of start().
  auto generation = transport::reserve_generation(config.node.state_dir);
  if (!generation.ok()) {
    failure = {kExitCantCreate, generation.error().message + " (node.state_dir)"};
    return nullptr;
  }
  node->generation_ = *generation;

  // Peers need a dialable address. A wildcard bind gets a derived host; ":0" means "any port".
  transport::TransportOptions options = transport::transport_options(
      config.transport, node->name_, node->generation_, config.node.cluster_id);
  options.remote_control = transport::remote_control_options(config.control);
  options.max_body_bytes = &max_body_bytes;  // each type's limit, checked before its body is read
  std::string bind_host, bind_port;
  if (split_endpoint(options.bind, bind_host, bind_port)) {
    if (bind_port == "0") bind_port = "*";
    options.bind = "tcp://" + bind_host + ":" + bind_port;
  }
  const bool derive = options.advertise.empty() && is_wildcard_host(bind_host);
  const std::string advertise_host = derive ? derive_advertise_host(config.membership.seeds) : "";
  if (derive && bind_port != "*") options.advertise = "tcp://" + advertise_host + ":" + bind_port;
  auto opened = transport::ZmqTransport::open(options);
  if (opened.ok() && derive && bind_port == "*") {
    // The port is known only once bound: re-bind that port explicitly with the derived address
    // (the transport stamps its advertised address at open).
    std::string host, port;
    if (split_endpoint((*opened)->bound_endpoint(), host, port)) {
      opened.value().reset();
      options.bind = "tcp://" + bind_host + ":" + port;
      options.advertise = "tcp://" + advertise_host + ":" + port;
      opened = transport::ZmqTransport::open(options);
    }
  }
  if (!opened.ok()) {
    failure = {config::kExitUnavailable, opened.error().message};
    return nullptr;
  }
  node->transport_ = std::move(opened.value());
  node->address_ = node->transport_->advertised_endpoint();

  Node* self = node.get();
  auto server = control::Server::open(
      config.control.socket,
      [self](const control::Request& request, const control::PeerCredentials& peer,
             control::ReplyHandle handle) { return self->handle_control(request, peer, handle); });
  if (!server.ok()) {
    failure = {config::kExitUnavailable, server.error().message + " (control.socket)"};
    return nullptr;
  }
  node->control_ = std::move(server.value());
  node->control_->set_remote_sender([self](const std::string& route, std::string reply) {
    (void)self->transport_->send_control_reply(route, reply);
  });
  if (!config.control.metrics_listen.empty()) {
    HttpServerOptions metrics_options;
    metrics_options.what = "metrics scrapes";
    auto metrics = HttpServer::open(
        config.control.metrics_listen,
        [self](const HttpRequest& request, std::uint64_t) -> std::optional<HttpResponse> {
          if (request.path != "/metrics") {
            return text_response(404, "Metrics are served at /metrics.\n");
          }
          return ok_response("text/plain; version=0.0.4; charset=utf-8",
                             self->render_metrics(self->clock_->now()));
        },
        metrics_options);
    if (!metrics.ok()) {
      failure = {config::kExitUnavailable, metrics.error().message + " (control.metrics_listen)"};
      return nullptr;
    }
    node->metrics_ = std::move(metrics.value());
  }
  if (!config.dashboard.listen.empty()) {
    HttpServerOptions dashboard_options;
    dashboard_options.what = "the dashboard";
    // The forwarded reads answer or fail within kClientRequestTimeout; the server's own limit
    // only guards against a reply that never comes.
    dashboard_options.reply_timeout = kClientRequestTimeout + std::chrono::seconds(5);
    if (!config.dashboard.token_file.empty()) {
      auto token = read_dashboard_token(config.dashboard.token_file);
      if (!token.ok()) {
        failure = {config::kExitConfig, "dashboard.token_file: " + token.error().message};
        return nullptr;
      }
      dashboard_options.token = std::move(token.value());
    }
    auto dashboard = HttpServer::open(
        config.dashboard.listen,
        [self](const HttpRequest& request, std::uint64_t id) {
          return self->serve_dashboard(request, id);
        },
        std::move(dashboard_options));
    if (!dashboard.ok()) {
      failure = {config::kExitUnavailable, dashboard.error().message + " (dashboard.listen)"};
      return nullptr;
    }
    node->dashboard_ = std::move(dashboard.value());
  }

  const std::uint64_t seed = clock.seed() ^ node->generation_;
  // Every daemon runs Raft; those outside the current voter set stay passive (consensus_host.h).
  CoreParts parts;
  parts.jobs = std::make_unique<JobService>(clock, posix_host());
  OpenFailure raft_failure;
  parts.consensus =
      ConsensusHost::open(config, node->name_, node->generation_, *parts.jobs, clock, raft_failure);
  if (!parts.consensus) {
    failure = {raft_failure.exit_code, raft_failure.message};
    return nullptr;
  }
  // Workers: this host's binding plan and the spawner (which also ends the workers a killed
  // predecessor of this daemon left behind).
  auto machine = topology::load_this_host();
  if (!machine.ok()) {
    failure = {config::kExitUnavailable, machine.error().message};
    return nullptr;
  }
  auto plan = topology::make_plan(*machine, topology::plan_options(config));
  if (!plan.ok()) {
    failure = {config::kExitConfig, plan.error().message};
    return nullptr;
  }
  for (const std::string& note : plan->notes) spdlog::warn("topology: {}", note);
  spdlog::info("topology: {} worker slot(s), {} GPU(s), {} core(s)", plan->slots.size(),
               plan->machine.gpus.size(), plan->machine.cores.size());
  auto spawner = spawner::Spawner::open(spawner::SpawnerConfig{
      .stop_grace = config.spawner.stop_grace,
      .log_max_bytes = static_cast<std::uint64_t>(config.spawner.log_max_bytes),
      .log_keep = config.spawner.log_keep,
      .log_timestamps = config.spawner.log_timestamps,
      .cgroup_root = config.spawner.cgroup_root,
      .state_dir = config.node.state_dir});
  if (!spawner.ok()) {
    failure = {config::kExitUnavailable, spawner.error().message};
    return nullptr;
  }
  if ((*spawner)->leftovers_ended() > 0) {
    spdlog::warn("ended {} worker(s) left running by an earlier elasticd on this host",
                 (*spawner)->leftovers_ended());
  }
  parts.launcher = std::move(spawner.value());
  parts.plan = std::move(plan.value());
  parts.port_in_use = tcp_port_in_use;
  parts.host = &posix_host();
  node->core_ = std::make_unique<NodeCore>(
      Identity{.name = node->name_, .generation = node->generation_, .address = node->address_},
      config, std::move(parts), clock, seed);
  // Only now is the generation used up: a start that failed above never ran, so its retry is
  // still this node's first (a new voter bootstraps Raft only at generation 1).
  if (auto committed = transport::commit_generation(config.node.state_dir); !committed.ok()) {
    failure = {kExitCantCreate, committed.error().message + " (node.state_dir)"};
    return nullptr;
  }
  return node;
}

Node::~Node() {
  // Control, metrics and dashboard first (they call back into this Node), then the transport's
  // sockets.
  dashboard_.reset();
  metrics_.reset();
  control_.reset();
  core_.reset();  // the Spawner kills and reaps any worker still running
  transport_.reset();
  if (signal_fd_ >= 0) ::close(signal_fd_);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle: systemd readiness and STATUS, SIGHUP reload, SIGTERM drain (node.h).

void Node::set_reload(Reloader reload, std::string source) {
  life_.reload = std::move(reload);
  life_.source = std::move(source);
}

void Node::on_stop_signal(TimePoint now, const char* signal_name, std::uint32_t from_pid) {
  if (life_.draining) {
    if (!life_.killed && core_->supervisor().running_workers() > 0) {
      spdlog::warn("{} received from pid {} during the drain: killing {} now", signal_name,
                   from_pid, plural(core_->supervisor().running_workers(), "worker", "workers"));
      life_.killed = true;
      core_->kill_all(now);
    }
    return;
  }
  life_.draining = true;
  life_.killed = false;
  life_.drain_deadline = now + core_->config().spawner.stop_grace;
  life_.next_announce = now + std::chrono::seconds(1);
  if (const Status sent = life_.notifier.stopping(); !sent.ok()) {
    spdlog::warn("{}", sent.error().message);
  }
  spdlog::info(
      "{} received from pid {}: draining ({}, grace {} ms), then leaving the cluster", signal_name,
      from_pid, plural(core_->supervisor().running_workers(), "worker", "workers"),
      std::chrono::duration_cast<std::chrono::milliseconds>(core_->config().spawner.stop_grace)
          .count());
  core_->drain(now);
  update_lifecycle(now);
}

void Node::reload(TimePoint now) {
  if (!life_.reload) {
    spdlog::warn("SIGHUP: this daemon has no configuration to reload; nothing changes");
    return;
  }
  if (const Status sent = life_.notifier.reloading(); !sent.ok()) {
    spdlog::warn("{}", sent.error().message);
  }
  // A reload never stops the daemon: whatever goes wrong while reading the file and planning
  // the change is a refusal, and nothing has been applied yet.
  Result<config::LoadedConfig> loaded = Error{"the reload did not run"};
  std::optional<ReloadPlan> planned;
  try {
    loaded = life_.reload();
    if (loaded.ok()) planned = plan_reload(core_->config(), loaded->config);
  } catch (const std::exception& e) {
    loaded = Error{std::string("internal error while reading the configuration: ") + e.what()};
  } catch (...) {
    loaded = Error{"internal error while reading the configuration"};
  }
  life_.reload_at_ms = clock_->wall_ms();
  if (!loaded.ok()) {
    // load_config reports one problem per line; STATUS and the status verb want one line.
    std::string message = loaded.error().message;
    for (std::size_t at = message.find('\n'); at != std::string::npos; at = message.find('\n')) {
      message.replace(at, 1, "; ");
    }
    life_.reload_ok = false;
    life_.reload_message = message;
    spdlog::error("reload failed: {}; still running with the previous configuration", message);
  } else {
    const ReloadPlan& plan = *planned;
    for (const std::string& line : plan.applied) spdlog::info("reload: applied {}", line);
    for (const std::string& key : plan.needs_restart) {
      spdlog::warn("reload: {} changed; takes effect after a restart", key);
    }
    if (plan.apply.logging != core_->config().logging) {
      // Only the level changes live (reload.h); the sink and format stay as they are.
      if (const Status set = setup_logging(plan.apply.logging); !set.ok()) {
        spdlog::error("reload: {}", set.error().message);
      }
    }
    core_->apply_config(plan.apply);
    life_.source = loaded->source;
    life_.loaded_at_ms = life_.reload_at_ms;
    life_.reload_ok = true;
    std::string message;
    if (!plan.changed()) message = "no changes";
    if (!plan.applied.empty()) {
      message = "applied " + std::to_string(plan.applied.size()) + ":";
      for (const std::string& line : plan.applied) message += " " + line.substr(0, line.find(':'));
    }
    if (!plan.needs_restart.empty()) {
      message += std::string(message.empty() ? "" : "; ") + "after a restart:";
      for (const std::string& key : plan.needs_restart) message += " " + key;
    }
    life_.reload_message = message;
    spdlog::info("reload done ({}): {}", life_.source, message);
  }
  // READY=1 ends the reload for systemd either way: the daemon runs (with the old config when
  // the new one was refused).
  if (const Status sent = life_.notifier.ready(); !sent.ok()) {
    spdlog::warn("{}", sent.error().message);
  }
  update_lifecycle(now);
}

std::string Node::status_line() const {
  if (life_.draining) {
    const std::size_t running = core_->supervisor().running_workers();
    if (running == 0) return "draining: leaving the cluster";
    if (life_.killed) return "draining: " + plural(running, "worker", "workers") + " killed";
    return "draining: " + plural(running, "worker", "workers") + " stopping (grace " +
           std::to_string(
               std::chrono::duration_cast<std::chrono::seconds>(core_->config().spawner.stop_grace)
                   .count()) +
           "s)";
  }
  std::string line;
  if (!life_.reload_ok) {
    line = "reload failed: " + life_.reload_message +
           "; still running with the previous configuration; ";
  }
  if (!life_.ready) return line + "joining via " + plural(life_.seeds, "seed", "seeds");
  line += "member of " + plural(core_->membership().member_count(), "node", "nodes") + " (" +
          std::to_string(core_->membership().alive_count()) + " alive); ";
  const std::string leader = core_->leader();
  if (!leader.empty()) {
    line += "leader " + leader + " term " + std::to_string(core_->leader_term());
  } else {
    line += "no leader yet";
  }
  return line + "; " + plural(core_->rounds().member_rounds().size(), "job", "jobs") + ", " +
         plural(core_->supervisor().running_workers(), "worker", "workers");
}

void Node::update_lifecycle(TimePoint now) {
  // Joined: no seed to wait for, or some other member is alive (a seed or member answered).
  if (!life_.ready && !life_.draining &&
      (life_.seeds == 0 || core_->membership().alive_count() > 1)) {
    life_.ready = true;
    spdlog::info("elasticd joined: {} alive of {} known; notifying systemd: {}",
                 core_->membership().alive_count(), core_->membership().member_count(),
                 life_.notifier.enabled() ? life_.notifier.socket_path() : "no NOTIFY_SOCKET");
    if (const Status sent = life_.notifier.ready(); !sent.ok()) {
      spdlog::warn("{}", sent.error().message);
    }
    if (const auto interval = life_.notifier.watchdog_interval()) life_.next_watchdog = now;
  }
  if (life_.draining) {
    if (now >= life_.next_announce) {
      core_->announce_leaving();
      life_.next_announce = now + std::chrono::seconds(1);
    }
    if (!life_.killed && now >= life_.drain_deadline && core_->supervisor().running_workers() > 0) {
      spdlog::warn("drain: {} still running after the grace; killing them",
                   plural(core_->supervisor().running_workers(), "worker", "workers"));
      life_.killed = true;
      core_->kill_all(now);
    }
    if (core_->supervisor().running_workers() == 0) stop_ = true;
  }
  if (const Status sent = life_.notifier.status(status_line()); !sent.ok()) {
    spdlog::debug("{}", sent.error().message);
  }
  if (now >= life_.next_watchdog) {
    const auto interval = life_.notifier.watchdog_interval();
    life_.next_watchdog = interval ? now + *interval : kNever;
    if (const Status sent = life_.notifier.watchdog(); !sent.ok()) {
      spdlog::warn("{}", sent.error().message);
    }
  }
}

std::string Node::config_json() const {
  nlohmann::json config = {{"source", life_.source}, {"loaded_at_ms", life_.loaded_at_ms}};
  if (life_.reload_at_ms == 0) {
    config["last_reload"] = nullptr;
  } else {
    config["last_reload"] = {
        {"at_ms", life_.reload_at_ms}, {"ok", life_.reload_ok}, {"message", life_.reload_message}};
  }
  return config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int Node::run() {
  for (const std::string& entry : core_->config().membership.seeds) {
    const Seed seed = parse_seed(entry);
    // A seed list shared by every node names this node too; skip it by address or by name.
    if (seed.endpoint == address_ || seed.name == name_) continue;
    const bool known = std::any_of(seeds_.begin(), seeds_.end(),
                                   [&](const SeedPeer& s) { return s.endpoint == seed.endpoint; });
    if (!known) seeds_.push_back(SeedPeer{.endpoint = seed.endpoint, .name = seed.name});
  }
  carry_out(clock_->now(), core_->join(clock_->now(), seeds_));
  spdlog::info("elasticd ready: name={} generation={} address={} control={}{}{}", name_,
               generation_, address_, control_->path(),
               metrics_ ? " metrics=" + metrics_->bound_address() : std::string(),
               dashboard_ ? " dashboard=" + dashboard_->bound_address() : std::string());
  if (dashboard_) {
    // On loopback (the default) it is reached from elsewhere through an SSH tunnel.
    const std::string& at = dashboard_->bound_address();
    const std::string port = at.substr(at.rfind(':') + 1);
    const bool loopback = at.rfind("127.", 0) == 0 || at.rfind("[::1]", 0) == 0;
    spdlog::info("dashboard: http://{}/{}", at,
                 loopback ? " (from elsewhere: ssh -L " + port + ":" + at +
                                " <this host>, then http://127.0.0.1:" + port + "/)"
                          : std::string());
  }
  life_.seeds = seeds_.size();
  update_lifecycle(clock_->now());

  while (!stop_) {
    TimePoint now = clock_->now();
    const Duration wait = std::max(Duration::zero(), next_deadline(now) - now);
    std::vector<int> watched = {control_->fd(), signal_fd_, core_->launcher_fd()};
    if (metrics_) watched.push_back(metrics_->fd());
    if (dashboard_) watched.push_back(dashboard_->fd());
    transport::Received received = transport_->receive(wait, watched);
    now = clock_->now();
    if (std::find(received.readable_fds.begin(), received.readable_fds.end(), signal_fd_) !=
        received.readable_fds.end()) {
      handle_signals(now);
    }
    control_->process(now);
    for (const transport::ControlRequest& remote : received.control_requests) {
      control_->handle_remote(now, remote.route, remote.user, remote.body);
    }
    if (metrics_) metrics_->process(now);
    if (dashboard_) dashboard_->process(now);
    carry_out(now, core_->take_output());
    if (stop_) break;
    CoreInput input;
    input.envelopes = std::move(received.envelopes);
    for (const transport::PeerDisconnect& lost : transport_->take_disconnects()) {
      input.disconnected.push_back(lost.name);
    }
    carry_out(now, core_->step(now, std::move(input)));
    if (core_->raft_failed()) {
      exit_code_ = kExitIoError;
      break;
    }
    update_lifecycle(now);
    if (stop_) break;
    // The transport stamps the leader this daemon believes in on every envelope (gossip hints).
    std::pair<std::string, std::uint64_t> hint{core_->leader(), core_->leader_term()};
    if (!hint.first.empty() && hint != stamped_hint_) {
      stamped_hint_ = hint;
      transport_->set_leader_hint(hint.first, hint.second);
    }
    transport_->close_idle(now);
  }
  // Workers first: none may outlive the daemon, and a graceful stop lets them checkpoint (after
  // a drain there are none left; after a Raft log failure this blocks up to the grace).
  core_->shutdown(core_->config().spawner.stop_grace);
  leave_gracefully();
  core_->abandon_calls("The daemon is stopping.");
  carry_out(clock_->now(), core_->take_output());
  spdlog::info("elasticd stopped: name={} generation={}", name_, generation_);
  return exit_code_;
}

TimePoint Node::next_deadline(TimePoint now) const {
  // Wake at least once a second so idle peers get closed even when membership is quiet.
  TimePoint deadline =
      std::min({core_->next_deadline(), control_->next_deadline(), now + std::chrono::seconds(1)});
  deadline = std::min(deadline, life_.next_watchdog);
  if (life_.draining) deadline = std::min({deadline, life_.drain_deadline, life_.next_announce});
  if (metrics_) deadline = std::min(deadline, metrics_->next_deadline());
  if (dashboard_) deadline = std::min(deadline, dashboard_->next_deadline());
  return deadline;
}

void Node::handle_signals(TimePoint now) {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    if (info.ssi_signo == SIGHUP) {
      spdlog::info("SIGHUP received from pid {}: reloading the configuration", info.ssi_pid);
      reload(now);
    } else {
      on_stop_signal(now, info.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT", info.ssi_pid);
    }
  }
}

void Node::carry_out(TimePoint now, CoreOutput output) {
  // A failed membership send is fed back as unreachable, which may produce more sends
  // (indirect probes); a few passes settle it, and anything left waits for the next loop pass.
  for (int pass = 0; pass < 4; ++pass) {
    for (const CallReply& reply : output.replies) {
      const auto waiting = replies_.find(reply.call);
      if (waiting == replies_.end()) continue;
      const control::ReplyHandle handle{.fd = waiting->second.first,
                                        .serial = waiting->second.second};
      replies_.erase(waiting);
      std::string body =
          reply.outcome == ForwardOutcome::kOk
              ? reply.body
              : control::encode_error_reply(reply.body, reply.outcome == ForwardOutcome::kDenied
                                                            ? control::ErrorCode::kPermission
                                                            : control::ErrorCode::kNone);
      if (handle.fd == kDashboardReplyFd) {
        if (dashboard_) {
          dashboard_->respond(handle.serial, api_response(std::move(body)), now);
        }
        continue;
      }
      control_->reply(handle, std::move(body));
    }
    CoreInput failed;
    for (PeerSend& send : output.sends) {
      ++sends_attempted_;
      const std::string address = send.address;
      const Status sent = transport_->send(
          transport::PeerAddress{.address = send.address, .name = std::move(send.to)},
          std::move(send.envelope));
      if (sent.ok()) continue;
      spdlog::debug("send to {} failed: {}", address, sent.error().message);
      if (send.membership) failed.unreachable.push_back(address);
      if (send.call != 0) failed.unsent_calls.push_back(send.call);
    }
    if (failed.unreachable.empty() && failed.unsent_calls.empty()) return;
    output = core_->step(now, std::move(failed));
  }
}

void Node::leave_gracefully() {
  TimePoint now = clock_->now();
  carry_out(now, core_->leave(now));
  // Keep serving (peers may probe us and learn we left) until every queued send has gone to
  // ZeroMQ or failed, or kLeaveFlush passes.
  const TimePoint deadline = now + kLeaveFlush;
  while (true) {
    const transport::TransportStats stats = transport_->stats();
    if (stats.sent + stats.send_failures >= sends_attempted_) break;
    now = clock_->now();
    if (now >= deadline) {
      spdlog::warn("leaving: {} messages still queued after {} ms; dropping them",
                   sends_attempted_ - stats.sent - stats.send_failures, kLeaveFlush.count());
      break;
    }
    transport::Received received =
        transport_->receive(std::min<Duration>(deadline - now, std::chrono::milliseconds(20)));
    now = clock_->now();
    CoreInput input;
    input.envelopes = std::move(received.envelopes);
    carry_out(now, core_->step(now, std::move(input)));
  }
}

control::SelfInfo Node::self_info(TimePoint now) const {
  return control::SelfInfo{.name = name_,
                           .generation = generation_,
                           .address = address_,
                           .cluster_id = core_->config().node.cluster_id,
                           .uptime_s = to_ms(now - started_) / 1000.0};
}

bool Node::is_admin(const control::PeerCredentials& peer) const {
  // The dashboard's reader is nobody, whatever groups nobody may have on this host.
  if (peer.pid == 0 && peer.uid == dashboard::kReaderUid && peer.remote_user.empty()) return false;
  // Root, the caller's primary gid, or the user's groups (getgrouplist): control/credentials.h.
  return control::is_admin(peer, core_->config().control.admin_group);
}

// The handler of each verb of control::verbs() that this daemon serves itself; the leader's
// verbs (Route::kLeader) all go to control_to_leader, so the table's route decides that and
// they are not repeated here. handle_control() checks the table's caller rule first. A served
// verb without an entry would be answered as unknown: control_abuse_integ sends every verb of
// the table to a daemon and checks that none is.
const Node::ControlEntry Node::kControlHandlers[] = {
    {"status", &Node::control_status},  {"nodes", &Node::control_nodes},
    {"logs", &Node::control_logs},      {"topology", &Node::control_topology},
    {"reload", &Node::control_reload},  {"progress", &Node::control_progress},
    {"log_files", &Node::control_logs},
};

std::optional<std::string> Node::handle_control(const control::Request& request,
                                                const control::PeerCredentials& peer,
                                                control::ReplyHandle handle) {
  spdlog::debug("control request \"{}\" from pid {} uid {} gid {}", request.verb, peer.pid,
                peer.uid, peer.gid);
  count_control_request(request.verb);
  const control::Verb* verb = control::find_verb(request.verb);
  ControlHandler handler = nullptr;
  if (verb != nullptr && verb->route == control::Route::kLeader) {
    handler = &Node::control_to_leader;
  } else if (verb != nullptr) {
    const auto entry = std::find_if(std::begin(kControlHandlers), std::end(kControlHandlers),
                                    [&](const ControlEntry& e) { return e.verb == verb->name; });
    if (entry != std::end(kControlHandlers)) handler = entry->handler;
  }
  if (handler == nullptr) {
    return control::encode_error_reply(control::unknown_verb_message(request.verb));
  }
  if (verb->caller == control::Caller::kAdmin && !is_admin(peer)) {
    return control::encode_error_reply(control::admin_only_message(*verb),
                                       control::ErrorCode::kPermission);
  }
  return (this->*handler)(ControlCall{request, peer, handle, clock_->now()});
}

void Node::start_call(const ControlCall& call, const std::string& session,
                      const std::string& target, Duration timeout) {
  const std::uint64_t id =
      core_->call(call.now,
                  ClientRequest{.verb = call.request.verb,
                                .args = call.request.text,
                                .uid = static_cast<std::uint32_t>(call.peer.uid),
                                .gid = static_cast<std::uint32_t>(call.peer.gid),
                                .admin = is_admin(call.peer),
                                .client_id = "",
                                .client_seq = 1},
                  session, target, timeout);
  replies_.emplace(id, std::make_pair(call.handle.fd, call.handle.serial));
}

// The job table's verbs: served by the Raft leader, wherever it is.
std::optional<std::string> Node::control_to_leader(const ControlCall& call) {
  start_call(call, name_ + "/" + std::to_string(generation_), "", kClientRequestTimeout);
  return std::nullopt;
}

// A worker's progress (trainer/progress.h): checked by the supervisor, then to the leader.
// Rate-limited there; the worker is answered at once either way.
std::optional<std::string> Node::control_progress(const ControlCall& call) {
  const auto& request = call.request;
  const auto& peer = call.peer;
  const TimePoint now = call.now;
  Status accepted = core_->on_progress(now, static_cast<std::uint32_t>(peer.uid), request.text);
  if (!accepted.ok()) return control::encode_error_reply(accepted.error().message);
  return std::string(R"({"ok":true})");
}

std::optional<std::string> Node::control_topology(const ControlCall&) {
  nlohmann::json reply = {{"ok", true}, {"node", name_}};
  reply["topology"] = nlohmann::json::parse(topology::to_json(core_->supervisor().plan()), nullptr,
                                            /*allow_exceptions=*/false);
  return reply.dump();
}

// A worker log, or the list of a job's log files ("logs", "log_files"): served here when the
// request names this node (or none), else by the named one.
std::optional<std::string> Node::control_logs(const ControlCall& call) {
  const auto& request = call.request;
  const auto& peer = call.peer;
  const Result<std::string> node = worker_log_verb_node(request.verb, request.text);
  if (!node.ok()) return control::encode_error_reply(node.error().message);
  const std::string target = *node;
  if (target.empty() || target == name_) {
    bool denied = false;
    auto served = core_->serve_node_verb(
        request.verb, request.text, static_cast<std::uint32_t>(peer.uid), is_admin(peer), &denied);
    if (served.ok()) return *served;
    return control::encode_error_reply(served.error().message, denied
                                                                   ? control::ErrorCode::kPermission
                                                                   : control::ErrorCode::kNone);
  }
  start_call(call, "", target, std::chrono::seconds(5));
  return std::nullopt;
}

std::optional<std::string> Node::control_nodes(const ControlCall& call) {
  const TimePoint now = call.now;
  control::NodesReply reply;
  reply.self = self_info(now);
  for (const membership::MemberView& member : core_->membership().members()) {
    reply.members.push_back(control::MemberRow{
        .name = member.name,
        .state = wire::member_state_name(member.state),
        .incarnation = member.incarnation,
        .generation = member.generation,
        .address = member.address,
        .last_heard_ms_ago =
            member.last_heard == TimePoint{} ? -1.0 : to_ms(now - member.last_heard),
        .state_since_ms_ago = to_ms(now - member.state_since)});
  }
  const membership::Stats& s = core_->membership().stats();
  reply.stats = control::MembershipCounters{.probes = s.probes,
                                            .probe_timeouts = s.probe_timeouts,
                                            .indirect_probes = s.indirect_probes,
                                            .nacks_received = s.nacks_received,
                                            .suspicions = s.suspicions,
                                            .deaths = s.deaths,
                                            .refutations = s.refutations,
                                            .messages_sent = s.messages_sent,
                                            .messages_received = s.messages_received,
                                            .local_health = s.local_health};
  const transport::TransportStats t = transport_->stats();
  reply.transport =
      control::TransportCounters{.sent = t.sent,
                                 .received = t.received,
                                 .send_failures = t.send_failures,
                                 .dropped_malformed = t.dropped_malformed,
                                 .dropped_oversized = t.dropped_oversized,
                                 .dropped_wrong_version = t.dropped_wrong_version,
                                 .dropped_wrong_cluster = t.dropped_wrong_cluster,
                                 .dropped_unauthenticated = t.dropped_unauthenticated,
                                 // Round reports whose args do not decode count too.
                                 .dropped_undecodable = core_->counters().undecodable_bodies +
                                                        core_->rounds().malformed_reports(),
                                 .control_received = t.control_received,
                                 .control_dropped = t.control_dropped,
                                 .control_unauthenticated = t.control_unauthenticated,
                                 .peers_opened = t.peers_opened,
                                 .peers_closed = t.peers_closed,
                                 .open_peers = transport_->open_peers(),
                                 .accept_failures = t.accept_failures,
                                 .accept_pauses = t.accept_pauses};
  // What this daemon's copy of the job table says about drains (voters; a non-voter's table
  // is empty), and the slots each node offered (known to the leader).
  nlohmann::json body = nlohmann::json::parse(control::encode_reply(reply), nullptr, false);
  const auto& drained = core_->jobs().table().drained();
  const auto& slots = core_->rounds().node_slots();
  for (auto& row : body["members"]) {
    const std::string name = row.value("name", "");
    const auto d = drained.find(name);
    row["drained"] = d != drained.end();
    if (d != drained.end()) row["drain_reason"] = d->second.reason;
    if (name == name_) {
      row["slots"] = core_->supervisor().slots();
    } else if (const auto offered = slots.find(name); offered != slots.end()) {
      row["slots"] = offered->second.second;
    }
  }
  body["table_known"] = core_->consensus().status().voter;
  return body.dump();
}

// `elasticctl reload`, the unit's ExecReload: the SIGHUP reload, answered with its outcome, so
// that `systemctl reload` fails when the file is refused (a signal cannot say so). Admins only
// (control/verbs.h).
std::optional<std::string> Node::control_reload(const ControlCall& call) {
  const TimePoint now = call.now;
  if (!life_.reload) {
    return control::encode_error_reply("This daemon has no configuration file to reload.");
  }
  reload(now);
  if (!life_.reload_ok) {
    return control::encode_error_reply("reload refused: " + life_.reload_message +
                                           "; still running with the previous configuration",
                                       control::ErrorCode::kConfig);
  }
  return nlohmann::json{{"ok", true}, {"source", life_.source}, {"message", life_.reload_message}}
      .dump();
}

std::optional<std::string> Node::control_status(const ControlCall& call) {
  const TimePoint now = call.now;
  control::StatusReply reply;
  reply.self = self_info(now);
  for (const membership::MemberView& member : core_->membership().members()) {
    switch (member.state) {
      case membership::MemberState::kAlive:
        ++reply.alive;
        break;
      case membership::MemberState::kSuspect:
        ++reply.suspect;
        break;
      case membership::MemberState::kDead:
        ++reply.dead;
        break;
      case membership::MemberState::kLeft:
        ++reply.left;
        break;
    }
  }
  control::ConsensusInfo& raft = reply.consensus;
  const RaftStatus status = core_->consensus().status();
  raft.voters = status.voters;
  raft.voter = status.voter;
  raft.leader = core_->leader();
  if (status.voter) {
    raft.role = status.role;
    raft.term = status.term;
    raft.commit_index = status.commit_index;
    raft.last_index = status.last_index;
    raft.jobs = core_->jobs().job_count();
  }
  for (const MemberRound& r : core_->rounds().member_rounds()) {
    reply.rounds.push_back(control::RoundRow{.job = r.job,
                                             .term = r.term,
                                             .round = r.round,
                                             .first_rank = r.first_rank,
                                             .slots = r.slots,
                                             .world = r.world,
                                             .store_endpoint = r.store_endpoint,
                                             .fenced = r.fenced,
                                             .suspicions = r.watch.suspicions,
                                             .suspicions_cleared = r.watch.suspicions_cleared,
                                             .declared = r.watch.declared});
  }
  nlohmann::json body = nlohmann::json::parse(control::encode_reply(reply), nullptr, false);
  nlohmann::json workers = nlohmann::json::array();
  for (const WorkerRow& w : core_->supervisor().workers()) {
    workers.push_back({{"job", w.job},
                       {"round", w.round},
                       {"rank", w.rank},
                       {"slot", w.slot},
                       {"pid", w.pid},
                       {"state", w.state},
                       {"detail", w.detail}});
  }
  body["workers"] = std::move(workers);
  body["slots"] = core_->supervisor().slots();
  body["metrics"] = metrics_ ? metrics_->bound_address() : std::string();
  body["dashboard"] = dashboard_ ? dashboard_->bound_address() : std::string();
  body["config"] = nlohmann::json::parse(config_json(), nullptr, false);
  body["lifecycle"] = {
      {"ready", life_.ready}, {"draining", life_.draining}, {"status", status_line()}};
  return body.dump();
}

// The dashboard (node.h): pages from the compiled-in assets; /api reads through
// handle_control() as nobody, answered now (this daemon's own verbs) or when the core's reply
// comes (carry_out()).
std::optional<HttpResponse> Node::serve_dashboard(const HttpRequest& request, std::uint64_t id) {
  const dashboard::Route route = dashboard::route(request.path, request.query);
  switch (route.kind) {
    case dashboard::Route::Kind::kNotFound:
      return text_response(404, "Not found: the dashboard is at /.\n");
    case dashboard::Route::Kind::kBadRequest:
      return text_response(400, route.error + "\n");
    case dashboard::Route::Kind::kAsset:
      return ok_response(std::string(route.content_type), std::string(route.body),
                         "Cache-Control: no-cache\r\n");
    case dashboard::Route::Kind::kApi:
      break;
  }
  const control::Request control_request{.verb = route.verb, .text = route.request};
  control::PeerCredentials reader{
      .pid = 0, .uid = dashboard::kReaderUid, .gid = dashboard::kReaderGid, .remote_user = ""};
  if (route.operator_only) {
    // Worker output is its job owner's: only a token holder (every request passed the bearer
    // check when a token is set) reads it, as an admin does.
    if (core_->config().dashboard.token_file.empty()) {
      return text_response(403,
                           "Worker logs are their job owner's: the dashboard serves them only "
                           "with dashboard.token_file set (the token's holder reads them as an "
                           "admin). Use `elasticctl logs` as the job's owner.\n");
    }
    reader = control::PeerCredentials{.pid = 0, .uid = 0, .gid = 0, .remote_user = ""};
  }
  std::optional<std::string> reply = handle_control(
      control_request, reader, control::ReplyHandle{.fd = kDashboardReplyFd, .serial = id});
  if (!reply) return std::nullopt;
  return api_response(std::move(*reply));
}

}  // namespace elastic::node
