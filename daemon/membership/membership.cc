// Membership: see membership.h for the contract. The logic follows memberlist's state.go
// (probe cycle, awareness, suspicion, merge rules) with the Lifeguard extensions, generations
// per research §4.2/§4.6 and Serf's reconnect (§2.2).
#include "daemon/membership/membership.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace elastic::membership {

using wire::MemberUpdate;

namespace {

bool is_live(MemberState s) { return s == MemberState::kAlive || s == MemberState::kSuspect; }

std::size_t estimated_size(const MemberUpdate& u) {
  // MessagePack map keys and integers: a conservative constant plus the strings.
  return 40 + u.name.size() + u.address.size() + u.from.size();
}

std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::uint64_t record_hash(const std::string& name, std::uint64_t generation,
                          std::uint32_t incarnation, MemberState state) {
  std::uint64_t h = mix64(fnv1a(name));
  h = mix64(h ^ generation);
  h = mix64(h ^ (static_cast<std::uint64_t>(incarnation) << 8 | static_cast<std::uint8_t>(state)));
  return h;
}

}  // namespace

// ---- formulas ---------------------------------------------------------------------------------

namespace {

struct SuspicionCurve {
  Duration min{};
  Duration max{};
  int k = 0;
};

// Lifeguard's curve for a cluster of n: min = multiplier * max(1, log10 n) * probe_interval,
// max = max_multiplier * min, K = multiplier - 2 (0 when fewer than K others could confirm).
SuspicionCurve suspicion_curve(const config::MembershipConfig& config, std::size_t n) {
  const double node_scale =
      std::max(1.0, std::log10(static_cast<double>(std::max<std::size_t>(n, 1))));
  SuspicionCurve curve;
  curve.min = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double, std::nano>(config.suspicion_multiplier * node_scale *
                                               static_cast<double>(config.probe_interval.count())));
  curve.max = curve.min * config.suspicion_max_multiplier;
  curve.k = config.suspicion_multiplier - 2;
  if (static_cast<long long>(n) - 2 < curve.k) curve.k = 0;
  return curve;
}

Duration curve_timeout(const SuspicionCurve& curve, int confirmations) {
  if (curve.k < 1) return curve.min;
  const int c = std::clamp(confirmations, 0, curve.k);
  const double frac = std::log(c + 1.0) / std::log(curve.k + 1.0);
  const double raw_s = std::chrono::duration<double>(curve.max).count() -
                       frac * std::chrono::duration<double>(curve.max - curve.min).count();
  const Duration timeout =
      std::chrono::milliseconds(static_cast<long long>(std::floor(1000.0 * raw_s)));
  return std::max(timeout, curve.min);
}

}  // namespace

Duration Membership::suspicion_timeout(const config::MembershipConfig& config, std::size_t n,
                                       int confirmations) {
  return curve_timeout(suspicion_curve(config, n), confirmations);
}

int Membership::retransmit_limit(const config::MembershipConfig& config, std::size_t n) {
  const int scale = static_cast<int>(std::ceil(std::log10(static_cast<double>(n) + 1.0)));
  return config.retransmit_multiplier * std::max(scale, 1);
}

Duration Membership::push_pull_period(const config::MembershipConfig& config, std::size_t n) {
  constexpr double kThreshold = 32;
  if (static_cast<double>(n) <= kThreshold) return config.push_pull_interval;
  const int multiplier =
      static_cast<int>(std::ceil(std::log2(static_cast<double>(n)) - std::log2(kThreshold))) + 1;
  return config.push_pull_interval * multiplier;
}

// ---- construction and queries -------------------------------------------------------------------

Membership::Membership(Self self, const config::MembershipConfig& config, std::uint64_t seed,
                       TimePoint now)
    : self_(std::move(self)), config_(config), rng_(seed) {
  Record& me = add_record(now, MemberUpdate{.name = self_.name,
                                            .generation = self_.generation,
                                            .incarnation = 0,
                                            .state = MemberState::kAlive,
                                            .address = self_.address,
                                            .from = {}});
  me.last_heard = TimePoint{};
  // Random phases so that nodes started together do not probe and gossip in lockstep.
  const auto phase = [&](Duration period) {
    return period.count() > 0 ? Duration(static_cast<Duration::rep>(
                                    rng_.below(static_cast<std::uint64_t>(period.count()))))
                              : Duration{};
  };
  next_probe_ = now + phase(config_.probe_interval);
  next_gossip_ = now + phase(config_.gossip_interval);
  next_push_pull_ = now + phase(config_.push_pull_interval);
  next_reconnect_ = now + config_.reconnect_interval;
}

std::vector<MemberView> Membership::members() const {
  std::vector<MemberView> views;
  views.reserve(members_.size());
  for (const auto& [name, r] : members_) {
    views.push_back(MemberView{.name = r.name,
                               .generation = r.generation,
                               .incarnation = r.incarnation,
                               .state = r.state,
                               .address = r.address,
                               .last_heard = r.last_heard,
                               .state_since = r.state_since});
  }
  return views;
}

