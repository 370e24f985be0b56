#include "daemon/node/node_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "daemon/control/verbs.h"
#include "daemon/node/round_report.h"
#include "daemon/node/worker_log_verbs.h"
#include "daemon/rendezvous/job_codec.h"
#include "daemon/wire/codec.h"

namespace elastic::node {
namespace {

// The kForwardRequest carrying client call `id` (the call id doubles as its sequence number).
wire::Envelope forward_envelope(std::uint64_t id, const ClientRequest& request) {
  wire::Envelope envelope;
  envelope.type = wire::MsgType::kForwardRequest;
  envelope.body = encode_forward(ForwardRequest{.id = id,
                                                .verb = request.verb,
                                                .args = request.args,
                                                .uid = request.uid,
                                                .gid = request.gid,
                                                .admin = request.admin,
                                                .client_seq = id});
  return envelope;
}

// How long a call waits before its next attempt: for an election to finish (no leader yet, or
// the local leader deposed), after the leader it asked could not be reached, and after the
// daemon a node verb names could not be.
constexpr std::chrono::milliseconds kElectionRetry{50};
constexpr std::chrono::milliseconds kLeaderRetry{100};
constexpr std::chrono::milliseconds kNodeRetry{200};

// Without CURVE the sender of an envelope is whoever reached the port (any local user on a
// loopback bind): only membership gossip and forwarded requests (answered with a refusal) are
// taken. Raft could commit a forged job and a round start names a spec to run, as any user. A
// round report would let that user fail or reopen anyone's round (the sender's name is only a
// claim), and no other daemon can hold a round here to report on (it takes no round start
// either); one that does not decode goes on to be counted as malformed, as with CURVE.
bool taken_without_curve(const wire::Envelope& envelope) {
  if (envelope.type == wire::MsgType::kRoundReport) {
    return !decode_round_report(envelope.body).ok();
  }
  return wire::is_membership_type(envelope.type) ||
         envelope.type == wire::MsgType::kForwardRequest ||
         envelope.type == wire::MsgType::kForwardReply;
}

}  // namespace

NodeCore::NodeCore(Identity self, const config::DaemonConfig& config, CoreParts parts, Clock& clock,
                   std::uint64_t seed)
    : self_(std::move(self)),
      config_(config),
      clock_(&clock),
      jobs_(std::move(parts.jobs)),
      consensus_(std::move(parts.consensus)),
      voters_(effective_voters(config, self_.name)) {
  last_now_ = clock.now();
  membership_ = std::make_unique<membership::Membership>(
      membership::Self{self_.name, self_.generation, self_.address}, config.membership, seed,
      last_now_);
  jobs_->set_submit_limits(submit_limits(config.control));
  jobs_->set_priority_ceiling(config.limits.priority_ceiling);
  if (parts.host == nullptr) {
    spdlog::critical("NodeCore started without a Host (CoreParts::host)");
    std::abort();
  }
  supervisor_ =
      std::make_unique<JobSupervisor>(self_.name, config_, std::move(parts.launcher),
                                      std::move(parts.plan), parts.port_in_use, clock, *parts.host);
  rounds_ = std::make_unique<RoundService>(self_.name, self_.generation, config_,
                                           seed ^ 0x9e3779b97f4a7c15ULL, clock);
  rounds_->set_slots(supervisor_->slots());
  jobs_->set_views(membership_.get(), &rounds_->incident_log());
  // `jobs` and `job` are served by the leader, whose last scheduling pass knows each job's
  // place in the queue and why it waits.
  jobs_->set_queue_info([this](std::string_view id) -> std::optional<QueueInfo> {
    const rendezvous::JobPlan* plan = rounds_->leader().job_plan(std::string(id));
    const std::optional<double> rate = rounds_->leader().samples_per_second(std::string(id));
    if (plan == nullptr && !rate) return std::nullopt;
    return QueueInfo{.position = plan == nullptr ? 0 : plan->position,
                     .reason = plan == nullptr ? "" : plan->reason,
                     .samples_per_s = rate};
  });
}

NodeCore::~NodeCore() = default;

CoreOutput NodeCore::take_output() { return std::exchange(out_, {}); }

std::string NodeCore::leader() const {
  const std::string known = consensus_->leader();
  return known.empty() ? hint_ : known;
}

std::uint64_t NodeCore::leader_term() const {
  return consensus_->leader().empty() ? hint_term_ : consensus_->term();
}

std::string NodeCore::address_of(const std::string& name) const {
  const auto found = addresses_.find(name);
  return found == addresses_.end() ? std::string() : found->second;
}

CoreOutput NodeCore::join(TimePoint now, const std::vector<SeedPeer>& seeds) {
  last_now_ = now;
  std::vector<std::string> endpoints;
  for (const SeedPeer& seed : seeds) {
    endpoints.push_back(seed.endpoint);
    if (!seed.name.empty()) seed_names_.emplace(seed.endpoint, seed.name);
  }
  membership::Effects effects;
  membership_->join(now, endpoints, effects);
  on_membership(now, std::move(effects));
  return take_output();
}

CoreOutput NodeCore::step(TimePoint now, CoreInput input) {
  last_now_ = now;
  for (const std::uint64_t id : input.unsent_calls) {
    const auto found = calls_.find(id);
    if (found == calls_.end()) continue;
    Call& call = found->second;
    retry_unreachable(now, call,
                      (call.target.empty() ? call.attempt_to : call.target) + " is not reachable");
  }
  {
    membership::Effects effects;
    for (const std::string& address : input.unreachable) {
      membership_->on_unreachable(now, address, effects);
    }
    on_membership(now, std::move(effects));
  }
  deliver(now, input.envelopes);
  // A peer whose TCP connection dropped (kill -9 closes it at once): its round peers suspect it
  // now instead of after job_peer_timeout of silence.
  // If that peer is the Raft leader, the voters elect another now (ConsensusHost::
  // leader_unreachable): a leader's host loss then costs no election timeout.
  for (const std::string& peer : input.disconnected) {
    if (peer.empty()) continue;
    rounds_->on_peer_disconnected(now, peer);
    consensus_->leader_unreachable(now, peer);
  }
  {
    membership::Effects effects;
    membership_->tick(now, effects);
    on_membership(now, std::move(effects));
  }
  consensus_->tick(now);
  const bool leading = consensus_->is_leader();
  if (rounds_->lead_due(now, leading)) {
    if (leading) {
      rounds_->lead(now, leading, jobs_->table(), leader_members(now), consensus_.get());
    } else {
      rounds_->lead(now, leading, jobs_->table(), {}, consensus_.get());
    }
  }
  settle(now);
  if (consensus_->failed()) return take_output();
  rounds_->tick(now);
  settle(now);
  supervisor_->process(now);
  const std::string believed = leader();
  rounds_->set_leader(now, believed, address_of(believed));
  expire_calls(now);
  settle(now);
  return take_output();
}

TimePoint NodeCore::next_deadline() const {
  TimePoint deadline = std::min({membership_->next_deadline(), consensus_->next_deadline(),
                                 rounds_->next_deadline(), supervisor_->next_deadline()});
  for (const auto& [id, call] : calls_) {
    deadline = std::min({deadline, call.deadline, call.attempt_deadline});
  }
  return deadline;
}

void NodeCore::deliver(TimePoint now, std::vector<wire::Envelope>& envelopes) {
  membership::Effects effects;
  for (wire::Envelope& envelope : envelopes) {
    if (!config_.get().transport.curve && !taken_without_curve(envelope)) {
      if (++counters_.unauthenticated_peer_drops % 100 == 1) {
        spdlog::warn(
            "dropped a message of type {} from {}: with transport.curve = false this daemon acts "
            "on no message but membership from other daemons (nobody vouches for the sender); "
            "{} dropped so far",
            static_cast<int>(envelope.type), envelope.sender, counters_.unauthenticated_peer_drops);
      }
      continue;
    }
    observe_hint(envelope);
    if (wire::is_raft_type(envelope.type)) {
      consensus_->on_envelope(now, envelope);
      continue;
    }
    if (envelope.type == wire::MsgType::kForwardRequest) {
      on_forward_request(now, envelope);
      continue;
    }
    if (envelope.type == wire::MsgType::kRoundReport) {
      // A member daemon's report about a round (no reply: it repeats until the round changes).
      if (consensus_->is_leader()) rounds_->on_report(now, envelope);
      continue;
    }
    if (envelope.type == wire::MsgType::kRoundStart || rendezvous::is_job_type(envelope.type) ||
        rendezvous::is_lease_type(envelope.type)) {
      rounds_->on_envelope(now, envelope);
      continue;
    }
    if (envelope.type == wire::MsgType::kForwardReply) {
      on_forward_reply(now, envelope);
      continue;
    }
    auto message = wire::decode_membership(envelope.type, envelope.body);
    if (!message.ok()) {
      // The transport checked the envelope; a body that does not decode is still hostile.
      ++counters_.undecodable_bodies;
      spdlog::debug("dropped a message from {} gen {}: {}", envelope.sender, envelope.generation,
                    message.error().message);
      continue;
    }
    membership_->on_message(now,
                            membership::Inbound{.from = std::move(envelope.sender),
                                                .from_generation = envelope.generation,
                                                .from_address = std::move(envelope.sender_address),
                                                .message = std::move(message.value())},
                            effects);
  }
  on_membership(now, std::move(effects));
  settle(now);
}

const std::vector<membership::MemberView>& NodeCore::leader_members(TimePoint now) {
  constexpr std::chrono::seconds kMembersRefresh{1};
  if (members_changed_ || now >= members_built_ + kMembersRefresh) {
    leader_members_ = membership_->members();
    members_changed_ = false;
    members_built_ = now;
  }
  return leader_members_;
}

void NodeCore::on_membership(TimePoint now, membership::Effects effects) {
  if (!effects.events.empty()) members_changed_ = true;
  log_events(effects.events);
  for (const membership::MemberEvent& event : effects.events) {
    // A dead or departed Raft leader: elect another at once (raft.h, the fast election). Not a
    // suspected one: suspicion is gossiped, so one voter's doubt (its own slow link) would reach
    // every voter at once, all would grant pre-votes, and a healthy leader would be deposed.
    // A killed leader's dropped connection and the job tier's verdict (above and below) are
    // this node's own evidence and act at once.
    if (event.state == membership::MemberState::kDead ||
        event.state == membership::MemberState::kLeft) {
      consensus_->leader_unreachable(now, event.name);
    }
  }
  for (membership::MemberEvent& event : effects.events) out_.member_events.push_back(event);
  for (membership::Outgoing& send : effects.sends) {
    wire::Envelope envelope;
    envelope.type = wire::message_type(send.message);
    envelope.body = wire::encode_body(send.message);
    // Membership addresses a seed it has not met yet by address only; CURVE needs its name.
    std::string name = send.to;
    if (name.empty()) {
      const auto seed = seed_names_.find(send.to_address);
      if (seed != seed_names_.end()) name = seed->second;
    }
    out_.sends.push_back(PeerSend{.to = std::move(name),
                                  .address = std::move(send.to_address),
                                  .envelope = std::move(envelope),
                                  .membership = true});
  }
}

void NodeCore::log_events(const std::vector<membership::MemberEvent>& events) {
  for (const membership::MemberEvent& event : events) {
    auto [it, inserted] = logged_states_.try_emplace({event.name, event.generation}, event.state);
    const char* old_state = inserted ? "none" : wire::member_state_name(it->second);
    it->second = event.state;
    if (!event.address.empty()) addresses_[event.name] = event.address;
    consensus_->learn_name(event.name);
    spdlog::info("member {} gen {}: {} -> {} ({})", event.name, event.generation, old_state,
                 wire::member_state_name(event.state), event.address);
    // Cluster events for `elasticctl events` (incidents.h).
    const bool joined = inserted && event.state == membership::MemberState::kAlive;
    rounds_->record_event(
        ClusterEvent{.at_ms = clock_->wall_ms(),
                     .kind = joined ? std::string("member_joined")
                                    : std::string("member_") + wire::member_state_name(event.state),
                     .node = event.name,
                     .job = "",
                     .detail = "generation " + std::to_string(event.generation) + ": " + old_state +
                               " -> " + wire::member_state_name(event.state)});
  }
}

void NodeCore::observe_hint(const wire::Envelope& envelope) {
  if (envelope.leader_hint.empty() || envelope.leader_term <= hint_term_) return;
  hint_ = envelope.leader_hint;
  hint_term_ = envelope.leader_term;
}

bool NodeCore::send_to(const std::string& name, wire::Envelope envelope) {
  const auto found = addresses_.find(name);
  if (found == addresses_.end()) return false;
  send_at(name, found->second, std::move(envelope));
  return true;
}

void NodeCore::send_at(const std::string& name, const std::string& address,
                       wire::Envelope envelope) {
  out_.sends.push_back(PeerSend{.to = name, .address = address, .envelope = std::move(envelope)});
}

void NodeCore::flush_consensus() {
  for (ConsensusHost::Outgoing& out : consensus_->take_sends()) {
    // Lost Raft messages are retried by Raft itself (heartbeats repair).
    send_to(out.to, std::move(out.envelope));
  }
}

void NodeCore::settle(TimePoint now) {
  // Each part's output is another's input, one way each: the round service's orders go to the
  // supervisor, whose reports go back to the round service (to the leader, or to itself on the
  // leader), and both send. A few passes drain it; what a pass adds waits for the next one.
  for (int pass = 0; pass < 8; ++pass) {
    bool busy = false;
    for (RoundService::WorkerOrder& order : rounds_->take_orders()) {
      busy = true;
      if (order.kind == RoundService::WorkerOrder::Kind::kStop) {
        supervisor_->stop_job(now, order.job,
                              order.graceful ? StopMode::kGraceful : StopMode::kKill, order.why,
                              order.final);
      } else if (!draining_ && supervisor_->on_round(now, *order.start)) {
        // A draining node takes no new rounds; a round whose workers run is acknowledged now
        // (otherwise the supervisor reports round_ack once they do).
        rounds_->acknowledge(*order.start);
      }
    }
    for (const RoundReport& report : supervisor_->take_reports()) {
      busy = true;
      rounds_->report_for(now, report);
    }
    // A round peer the job tier declared lost may be the Raft leader's host: elect another now
    // rather than an election timeout later (raft.h, the fast election).
    for (const std::string& peer : rounds_->take_lost_peers()) {
      consensus_->leader_unreachable(now, peer);
    }
    for (RoundService::Send& send : rounds_->take_sends()) {
      busy = true;
      if (send.address.empty()) {
        send_to(send.to, std::move(send.envelope));
      } else {
        send_at(send.to, send.address, std::move(send.envelope));
      }
    }
    if (!busy) break;
  }
  flush_consensus();
}

// ---------------------------------------------------------------------------------------------
// Drain, reload, local requests

void NodeCore::drain(TimePoint now) {
  draining_ = true;
  // The leader hears first, so the failures the stop causes in its rounds are excused.
  rounds_->announce_leaving();
  supervisor_->drain(now);
  settle(now);
}

void NodeCore::announce_leaving() {
  rounds_->announce_leaving();
  settle(last_now_);
}

void NodeCore::kill_all(TimePoint now) {
  supervisor_->kill_all(now);
  settle(now);
}

CoreOutput NodeCore::leave(TimePoint now) {
  membership::Effects effects;
  membership_->leave(now, effects);
  on_membership(now, std::move(effects));
  return take_output();
}

void NodeCore::shutdown(Duration grace) { supervisor_->shutdown(grace); }

void NodeCore::apply_config(const config::DaemonConfig& config) {
  const config::DaemonConfig& running = config_.get();
  const bool spawner_limits = config.spawner.stop_grace != running.spawner.stop_grace ||
                              config.spawner.log_max_bytes != running.spawner.log_max_bytes ||
                              config.spawner.log_keep != running.spawner.log_keep;
  const bool submit = submit_limits(config.control) != submit_limits(running.control);
  config_.replace(config);  // every part reads the new snapshot from here on
  if (spawner_limits) supervisor_->reload_spawner_limits();
  if (submit) jobs_->set_submit_limits(submit_limits(config.control));
  jobs_->set_priority_ceiling(config.limits.priority_ceiling);
}

Status NodeCore::on_progress(TimePoint now, std::uint32_t uid, const std::string& request) {
  Status accepted = supervisor_->on_progress(now, uid, request);
  settle(now);
  return accepted;
}

Result<std::string> NodeCore::serve_node_verb(const std::string& verb, const std::string& args,
                                              std::uint32_t uid, bool admin, bool* denied) const {
  return serve_worker_log_verb(verb, args, *supervisor_, self_.name,
                               !config_.get().spawner.log_root.empty(),
                               LogCaller{.uid = uid, .admin = admin}, denied);
}

// ---------------------------------------------------------------------------------------------
// Client calls

std::uint64_t NodeCore::call(TimePoint now, ClientRequest request, const std::string& session,
                             const std::string& target, Duration timeout) {
  last_now_ = now;
  const std::uint64_t id = next_call_++;
  request.client_id = session.empty() ? std::string() : session + "/" + std::to_string(id);
  request.client_seq = 1;
  Call waiting;
  waiting.request = std::move(request);
  waiting.target = target;
  waiting.deadline = now + timeout;
  calls_.emplace(id, std::move(waiting));
  dispatch(now, id);
  settle(now);
  return id;
}

void NodeCore::abandon_calls(const std::string& sentence) {
  for (auto& [id, call] : calls_) {
    out_.replies.push_back(
        CallReply{.call = id, .outcome = ForwardOutcome::kError, .body = sentence});
  }
  calls_.clear();
}

void NodeCore::dispatch(TimePoint now, std::uint64_t id) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return;
  Call& call = it->second;
  call.in_flight = true;
  if (!call.target.empty()) {
    // A node verb for one named daemon: retried there until the call's deadline.
    const std::string address = address_of(call.target);
    if (address.empty()) {
      retry_unreachable(now, call, call.target + " is not a member this daemon knows");
      return;
    }
    out_.sends.push_back(PeerSend{.to = call.target,
                                  .address = address,
                                  .envelope = forward_envelope(id, call.request),
                                  .call = id});
    call.last_error = call.target + " did not answer";
    call.attempt_deadline = now + kForwardAttemptTimeout;
    return;
  }
  if (consensus_->is_leader()) {
    call.attempt_deadline = call.deadline;  // the proposal answers, or leadership moves
    jobs_->serve(now, call.request, *consensus_,
                 [this, id](ForwardOutcome outcome, std::string body) {
                   const auto found = calls_.find(id);
                   if (found == calls_.end()) return;
                   if (outcome == ForwardOutcome::kRedirect) {
                     // Not the leader after all (or deposed before the commit): try again where
                     // it moved.
                     retry_after(found->second, last_now_ + kElectionRetry, std::move(body));
                     return;
                   }
                   finish_call(id, outcome, std::move(body));
                 });
    return;
  }
  // Whom to ask: the leader we believe in, else the voters in turn (never ourselves): the
  // current set as this node's Raft knows it, plus the configured initial set.
  std::string target = leader();
  if (target.empty() || target == self_.name) {
    target.clear();
    std::vector<std::string> voters = consensus_->voters();
    for (const std::string& v : voters_) {
      if (std::find(voters.begin(), voters.end(), v) == voters.end()) voters.push_back(v);
    }
    for (std::size_t i = 0; i < voters.size() && target.empty(); ++i) {
      const std::string& voter = voters[next_voter_++ % voters.size()];
      if (voter != self_.name) target = voter;
    }
  }
  if (target.empty()) {
    // A lone voter that is not leader yet: it will be in an election timeout or two.
    retry_after(call, now + kElectionRetry, "no leader is elected yet");
    return;
  }
  const std::string address = address_of(target);
  if (address.empty()) {
    retry_unreachable(now, call, target + " is not reachable");
    return;
  }
  out_.sends.push_back(PeerSend{.to = target,
                                .address = address,
                                .envelope = forward_envelope(id, call.request),
                                .call = id});
  call.attempt_to = target;
  call.attempt_deadline = now + kForwardAttemptTimeout;
  call.last_error = target + " did not answer";
}