std::optional<MemberView> Membership::member(const std::string& name) const {
  const auto it = members_.find(name);
  if (it == members_.end()) return std::nullopt;
  const Record& r = it->second;
  return MemberView{.name = r.name,
                    .generation = r.generation,
                    .incarnation = r.incarnation,
                    .state = r.state,
                    .address = r.address,
                    .last_heard = r.last_heard,
                    .state_since = r.state_since};
}

std::size_t Membership::alive_count() const { return live_count_; }

std::uint64_t Membership::digest() const {
  std::uint64_t sum = 0;
  for (const auto& [name, r] : members_) {
    sum += record_hash(r.name, r.generation, r.incarnation, r.state);
  }
  return sum;
}

std::uint64_t Membership::digest_of(const std::vector<MemberUpdate>& members) {
  std::uint64_t sum = 0;
  for (const auto& u : members) sum += record_hash(u.name, u.generation, u.incarnation, u.state);
  return sum;
}

TimePoint Membership::next_deadline() const {
  TimePoint d = kNever;
  if (!left_) {
    if (probe_) {
      d = std::min(d, probe_->indirect_sent ? probe_->interval_end : probe_->timeout_at);
    } else {
      d = std::min(d, next_probe_);
    }
    d = std::min({d, next_push_pull_, next_reconnect_, next_rejoin_});
  }
  for (const auto& [seq, relay] : relays_) {
    if (relay.want_nack && !relay.nacked) d = std::min(d, relay.nack_at);
  }
  if (!suspicion_timers_.empty()) d = std::min(d, suspicion_timers_.begin()->first);
  if (!tombstone_timers_.empty()) d = std::min(d, tombstone_timers_.begin()->first);
  // An empty queue has nothing to gossip: no wake-ups for it.
  if (!queue_.empty()) d = std::min(d, next_gossip_);
  return d;
}

// ---- records ----------------------------------------------------------------------------------

Membership::Record& Membership::add_record(TimePoint now, const MemberUpdate& u) {
  auto [it, inserted] = members_.try_emplace(u.name);
  if (!inserted) std::abort();  // callers check first: a duplicate is a logic error
  Record& r = it->second;
  r.name = u.name;
  r.generation = u.generation;
  r.incarnation = u.incarnation;
  r.state = u.state;
  r.address = u.address;
  r.accuser = u.state == MemberState::kAlive ? std::string{} : u.from;
  r.state_since = now;
  if (is_live(r.state)) {
    ++live_count_;
  } else if (r.name != self_.name) {
    tombstone_timers_.emplace(now + config_.tombstone_ttl, r.name);
  }
  names_.insert(std::lower_bound(names_.begin(), names_.end(), u.name), u.name);
  if (u.name != self_.name) {
    // memberlist: a new node goes to a random place of the not-yet-probed part of the pass.
    probe_order_.push_back(u.name);
    const std::size_t lo = std::min(probe_index_, probe_order_.size() - 1);
    const std::size_t at = lo + rng_.below(probe_order_.size() - lo);
    std::swap(probe_order_[at], probe_order_.back());
  }
  return r;
}

void Membership::remove_record(const std::string& name) {
  const auto it = members_.find(name);
  if (it == members_.end()) return;
  clear_suspicion(it->second);
  if (is_live(it->second.state)) --live_count_;
  members_.erase(it);
  const auto pos = std::lower_bound(names_.begin(), names_.end(), name);
  if (pos != names_.end() && *pos == name) names_.erase(pos);
  // probe_order_ keeps the name until the next reshuffle; the probe loop skips unknown names.
}

void Membership::set_state(TimePoint now, Record& r, MemberState state) {
  if (is_live(r.state) && !is_live(state)) --live_count_;
  if (!is_live(r.state) && is_live(state)) ++live_count_;
  if (!is_live(r.state)) tombstone_timers_.erase({r.state_since + config_.tombstone_ttl, r.name});
  if (state != MemberState::kSuspect) clear_suspicion(r);
  if (state == MemberState::kAlive) r.accuser.clear();
  r.state = state;
  r.state_since = now;
  // Our own record is never reaped: a left node keeps answering probes until it exits.
  if (!is_live(state) && r.name != self_.name) {
    tombstone_timers_.emplace(now + config_.tombstone_ttl, r.name);
  }
}

void Membership::start_suspicion(TimePoint now, Record& r, const std::string& accuser) {
  clear_suspicion(r);
  // The curve is fixed at the start of the suspicion (memberlist keeps min/max/k per timer).
  const SuspicionCurve curve = suspicion_curve(config_, live_count_);
  Suspicion s;
  s.start = now;
  s.min = curve.min;
  s.max = curve.max;
  s.k = curve.k;
  s.accusers.insert(accuser);
  s.deadline = now + curve_timeout(curve, 0);
  r.accuser = accuser;
  r.suspicion = std::move(s);
  arm_suspicion_timer(now, r);
  ++stats_.suspicions;
}

// The timer fires for the next last call still due before the deadline, else at the deadline.
// Last calls go at deadline - k * probe_timeout (k = kSuspicionLastCalls..1), one probe_timeout
// apart at least, so each Ping has a probe_timeout to be answered.
void Membership::arm_suspicion_timer(TimePoint now, Record& r) {
  Suspicion& s = *r.suspicion;
  if (s.timer != TimePoint{}) suspicion_timers_.erase({s.timer, r.name});
  s.timer = s.deadline;
  const int calls_left = kSuspicionLastCalls - s.last_calls;
  if (calls_left > 0) {
    const TimePoint call = s.deadline - config_.probe_timeout * calls_left;
    s.timer = std::clamp(call, now, s.deadline);
  }
  suspicion_timers_.emplace(s.timer, r.name);
}

void Membership::suspicion_timer_fired(TimePoint now, Record& r, Effects& out) {
  Suspicion& s = *r.suspicion;
  if (now < s.deadline && s.last_calls < kSuspicionLastCalls) {
    // A last call: the Ping carries our verdict first, so a live suspect answers with its
    // refutation (or re-sends the one we missed). The Ack matches no probe; only its updates
    // count.
    ++s.last_calls;
    send(out, r.name, r.address,
         wire::Ping{.probe = next_seq_++,
                    .target = r.name,
                    .target_generation = r.generation,
                    .updates = piggyback(&r)});
    s.timer = TimePoint{};
    arm_suspicion_timer(now, r);
    // The next one comes a probe_timeout later at the earliest (never past the deadline).
    if (s.timer < now + config_.probe_timeout && s.timer < s.deadline) {
      suspicion_timers_.erase({s.timer, r.name});
      s.timer = std::min(now + config_.probe_timeout, s.deadline);
      suspicion_timers_.emplace(s.timer, r.name);
    }
    return;
  }
  clear_suspicion(r);
  r.accuser = self_.name;
  set_state(now, r, MemberState::kDead);
  ++stats_.deaths;
  emit(r, out);
  enqueue(update_of(r));
}

// Lifeguard: each independent confirmation moves the deadline down the logarithmic curve.
bool Membership::confirm_suspicion(Record& r, const std::string& accuser) {
  if (!r.suspicion) return false;
  Suspicion& s = *r.suspicion;
  if (s.confirmations >= s.k) return false;
  if (!s.accusers.insert(accuser).second) return false;
  ++s.confirmations;
  s.deadline = s.start +
               curve_timeout(SuspicionCurve{.min = s.min, .max = s.max, .k = s.k}, s.confirmations);
  arm_suspicion_timer(s.start, r);
  return true;
}

void Membership::clear_suspicion(Record& r) {
  if (!r.suspicion) return;
  suspicion_timers_.erase({r.suspicion->timer, r.name});
  r.suspicion.reset();
}

void Membership::emit(const Record& r, Effects& out) const {
  if (r.name == self_.name) return;  // events are about other members
  out.events.push_back(MemberEvent{
      .name = r.name, .generation = r.generation, .state = r.state, .address = r.address});
}

MemberUpdate Membership::update_of(const Record& r) const {
  return MemberUpdate{.name = r.name,
                      .generation = r.generation,
                      .incarnation = r.incarnation,
                      .state = r.state,
                      .address = r.address,
                      .from = r.state == MemberState::kAlive ? std::string{} : r.accuser};
}

// ---- dissemination ------------------------------------------------------------------------------

void Membership::enqueue(const MemberUpdate& u) {
  const auto it = queue_.find(u.name);
  if (it != queue_.end()) {
    queue_order_.erase({it->second.transmits, ~it->second.id, u.name});
    queue_.erase(it);
  }
  const std::uint64_t id = ++queue_ids_;
  queue_.emplace(u.name, Queued{.update = u, .transmits = 0, .id = id});
  queue_order_.emplace(0, ~id, u.name);
}

// Takes up to kMaxPiggybackUpdates queued updates (fewest transmissions, newest first) within
// the byte budget; `about`, when given, is sent first (the buddy system: the recipient learns
// that it is suspected or dead and can refute).
std::vector<MemberUpdate> Membership::piggyback(const Record* about) {
  std::vector<MemberUpdate> updates;
  std::size_t bytes = 0;
  if (about != nullptr) {
    updates.push_back(update_of(*about));
    bytes += estimated_size(updates.back());
  }
  const int limit = retransmit_limit(config_, live_count_);
  std::vector<QueueKey> taken;
  for (const QueueKey& key : queue_order_) {
    if (updates.size() >= kMaxPiggybackUpdates) break;
    const Queued& q = queue_.at(std::get<2>(key));
    if (about != nullptr && q.update.name == about->name) continue;
    const std::size_t size = estimated_size(q.update);
    if (bytes + size > kMaxPiggybackBytes) break;
    bytes += size;
    updates.push_back(q.update);
    taken.push_back(key);
  }
  for (const QueueKey& key : taken) {
    queue_order_.erase(key);
    Queued& q = queue_.at(std::get<2>(key));
    ++q.transmits;
    if (q.transmits >= limit) {
      queue_.erase(std::get<2>(key));
    } else {
      queue_order_.emplace(q.transmits, ~q.id, q.update.name);
    }
  }
  return updates;
}