void NodeCore::retry_after(Call& call, TimePoint at, std::string why) {
  call.in_flight = false;
  call.last_error = std::move(why);
  call.attempt_deadline = at;
}

void NodeCore::retry_unreachable(TimePoint now, Call& call, std::string why) {
  if (!call.target.empty()) {
    retry_after(call, now + kNodeRetry, std::move(why));
    return;
  }
  // The leader this daemon believed in is out of reach: the next attempt asks the voters.
  hint_.clear();
  retry_after(call, now + kLeaderRetry, std::move(why));
}

void NodeCore::finish_call(std::uint64_t id, ForwardOutcome outcome, std::string body) {
  if (calls_.erase(id) == 0) return;
  out_.replies.push_back(CallReply{.call = id, .outcome = outcome, .body = std::move(body)});
}

void NodeCore::expire_calls(TimePoint now) {
  std::vector<std::uint64_t> due;
  for (auto& [id, call] : calls_) {
    if (now >= call.deadline && !call.target.empty()) {
      finish_call(id, ForwardOutcome::kError,
                  "No answer from " + call.target + " (" + call.last_error + ").");
      return;  // finish_call erased from calls_; the rest waits for the next pass
    }
    if (now >= call.deadline) {
      std::string voters;
      for (const std::string& voter : voters_) voters += (voters.empty() ? "" : ", ") + voter;
      finish_call(id, ForwardOutcome::kError,
                  "No Raft leader answered within " +
                      std::to_string(kClientRequestTimeout.count()) + " s (voters: " + voters +
                      "; last attempt: " + call.last_error +
                      "); a majority of the voters must be up and reachable.");
      return;
    }
    if (now >= call.attempt_deadline) due.push_back(id);
  }
  for (const std::uint64_t id : due) {
    calls_[id].in_flight = false;
    dispatch(now, id);
  }
}