std::vector<MemberUpdate> Membership::full_state() const {
  std::vector<MemberUpdate> state;
  state.reserve(members_.size());
  for (const auto& [name, r] : members_) state.push_back(update_of(r));
  return state;
}

// k distinct random members other than self and `exclude`: alive or suspect, plus dead ones
// within gossip_to_dead when asked. Small lists are shuffled so no candidate is missed
// (memberlist PR#350); large ones are sampled with a bounded number of tries.
std::vector<std::string> Membership::random_members(std::size_t k, bool include_recent_dead,
                                                    const std::string& exclude, TimePoint now) {
  std::vector<std::string> picked;
  if (k == 0) return picked;
  const auto eligible = [&](const std::string& name) {
    if (name == self_.name || name == exclude) return false;
    const Record& r = members_.at(name);
    if (is_live(r.state)) return true;
    return include_recent_dead && r.state == MemberState::kDead &&
           now - r.state_since < config_.gossip_to_dead;
  };
  if (names_.size() <= 64) {
    std::vector<std::string> candidates;
    for (const auto& name : names_) {
      if (eligible(name)) candidates.push_back(name);
    }
    for (std::size_t i = 0; i < candidates.size() && picked.size() < k; ++i) {
      const std::size_t j = i + rng_.below(candidates.size() - i);
      std::swap(candidates[i], candidates[j]);
      picked.push_back(candidates[i]);
    }
    return picked;
  }
  for (std::size_t tries = 0; tries < 3 * names_.size() && picked.size() < k; ++tries) {
    const std::string& name = names_[rng_.below(names_.size())];
    if (!eligible(name)) continue;
    if (std::find(picked.begin(), picked.end(), name) != picked.end()) continue;
    picked.push_back(name);
  }
  return picked;
}

void Membership::raise_health(int delta) {
  stats_.local_health =
      std::clamp(stats_.local_health + delta, 0, std::max(config_.awareness_max_multiplier - 1, 0));
}

void Membership::send(Effects& out, const std::string& to, const std::string& address,
                      wire::MembershipMessage message) {
  ++stats_.messages_sent;
  out.sends.push_back(Outgoing{.to = to, .to_address = address, .message = std::move(message)});
}

// ---- merging ----------------------------------------------------------------------------------

void Membership::apply_updates(TimePoint now, const std::vector<MemberUpdate>& updates,
                               const std::string& via, Effects& out) {
  for (const auto& u : updates) apply_update(now, u, via, /*from_push_pull=*/false, out);
}

void Membership::apply_self_update(const MemberUpdate& u) {
  Record& me = members_.at(self_.name);
  if (u.generation > self_.generation) return;  // a newer instance of our name: not ours to fix
  if (left_) return;                            // a left node does not refute
  if (u.generation < self_.generation) {
    // Someone still talks about our former self: make sure our current generation travels.
    if (u.state != MemberState::kAlive && !queue_.contains(self_.name)) enqueue(update_of(me));
    return;
  }
  if (u.incarnation < me.incarnation) {
    // Older news, but its sender has not heard our refutation: gossip it again.
    if (u.state != MemberState::kAlive && !queue_.contains(self_.name)) enqueue(update_of(me));
    return;
  }
  if (u.state == MemberState::kAlive && u.incarnation == me.incarnation) return;
  // Suspect/dead/left about us at our version, or a conflicting alive: refute (memberlist
  // refute()): an incarnation above the accuser's, gossiped; it costs local health.
  me.incarnation = u.incarnation + 1;
  enqueue(update_of(me));
  ++stats_.refutations;
  raise_health(+1);
}