void NodeCore::on_forward_request(TimePoint now, const wire::Envelope& envelope) {
  auto request = decode_forward_request(envelope.body);
  if (!request.ok()) {
    ++counters_.undecodable_bodies;
    spdlog::debug("dropped a forwarded request from {}: {}", envelope.sender,
                  request.error().message);
    return;
  }
  const std::string reply_name = envelope.sender;
  const std::string reply_address = envelope.sender_address;
  const std::uint64_t id = request->id;
  auto answer = [this, reply_name, reply_address, id](ForwardOutcome outcome, std::string body) {
    wire::Envelope reply;
    reply.type = wire::MsgType::kForwardReply;
    reply.body = encode_forward(
        ForwardReply{.id = id, .outcome = outcome, .body = std::move(body), .leader = leader()});
    send_at(reply_name, reply_address, std::move(reply));
  };
  if (!config_.get().transport.curve) {
    // Without CURVE the sender is whoever reached the port (any local user on a loopback
    // bind), so the uid, gid and admin flag in the body are claims nobody vouches for.
    // One line per refusal would let a flood fill the log: the first, then every 100th.
    if (++counters_.forwards_refused % 100 == 1) {
      spdlog::warn(
          "refused a request forwarded from {} ({}): forwarding needs transport.curve = true "
          "({} refused so far)",
          envelope.sender, request->verb, counters_.forwards_refused);
    }
    answer(ForwardOutcome::kDenied,
           "Refused: " + self_.name + " does not act on requests forwarded from another daemon (" +
               envelope.sender +
               ") because forwarding needs transport.curve = true (without CURVE the forwarded "
               "user cannot be trusted); use the control socket of the leader's host, or "
               "enable CURVE.");
    return;
  }
  if (const control::Verb* verb = control::find_verb(request->verb);
      verb != nullptr && verb->route == control::Route::kNode) {
    bool denied = false;
    auto served =
        serve_node_verb(request->verb, request->args, request->uid, request->admin, &denied);
    if (served.ok()) {
      answer(ForwardOutcome::kOk, std::move(*served));
    } else {
      answer(denied ? ForwardOutcome::kDenied : ForwardOutcome::kError, served.error().message);
    }
    return;
  }
  if (!consensus_->is_leader() || !control::is_leader_verb(request->verb)) {
    answer(ForwardOutcome::kRedirect, control::is_leader_verb(request->verb)
                                          ? self_.name + " is not the leader"
                                          : "unknown verb " + request->verb);
    return;
  }
  jobs_->serve(
      now,
      ClientRequest{.verb = request->verb,
                    .args = std::move(request->args),
                    .uid = request->uid,
                    .gid = request->gid,
                    .admin = request->admin,
                    .client_id = envelope.sender + "/" + std::to_string(envelope.generation) + "/" +
                                 std::to_string(request->client_seq),
                    .client_seq = 1},
      *consensus_, answer);
  settle(now);
}

void NodeCore::on_forward_reply(TimePoint now, const wire::Envelope& envelope) {
  auto reply = decode_forward_reply(envelope.body);
  if (!reply.ok()) {
    ++counters_.undecodable_bodies;
    spdlog::debug("dropped a forwarded reply from {}: {}", envelope.sender, reply.error().message);
    return;
  }
  const auto it = calls_.find(reply->id);
  if (it == calls_.end()) return;  // answered already, or timed out
  if (reply->outcome != ForwardOutcome::kRedirect) {
    if (it->second.target.empty()) hint_ = envelope.sender;
    finish_call(reply->id, reply->outcome, std::move(reply->body));
    return;
  }
  const bool new_hint =
      !reply->leader.empty() && reply->leader != envelope.sender && reply->leader != self_.name;
  hint_ = new_hint ? reply->leader : std::string();
  // Straight to a named leader; otherwise pause briefly so an election can finish.
  retry_after(it->second, now + (new_hint ? Duration::zero() : kLeaderRetry),
              envelope.sender + " redirected: " + reply->body);
}

}  // namespace elastic::node