void Membership::apply_update(TimePoint now, const MemberUpdate& in, const std::string& via,
                              bool from_push_pull, Effects& out) {
  if (in.name.empty()) return;
  if (in.name == self_.name) {
    apply_self_update(in);
    return;
  }
  MemberUpdate u = in;
  const std::string accuser = u.from.empty() ? via : u.from;
  auto it = members_.find(u.name);
  if (it == members_.end()) {
    if (!is_live(u.state)) {
      // Remember the tombstone so stale alive gossip about this generation cannot revive it
      // (memberlist#312); it was never a member to us, so no event and no gossip.
      add_record(now, u);
      return;
    }
    if (u.state == MemberState::kSuspect) u.from = accuser;
    Record& r = add_record(now, u);
    if (r.state == MemberState::kSuspect) start_suspicion(now, r, accuser);
    emit(r, out);
    enqueue(update_of(r));
    return;
  }
  Record& r = it->second;
  if (u.generation < r.generation) return;  // about a former life of the member
  // memberlist mergeState: a remote verdict about a member we see alive is evidence only.
  if (from_push_pull && is_live(r.state) && u.state == MemberState::kDead) {
    u.state = MemberState::kSuspect;
  }

  if (u.generation > r.generation) {
    // The member restarted: the new generation replaces the record whatever it held.
    const MemberState old = r.state;
    clear_suspicion(r);
    r.generation = u.generation;
    r.incarnation = u.incarnation;
    if (!u.address.empty()) r.address = u.address;
    r.accuser = u.state == MemberState::kAlive ? std::string{} : accuser;
    set_state(now, r, u.state);
    if (u.state == MemberState::kSuspect) start_suspicion(now, r, accuser);
    if (is_live(old) || is_live(r.state) || old != r.state) emit(r, out);
    enqueue(update_of(r));
    return;
  }

  switch (u.state) {
    case MemberState::kAlive: {
      // Only a strictly higher incarnation (the member's own refutation) wins; left is final.
      if (u.incarnation <= r.incarnation || r.state == MemberState::kLeft) return;
      r.incarnation = u.incarnation;
      if (!u.address.empty()) r.address = u.address;
      if (r.state != MemberState::kAlive) {
        set_state(now, r, MemberState::kAlive);
        emit(r, out);
      }
      enqueue(update_of(r));
      return;
    }
    case MemberState::kSuspect: {
      if (r.state == MemberState::kLeft || u.incarnation < r.incarnation) return;
      if (r.state == MemberState::kDead && u.incarnation == r.incarnation) return;
      if (r.state == MemberState::kSuspect) {
        r.incarnation = std::max(r.incarnation, u.incarnation);
        if (confirm_suspicion(r, accuser)) {
          // Lifeguard: re-gossip each new independent confirmation.
          MemberUpdate confirmation = update_of(r);
          confirmation.from = accuser;
          enqueue(confirmation);
        }
        return;
      }
      r.incarnation = u.incarnation;
      set_state(now, r, MemberState::kSuspect);
      start_suspicion(now, r, accuser);
      emit(r, out);
      enqueue(update_of(r));
      return;
    }
    case MemberState::kDead:
    case MemberState::kLeft: {
      if (r.state == MemberState::kLeft || u.incarnation < r.incarnation) return;
      if (r.state == MemberState::kDead) {
        // A graceful leave explains a death; a newer dead only bumps the version.
        if (u.state == MemberState::kLeft) {
          r.incarnation = u.incarnation;
          r.accuser = accuser;
          set_state(now, r, MemberState::kLeft);
          emit(r, out);
          enqueue(update_of(r));
        } else if (u.incarnation > r.incarnation) {
          r.incarnation = u.incarnation;
        }
        return;
      }
      r.incarnation = u.incarnation;
      r.accuser = accuser;
      set_state(now, r, u.state);
      emit(r, out);
      enqueue(update_of(r));
      return;
    }
  }
}

// The envelope names the sender's (name, generation): a newer generation is a restart, an
// older one a stale message. Returns false when the message must be dropped.
bool Membership::note_sender(TimePoint now, const Inbound& in, Effects& out) {
  if (in.from.empty()) return true;
  if (in.from == self_.name) return false;  // our own echo, or our former self
  auto it = members_.find(in.from);
  if (it == members_.end()) {
    Record& r = add_record(now, MemberUpdate{.name = in.from,
                                             .generation = in.from_generation,
                                             .incarnation = 0,
                                             .state = MemberState::kAlive,
                                             .address = in.from_address,
                                             .from = {}});
    r.last_heard = now;
    emit(r, out);
    enqueue(update_of(r));
    return true;
  }
  Record& r = it->second;
  if (in.from_generation < r.generation) return false;
  if (in.from_generation > r.generation) {
    clear_suspicion(r);
    r.generation = in.from_generation;
    r.incarnation = 0;
    if (!in.from_address.empty()) r.address = in.from_address;
    set_state(now, r, MemberState::kAlive);
    emit(r, out);
    enqueue(update_of(r));
  }
  r.last_heard = now;
  return true;
}

// ---- inbound ----------------------------------------------------------------------------------

void Membership::on_message(TimePoint now, const Inbound& in, Effects& out) {
  catch_up_gossip_grid(now);
  ++stats_.messages_received;
  if (!note_sender(now, in, out)) return;
  std::visit([&](const auto& m) { handle(now, in, m, out); }, in.message);
  // Buddy system beyond probes: a member we hold as suspect or dead is talking to us, so it is
  // likely alive and unaware; tell it (at most once per gossip interval) so it refutes now
  // rather than when our next probe or gossip happens to pick it. Pings are already answered
  // with the verdict.
  if (left_ || std::holds_alternative<wire::Ping>(in.message)) return;
  const auto it = members_.find(in.from);
  if (it == members_.end()) return;
  Record& r = it->second;
  if (r.state != MemberState::kSuspect && r.state != MemberState::kDead) return;
  if (r.generation != in.from_generation) return;
  if (r.buddy_sent != TimePoint{} && now - r.buddy_sent < config_.gossip_interval) return;
  r.buddy_sent = now;
  send(out, r.name, in.from_address, wire::Ack{.probe = 0, .updates = piggyback(&r)});
}

void Membership::handle(TimePoint now, const Inbound& in, const wire::Ping& m, Effects& out) {
  apply_updates(now, m.updates, in.from, out);
  // A probe meant for another node at our address is not ours to answer; one meant for a
  // former generation of ours is answered, so the prober learns of the restart.
  if (!m.target.empty() && m.target != self_.name) return;
  if (m.target_generation > self_.generation) return;
  const auto it = members_.find(in.from);
  const Record* about =
      (it != members_.end() && it->second.state != MemberState::kAlive) ? &it->second : nullptr;
  send(out, in.from, in.from_address, wire::Ack{.probe = m.probe, .updates = piggyback(about)});
}

void Membership::handle(TimePoint now, const Inbound& in, const wire::Ack& m, Effects& out) {
  apply_updates(now, m.updates, in.from, out);
  if (m.probe == 0) return;  // a pure gossip carrier
  if (probe_ && probe_->seq == m.probe) {
    probe_.reset();
    raise_health(-1);
    return;
  }
  const auto relay = relays_.find(m.probe);
  if (relay != relays_.end()) {
    const Relay r = relay->second;
    relays_.erase(relay);
    const auto it = members_.find(r.requester);
    const Record* about =
        (it != members_.end() && it->second.state != MemberState::kAlive) ? &it->second : nullptr;
    send(out, r.requester, r.requester_address,
         wire::Ack{.probe = r.requester_probe, .updates = piggyback(about)});
  }
}

void Membership::handle(TimePoint now, const Inbound& in, const wire::PingReq& m, Effects& out) {
  apply_updates(now, m.updates, in.from, out);
  if (left_ || m.target == self_.name) return;
  const std::uint64_t seq = next_seq_++;
  relays_.emplace(seq, Relay{.requester = in.from,
                             .requester_address = in.from_address,
                             .requester_probe = m.probe,
                             .target_address = m.target_address,
                             .want_nack = m.want_nack,
                             .nacked = false,
                             .nack_at = now + config_.probe_timeout * 4 / 5,
                             .expires = now + config_.probe_interval});
  const auto it = members_.find(m.target);
  const Record* about =
      (it != members_.end() && it->second.state != MemberState::kAlive) ? &it->second : nullptr;
  send(out, m.target, m.target_address,
       wire::Ping{.probe = seq,
                  .target = m.target,
                  .target_generation = m.target_generation,
                  .updates = piggyback(about)});
}

void Membership::handle(TimePoint /*now*/, const Inbound& /*in*/, const wire::Nack& m,
                        Effects& /*out*/) {
  if (probe_ && probe_->seq == m.probe) {
    ++probe_->nacks;
    ++stats_.nacks_received;
  }
}

void Membership::handle(TimePoint /*now*/, const Inbound& in, const wire::PushPullDigest& m,
                        Effects& out) {
  if (left_ || m.reply) return;
  if (m.digest == digest()) return;
  send(out, in.from, in.from_address,
       wire::PushPullState{.members = full_state(), .join = false, .reply = false});
}

// Three messages at most: digest -> state -> (state, reply) when the views still differ; a join
// is state(join) -> state(join, reply). A reply is merged and never answered, so it cannot loop.
void Membership::handle(TimePoint now, const Inbound& in, const wire::PushPullState& m,
                        Effects& out) {
  if (left_) return;
  for (const auto& u : m.members) apply_update(now, u, in.from, /*from_push_pull=*/true, out);
  if (m.reply) return;
  if (m.join || digest_of(m.members) != digest()) {
    send(out, in.from, in.from_address,
         wire::PushPullState{.members = full_state(), .join = m.join, .reply = true});
  }
}

void Membership::on_unreachable(TimePoint now, const std::string& address, Effects& out) {
  catch_up_gossip_grid(now);
  if (probe_ && !probe_->indirect_sent && probe_->address == address) send_indirect(now, out);
  for (auto& [seq, relay] : relays_) {
    if (relay.target_address == address && relay.want_nack && !relay.nacked) {
      relay.nacked = true;
      send(out, relay.requester, relay.requester_address,
           wire::Nack{.probe = relay.requester_probe});
    }
  }
}

// ---- timers -----------------------------------------------------------------------------------

// While nothing is queued no gossip is due, so grid points that pass unticked are skipped
// rather than left in the past: the first update queued after an idle spell then waits for the
// next grid point instead of being gossiped at once (every node would forward news the moment
// it heard it). Called on entry to everything that may queue an update.
void Membership::catch_up_gossip_grid(TimePoint now) {
  if (queue_.empty()) advance_gossip_grid(now, /*past_now=*/false);
}

// Moves next_gossip_ forward by whole intervals to the first grid point >= now (> now when
// past_now), keeping the random phase picked at construction.
void Membership::advance_gossip_grid(TimePoint now, bool past_now) {
  if (next_gossip_ > now || (!past_now && next_gossip_ == now)) return;
  const Duration interval = config_.gossip_interval;
  if (interval.count() <= 0) {
    next_gossip_ = past_now ? now + Duration(1) : now;
    return;
  }
  const Duration behind = now - next_gossip_;
  auto steps = behind / interval;
  if (past_now || behind % interval != Duration{}) ++steps;
  next_gossip_ += interval * steps;
}

void Membership::tick(TimePoint now, Effects& out) {
  catch_up_gossip_grid(now);
  for (auto it = relays_.begin(); it != relays_.end();) {
    Relay& relay = it->second;
    if (relay.want_nack && !relay.nacked && now >= relay.nack_at) {
      relay.nacked = true;
      send(out, relay.requester, relay.requester_address,
           wire::Nack{.probe = relay.requester_probe});
    }
    if (now >= relay.expires && (!relay.want_nack || relay.nacked)) {
      it = relays_.erase(it);
    } else {
      ++it;
    }
  }

  if (probe_ && !probe_->indirect_sent && now >= probe_->timeout_at) send_indirect(now, out);
  if (probe_ && now >= probe_->interval_end) finish_probe(now, out);
  if (!left_ && !probe_ && now >= next_probe_) start_probe(now, out);

  while (!suspicion_timers_.empty() && suspicion_timers_.begin()->first <= now) {
    const std::string name = suspicion_timers_.begin()->second;
    suspicion_timers_.erase(suspicion_timers_.begin());
    Record& r = members_.at(name);
    r.suspicion->timer = TimePoint{};  // erased above
    suspicion_timer_fired(now, r, out);
  }
  while (!tombstone_timers_.empty() && tombstone_timers_.begin()->first <= now) {
    const std::string name = tombstone_timers_.begin()->second;
    tombstone_timers_.erase(tombstone_timers_.begin());
    remove_record(name);
  }

  // Gossip runs on the gossip_interval grid (memberlist's ticker): due grid points gossip once,
  // then the next point after now is scheduled.
  if (now >= next_gossip_) {
    gossip(now, out);
    advance_gossip_grid(now, /*past_now=*/true);
  }
  if (left_) return;
  if (now >= next_push_pull_) {
    next_push_pull_ = now + push_pull_period(config_, live_count_);
    push_pull(now, out);
  }
  if (now >= next_reconnect_) {
    next_reconnect_ = now + config_.reconnect_interval;
    reconnect(now, out);
  }
  if (now >= next_rejoin_) {
    next_rejoin_ = now + config_.rejoin_interval;
    bool seed_is_member = false;
    bool seed_is_other = false;
    for (const auto& [name, r] : members_) {
      if (name == self_.name) continue;
      if (std::find(seeds_.begin(), seeds_.end(), r.address) != seeds_.end() && is_live(r.state)) {
        seed_is_member = true;
        break;
      }
    }
    for (const auto& seed : seeds_) seed_is_other = seed_is_other || seed != self_.address;
    if (!seed_is_member && seed_is_other) send_join(out);
  }
}

const Membership::Record* Membership::next_probe_target() {
  bool reshuffled = false;
  while (true) {
    if (probe_index_ >= probe_order_.size()) {
      if (reshuffled) return nullptr;  // a whole pass found nobody to probe
      reshuffled = true;
      probe_order_.clear();
      for (const auto& name : names_) {
        if (name != self_.name) probe_order_.push_back(name);
      }
      for (std::size_t i = probe_order_.size(); i > 1; --i) {
        std::swap(probe_order_[i - 1], probe_order_[rng_.below(i)]);
      }
      probe_index_ = 0;
      if (probe_order_.empty()) return nullptr;
    }
    const auto it = members_.find(probe_order_[probe_index_++]);
    if (it != members_.end() && it->first != self_.name && is_live(it->second.state)) {
      return &it->second;
    }
  }
}

void Membership::start_probe(TimePoint now, Effects& out) {
  const int scale = 1 + stats_.local_health;
  const Record* target = next_probe_target();
  if (target == nullptr) {
    next_probe_ = now + config_.probe_interval;
    return;
  }
  Probe p;
  p.seq = next_seq_++;
  p.target = target->name;
  p.generation = target->generation;
  p.address = target->address;
  p.timeout_at = now + config_.probe_timeout * scale;
  p.interval_end = now + config_.probe_interval * scale;
  next_probe_ = p.interval_end;
  ++stats_.probes;
  const Record* about = target->state == MemberState::kAlive ? nullptr : target;
  send(out, p.target, p.address,
       wire::Ping{.probe = p.seq,
                  .target = p.target,
                  .target_generation = p.generation,
                  .updates = piggyback(about)});
  probe_ = std::move(p);
}

void Membership::send_indirect(TimePoint now, Effects& out) {
  Probe& p = *probe_;
  p.indirect_sent = true;
  ++stats_.probe_timeouts;
  std::vector<std::string> relays;
  {
    // PingReq goes to alive members only (memberlist), never to the target itself.
    std::vector<std::string> candidates = random_members(
        static_cast<std::size_t>(std::max(config_.indirect_probes, 0)) * 2, false, p.target, now);
    for (const auto& name : candidates) {
      if (relays.size() >= static_cast<std::size_t>(std::max(config_.indirect_probes, 0))) break;
      if (members_.at(name).state == MemberState::kAlive) relays.push_back(name);
    }
  }
  p.expected_nacks = static_cast<int>(relays.size());
  const std::string target = p.target;
  const std::uint64_t generation = p.generation;
  const std::string address = p.address;
  const std::uint64_t seq = p.seq;
  for (const auto& name : relays) {
    ++stats_.indirect_probes;
    const Record& relay = members_.at(name);
    send(out, name, relay.address,
         wire::PingReq{.probe = seq,
                       .target = target,
                       .target_generation = generation,
                       .target_address = address,
                       .want_nack = true,
                       .updates = piggyback(nullptr)});
  }
}

void Membership::finish_probe(TimePoint now, Effects& out) {
  const Probe p = *probe_;
  probe_.reset();
  // Lifeguard: every expected nack that did not come means our own node is the slow one.
  if (p.expected_nacks > 0) {
    if (p.nacks < p.expected_nacks) raise_health(p.expected_nacks - p.nacks);
  } else {
    raise_health(+1);
  }
  const auto it = members_.find(p.target);
  if (it == members_.end() || it->second.generation != p.generation || !is_live(it->second.state)) {
    return;
  }
  const Record& r = it->second;
  apply_update(now,
               MemberUpdate{.name = r.name,
                            .generation = r.generation,
                            .incarnation = r.incarnation,
                            .state = MemberState::kSuspect,
                            .address = r.address,
                            .from = self_.name},
               self_.name, /*from_push_pull=*/false, out);
}

void Membership::gossip(TimePoint now, Effects& out) {
  if (queue_.empty()) return;
  const auto targets = random_members(static_cast<std::size_t>(std::max(config_.gossip_fanout, 0)),
                                      /*include_recent_dead=*/true, std::string{}, now);
  for (const auto& name : targets) {
    if (queue_.empty()) break;
    const Record& r = members_.at(name);
    const Record* about = r.state == MemberState::kAlive ? nullptr : &r;
    send(out, name, r.address, wire::Ack{.probe = 0, .updates = piggyback(about)});
  }
}

void Membership::push_pull(TimePoint now, Effects& out) {
  const auto picked = random_members(4, false, std::string{}, now);
  for (const auto& name : picked) {
    if (members_.at(name).state == MemberState::kAlive) {
      const Record& r = members_.at(name);
      send(out, name, r.address,
           wire::PushPullDigest{.digest = digest(),
                                .members = static_cast<std::uint32_t>(members_.size()),
                                .reply = false});
      return;
    }
  }
}

// Serf: try one failed member, with probability failed/alive so the cluster as a whole makes
// about one attempt per failed member per interval.
void Membership::reconnect(TimePoint now, Effects& out) {
  std::vector<const Record*> failed;
  for (const auto& [name, r] : members_) {
    if (r.state == MemberState::kDead && now - r.state_since < config_.tombstone_ttl) {
      failed.push_back(&r);
    }
  }
  if (failed.empty()) return;
  const double probability = static_cast<double>(failed.size()) /
                             static_cast<double>(std::max<std::size_t>(live_count_, 1));
  if (rng_.unit() >= probability) return;
  const Record* target = failed[rng_.below(failed.size())];
  // The Ping carries our verdict about the target so that, if it is alive, it refutes.
  send(out, target->name, target->address,
       wire::Ping{.probe = next_seq_++,
                  .target = target->name,
                  .target_generation = target->generation,
                  .updates = piggyback(target)});
}

// ---- join and leave ---------------------------------------------------------------------------

void Membership::send_join(Effects& out) {
  for (const auto& seed : seeds_) {
    if (seed == self_.address) continue;
    send(out, std::string{}, seed,
         wire::PushPullState{.members = full_state(), .join = true, .reply = false});
  }
}

void Membership::join(TimePoint now, const std::vector<std::string>& seed_addresses, Effects& out) {
  catch_up_gossip_grid(now);
  if (left_) return;
  seeds_ = seed_addresses;
  next_rejoin_ = seeds_.empty() ? kNever : now + config_.rejoin_interval;
  enqueue(update_of(members_.at(self_.name)));
  send_join(out);
}

void Membership::leave(TimePoint now, Effects& out) {
  catch_up_gossip_grid(now);
  if (left_) return;
  left_ = true;
  probe_.reset();
  Record& me = members_.at(self_.name);
  ++me.incarnation;
  me.accuser = self_.name;
  set_state(now, me, MemberState::kLeft);
  enqueue(update_of(me));
  const auto targets = random_members(static_cast<std::size_t>(std::max(config_.gossip_fanout, 1)),
                                      false, std::string{}, now);
  for (const auto& name : targets) {
    const Record& r = members_.at(name);
    send(out, name, r.address, wire::Ack{.probe = 0, .updates = piggyback(nullptr)});
  }
}

}  // namespace elastic::membership
