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

// name_hash is NameTable::hash_of(name).
std::uint64_t record_hash(std::uint64_t name_hash, std::uint64_t generation,
                          std::uint32_t incarnation, MemberState state) {
  std::uint64_t h = name_hash;
  h = mix64(h ^ generation);
  h = mix64(h ^ (static_cast<std::uint64_t>(incarnation) << 8 | static_cast<std::uint8_t>(state)));
  return h;
}

}  // namespace

// ---- NameTable ----------------------------------------------------------------------------------

const std::string& NameTable::Ref::empty() {
  static const std::string kEmpty;
  return kEmpty;
}

NameTable::~NameTable() {
  // A Ref outliving its table would write to freed memory later: fail here instead.
  if (!entries_.empty()) std::abort();
}

std::uint64_t NameTable::hash_of(std::string_view text) { return mix64(fnv1a(text)); }

NameTable::Ref NameTable::intern(std::string_view text) {
  if (text.empty()) return Ref{};
  const auto it = entries_.find(text);
  if (it != entries_.end()) return Ref(it->second.get());
  auto entry = std::make_unique<Entry>();
  entry->text = std::string(text);
  entry->hash = hash_of(text);
  entry->table = this;
  Entry* raw = entry.get();
  entries_.emplace(std::string_view(raw->text), std::move(entry));
  return Ref(raw);
}

void NameTable::release(Entry* entry) { entries_.erase(std::string_view(entry->text)); }

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
                       TimePoint now, std::shared_ptr<NameTable> names)
    : names_(names != nullptr ? std::move(names) : std::make_shared<NameTable>()),
      self_(std::move(self)),
      config_(config),
      rng_(seed) {
  self_name_ = names_->intern(self_.name);
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

void Membership::seed_members(TimePoint now, const std::vector<MemberUpdate>& members) {
  catch_up_gossip_grid(now);
  index_reserve(member_count_ + members.size());
  probe_order_.reserve(probe_order_.size() + members.size());
  for (const auto& u : members) {
    if (u.name.empty() || u.name == self_.name || lookup(u.name)) continue;
    Record& r = add_record(now, u);
    if (r.state == MemberState::kSuspect) {
      start_suspicion(now, r, u.from.empty() ? self_.name : u.from);
    }
  }
}

namespace {

template <typename R>
MemberView view_of(const R& r) {
  return MemberView{.name = r.name.str(),
                    .generation = r.generation,
                    .incarnation = r.incarnation,
                    .state = r.state,
                    .address = r.address.str(),
                    .last_heard = r.last_heard,
                    .state_since = r.state_since};
}

}  // namespace

std::vector<MemberView> Membership::members() const {
  std::vector<MemberView> views;
  views.reserve(member_count_);
  for (const Record& r : slots_) {
    if (r.name) views.push_back(view_of(r));
  }
  std::sort(views.begin(), views.end(),
            [](const MemberView& a, const MemberView& b) { return a.name < b.name; });
  return views;
}

std::optional<MemberView> Membership::member(const std::string& name) const {
  const Record* r = find(name);
  if (r == nullptr) return std::nullopt;
  return view_of(*r);
}

std::size_t Membership::alive_count() const { return live_count_; }

std::uint64_t Membership::digest() const {
  std::uint64_t sum = 0;
  for (const Record& r : slots_) {
    if (r.name) sum += record_hash(r.name.hash(), r.generation, r.incarnation, r.state);
  }
  return sum;
}

std::uint64_t Membership::digest_of(const std::vector<MemberUpdate>& members) {
  std::uint64_t sum = 0;
  for (const auto& u : members) {
    sum += record_hash(NameTable::hash_of(u.name), u.generation, u.incarnation, u.state);
  }
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

std::optional<Membership::Slot> Membership::lookup(std::string_view name) const {
  if (index_.empty()) return std::nullopt;
  const std::uint64_t hash = NameTable::hash_of(name);
  const std::size_t mask = index_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot entry = index_[i];
    if (entry == 0) return std::nullopt;
    const Record& r = slots_[entry - 1];
    if (r.name.hash() == hash && r.name.str() == name) return entry - 1;
  }
}

Membership::Record* Membership::find(std::string_view name) {
  const auto slot = lookup(name);
  return slot ? &slots_[*slot] : nullptr;
}

const Membership::Record* Membership::find(std::string_view name) const {
  const auto slot = lookup(name);
  return slot ? &slots_[*slot] : nullptr;
}

Membership::Record& Membership::at(std::string_view name) {
  Record* r = find(name);
  if (r == nullptr) std::abort();  // callers pass names they just found: a logic error
  return *r;
}

// Sizes the index for `members` records at most 70% full (linear probing stays short).
void Membership::index_reserve(std::size_t members) {
  std::size_t size = index_.empty() ? 16 : index_.size();
  while (members * 10 > size * 7) size *= 2;
  if (size == index_.size()) return;
  index_.assign(size, 0);
  for (Slot slot = 0; slot < slots_.size(); ++slot) {
    if (slots_[slot].name) index_insert(slot);
  }
}

void Membership::index_insert(Slot slot) {
  const std::size_t mask = index_.size() - 1;
  std::size_t i = slots_[slot].name.hash() & mask;
  while (index_[i] != 0) i = (i + 1) & mask;
  index_[i] = slot + 1;
}

// Backward-shift deletion: later entries of the probe run move up, so no tombstones are needed.
void Membership::index_erase(Slot slot) {
  const std::size_t mask = index_.size() - 1;
  std::size_t i = slots_[slot].name.hash() & mask;
  while (index_[i] != slot + 1) {
    if (index_[i] == 0) std::abort();  // the record was indexed when added
    i = (i + 1) & mask;
  }
  index_[i] = 0;
  for (std::size_t j = (i + 1) & mask; index_[j] != 0; j = (j + 1) & mask) {
    const std::size_t home = slots_[index_[j] - 1].name.hash() & mask;
    // The entry at j may move to the hole at i unless its home lies cyclically in (i, j].
    const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    index_[i] = index_[j];
    index_[j] = 0;
    i = j;
  }
}

const std::string& Membership::accuser_of(const Record& r) const {
  return r.verdict != nullptr ? r.verdict->accuser.str() : NameTable::Ref{}.str();
}

void Membership::set_accuser(Record& r, const std::string& accuser) {
  if (r.verdict == nullptr) r.verdict = std::make_unique<Verdict>();
  r.verdict->accuser = names_->intern(accuser);
}

Membership::Suspicion* Membership::suspicion_of(Record& r) {
  return r.verdict != nullptr && r.verdict->suspicion ? &*r.verdict->suspicion : nullptr;
}

Membership::Record& Membership::add_record(TimePoint now, const MemberUpdate& u) {
  if (u.name.empty() || lookup(u.name)) std::abort();  // callers check first: a logic error
  index_reserve(member_count_ + 1);  // before the new record is named, so it is indexed once
  Slot slot = 0;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<Slot>(slots_.size());
    slots_.emplace_back();
  }
  Record& r = slots_[slot];
  r.name = names_->intern(u.name);
  r.generation = u.generation;
  r.incarnation = u.incarnation;
  r.state = u.state;
  r.address = names_->intern(u.address);
  r.verdict.reset();
  if (u.state != MemberState::kAlive) set_accuser(r, u.from);
  r.last_heard = TimePoint{};
  r.state_since = now;
  ++member_count_;
  index_insert(slot);
  if (is_live(r.state)) {
    ++live_count_;
  } else if (!is_self(r)) {
    tombstone_timers_.emplace(now + config_.tombstone_ttl, u.name);
  }
  if (!is_self(r)) {
    // memberlist: a new node goes to a random place of the not-yet-probed part of the pass.
    probe_order_.push_back(slot);
    const std::size_t lo = std::min(probe_index_, probe_order_.size() - 1);
    const std::size_t pos = lo + rng_.below(probe_order_.size() - lo);
    std::swap(probe_order_[pos], probe_order_.back());
  }
  return r;
}

void Membership::remove_record(const std::string& name) {
  const auto slot = lookup(name);
  if (!slot) return;
  Record& r = slots_[*slot];
  clear_suspicion(r);
  if (is_live(r.state)) --live_count_;
  index_erase(*slot);
  r = Record{};
  free_slots_.push_back(*slot);
  --member_count_;
  // probe_order_ keeps the slot until the next reshuffle; the probe loop skips free slots (a
  // reused one is simply probed in this pass).
}

void Membership::set_state(TimePoint now, Record& r, MemberState state) {
  if (is_live(r.state) && !is_live(state)) --live_count_;
  if (!is_live(r.state) && is_live(state)) ++live_count_;
  if (!is_live(r.state)) {
    tombstone_timers_.erase({r.state_since + config_.tombstone_ttl, r.name.str()});
  }
  if (state != MemberState::kSuspect) clear_suspicion(r);
  if (state == MemberState::kAlive) r.verdict.reset();  // accuser and buddy state go with it
  r.state = state;
  r.state_since = now;
  // Our own record is never reaped: a left node keeps answering probes until it exits.
  if (!is_live(state) && !is_self(r)) {
    tombstone_timers_.emplace(now + config_.tombstone_ttl, r.name.str());
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
  set_accuser(r, accuser);
  r.verdict->suspicion = std::move(s);
  arm_suspicion_timer(now, r);
  ++stats_.suspicions;
}

// The timer fires for the next last call still due before the deadline, else at the deadline.
// Last calls go at deadline - k * probe_timeout (k = kSuspicionLastCalls..1), one probe_timeout
// apart at least, so each Ping has a probe_timeout to be answered.
void Membership::arm_suspicion_timer(TimePoint now, Record& r) {
  Suspicion& s = *suspicion_of(r);
  if (s.timer != TimePoint{}) suspicion_timers_.erase({s.timer, r.name.str()});
  s.timer = s.deadline;
  const int calls_left = kSuspicionLastCalls - s.last_calls;
  if (calls_left > 0) {
    const TimePoint call = s.deadline - config_.probe_timeout * calls_left;
    s.timer = std::clamp(call, now, s.deadline);
  }
  suspicion_timers_.emplace(s.timer, r.name.str());
}

void Membership::suspicion_timer_fired(TimePoint now, Record& r, Effects& out) {
  Suspicion& s = *suspicion_of(r);
  if (now < s.deadline && s.last_calls < kSuspicionLastCalls) {
    // A last call: the Ping carries our verdict first, so a live suspect answers with its
    // refutation (or re-sends the one we missed). The Ack matches no probe; only its updates
    // count.
    ++s.last_calls;
    send(out, r.name.str(), r.address.str(),
         wire::Ping{.probe = next_seq_++,
                    .target = r.name.str(),
                    .target_generation = r.generation,
                    .updates = piggyback(&r)});
    s.timer = TimePoint{};
    arm_suspicion_timer(now, r);
    // The next one comes a probe_timeout later at the earliest (never past the deadline).
    if (s.timer < now + config_.probe_timeout && s.timer < s.deadline) {
      suspicion_timers_.erase({s.timer, r.name.str()});
      s.timer = std::min(now + config_.probe_timeout, s.deadline);
      suspicion_timers_.emplace(s.timer, r.name.str());
    }
    return;
  }
  clear_suspicion(r);
  set_accuser(r, self_.name);
  set_state(now, r, MemberState::kDead);
  ++stats_.deaths;
  emit(r, out);
  enqueue(update_of(r));
}

// Lifeguard: each independent confirmation moves the deadline down the logarithmic curve.
bool Membership::confirm_suspicion(Record& r, const std::string& accuser) {
  Suspicion* suspicion = suspicion_of(r);
  if (suspicion == nullptr) return false;
  Suspicion& s = *suspicion;
  if (s.confirmations >= s.k) return false;
  if (!s.accusers.insert(accuser).second) return false;
  ++s.confirmations;
  s.deadline = s.start +
               curve_timeout(SuspicionCurve{.min = s.min, .max = s.max, .k = s.k}, s.confirmations);
  arm_suspicion_timer(s.start, r);
  return true;
}

void Membership::clear_suspicion(Record& r) {
  Suspicion* s = suspicion_of(r);
  if (s == nullptr) return;
  suspicion_timers_.erase({s->timer, r.name.str()});
  r.verdict->suspicion.reset();
}

void Membership::emit(const Record& r, Effects& out) const {
  if (is_self(r)) return;  // events are about other members
  out.events.push_back(MemberEvent{.name = r.name.str(),
                                   .generation = r.generation,
                                   .state = r.state,
                                   .address = r.address.str()});
}

MemberUpdate Membership::update_of(const Record& r) const {
  return MemberUpdate{.name = r.name.str(),
                      .generation = r.generation,
                      .incarnation = r.incarnation,
                      .state = r.state,
                      .address = r.address.str(),
                      .from = r.state == MemberState::kAlive ? std::string{} : accuser_of(r)};
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
    if (about != nullptr && q.update.name == about->name.str()) continue;
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
  state.reserve(member_count_);
  for (const Record& r : slots_) {
    if (r.name) state.push_back(update_of(r));
  }
  return state;
}

// k distinct random members other than self and `exclude`: alive or suspect, plus dead ones
// within gossip_to_dead when asked. Small lists are shuffled so no candidate is missed
// (memberlist PR#350); large ones are sampled with a bounded number of tries.
std::vector<Membership::Slot> Membership::random_members(std::size_t k, bool include_recent_dead,
                                                         const std::string& exclude,
                                                         TimePoint now) {
  std::vector<Slot> picked;
  if (k == 0) return picked;
  const auto eligible = [&](Slot slot) {
    const Record& r = slots_[slot];
    if (!r.name || is_self(r) || (!exclude.empty() && r.name.str() == exclude)) return false;
    if (is_live(r.state)) return true;
    return include_recent_dead && r.state == MemberState::kDead &&
           now - r.state_since < config_.gossip_to_dead;
  };
  if (member_count_ <= 64) {
    std::vector<Slot> candidates;
    for (Slot slot = 0; slot < slots_.size(); ++slot) {
      if (eligible(slot)) candidates.push_back(slot);
    }
    for (std::size_t i = 0; i < candidates.size() && picked.size() < k; ++i) {
      const std::size_t j = i + rng_.below(candidates.size() - i);
      std::swap(candidates[i], candidates[j]);
      picked.push_back(candidates[i]);
    }
    return picked;
  }
  for (std::size_t tries = 0; tries < 3 * slots_.size() && picked.size() < k; ++tries) {
    const auto slot = static_cast<Slot>(rng_.below(slots_.size()));
    if (!eligible(slot)) continue;
    if (std::find(picked.begin(), picked.end(), slot) != picked.end()) continue;
    picked.push_back(slot);
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
  Record& me = at(self_.name);
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
  Record* found = find(u.name);
  if (found == nullptr) {
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
  Record& r = *found;
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
    if (!u.address.empty() && u.address != r.address.str()) r.address = names_->intern(u.address);
    if (u.state != MemberState::kAlive) set_accuser(r, accuser);
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
      if (!u.address.empty() && u.address != r.address.str()) {
        r.address = names_->intern(u.address);
      }
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
          set_accuser(r, accuser);
          set_state(now, r, MemberState::kLeft);
          emit(r, out);
          enqueue(update_of(r));
        } else if (u.incarnation > r.incarnation) {
          r.incarnation = u.incarnation;
        }
        return;
      }
      r.incarnation = u.incarnation;
      set_accuser(r, accuser);
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
  Record* found = find(in.from);
  if (found == nullptr) {
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
  Record& r = *found;
  if (in.from_generation < r.generation) return false;
  if (in.from_generation > r.generation) {
    clear_suspicion(r);
    r.generation = in.from_generation;
    r.incarnation = 0;
    if (!in.from_address.empty() && in.from_address != r.address.str()) {
      r.address = names_->intern(in.from_address);
    }
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
  Record* found = find(in.from);
  if (found == nullptr) return;
  Record& r = *found;
  if (r.state != MemberState::kSuspect && r.state != MemberState::kDead) return;
  if (r.generation != in.from_generation) return;
  // Suspect and dead records always hold a verdict (set_accuser runs before each such state).
  if (r.verdict == nullptr) std::abort();
  TimePoint& buddy_sent = r.verdict->buddy_sent;
  if (buddy_sent != TimePoint{} && now - buddy_sent < config_.gossip_interval) return;
  buddy_sent = now;
  send(out, r.name.str(), in.from_address, wire::Ack{.probe = 0, .updates = piggyback(&r)});
}

void Membership::handle(TimePoint now, const Inbound& in, const wire::Ping& m, Effects& out) {
  apply_updates(now, m.updates, in.from, out);
  // A probe meant for another node at our address is not ours to answer; one meant for a
  // former generation of ours is answered, so the prober learns of the restart.
  if (!m.target.empty() && m.target != self_.name) return;
  if (m.target_generation > self_.generation) return;
  const Record* about = find(in.from);
  if (about != nullptr && about->state == MemberState::kAlive) about = nullptr;
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
    const Record* about = find(r.requester);
    if (about != nullptr && about->state == MemberState::kAlive) about = nullptr;
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
  const Record* about = find(m.target);
  if (about != nullptr && about->state == MemberState::kAlive) about = nullptr;
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
    Record& r = at(name);
    suspicion_of(r)->timer = TimePoint{};  // erased above
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
    for (const Record& r : slots_) {
      if (!r.name || is_self(r)) continue;
      if (is_live(r.state) &&
          std::find(seeds_.begin(), seeds_.end(), r.address.str()) != seeds_.end()) {
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
      for (Slot slot = 0; slot < slots_.size(); ++slot) {
        if (slots_[slot].name && !is_self(slots_[slot])) probe_order_.push_back(slot);
      }
      for (std::size_t i = probe_order_.size(); i > 1; --i) {
        std::swap(probe_order_[i - 1], probe_order_[rng_.below(i)]);
      }
      probe_index_ = 0;
      if (probe_order_.empty()) return nullptr;
    }
    const Record& r = slots_[probe_order_[probe_index_++]];
    if (r.name && !is_self(r) && is_live(r.state)) return &r;
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
  p.target = target->name.str();
  p.generation = target->generation;
  p.address = target->address.str();
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
  std::vector<Slot> relays;
  {
    // PingReq goes to alive members only (memberlist), never to the target itself.
    const std::vector<Slot> candidates = random_members(
        static_cast<std::size_t>(std::max(config_.indirect_probes, 0)) * 2, false, p.target, now);
    for (const Slot slot : candidates) {
      if (relays.size() >= static_cast<std::size_t>(std::max(config_.indirect_probes, 0))) break;
      if (slots_[slot].state == MemberState::kAlive) relays.push_back(slot);
    }
  }
  p.expected_nacks = static_cast<int>(relays.size());
  const std::string target = p.target;
  const std::uint64_t generation = p.generation;
  const std::string address = p.address;
  const std::uint64_t seq = p.seq;
  for (const Slot slot : relays) {
    ++stats_.indirect_probes;
    const Record& relay = slots_[slot];
    send(out, relay.name.str(), relay.address.str(),
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
  const Record* found = find(p.target);
  if (found == nullptr || found->generation != p.generation || !is_live(found->state)) return;
  const Record& r = *found;
  apply_update(now,
               MemberUpdate{.name = r.name.str(),
                            .generation = r.generation,
                            .incarnation = r.incarnation,
                            .state = MemberState::kSuspect,
                            .address = r.address.str(),
                            .from = self_.name},
               self_.name, /*from_push_pull=*/false, out);
}

void Membership::gossip(TimePoint now, Effects& out) {
  if (queue_.empty()) return;
  const auto targets = random_members(static_cast<std::size_t>(std::max(config_.gossip_fanout, 0)),
                                      /*include_recent_dead=*/true, std::string{}, now);
  for (const Slot slot : targets) {
    if (queue_.empty()) break;
    const Record& r = slots_[slot];
    const Record* about = r.state == MemberState::kAlive ? nullptr : &r;
    send(out, r.name.str(), r.address.str(), wire::Ack{.probe = 0, .updates = piggyback(about)});
  }
}

void Membership::push_pull(TimePoint now, Effects& out) {
  const auto picked = random_members(4, false, std::string{}, now);
  for (const Slot slot : picked) {
    const Record& r = slots_[slot];
    if (r.state == MemberState::kAlive) {
      send(out, r.name.str(), r.address.str(),
           wire::PushPullDigest{.digest = digest(),
                                .members = static_cast<std::uint32_t>(member_count_),
                                .reply = false});
      return;
    }
  }
}

// Serf: try one failed member, with probability failed/alive so the cluster as a whole makes
// about one attempt per failed member per interval.
void Membership::reconnect(TimePoint now, Effects& out) {
  std::vector<const Record*> failed;
  for (const Record& r : slots_) {
    if (r.name && r.state == MemberState::kDead && now - r.state_since < config_.tombstone_ttl) {
      failed.push_back(&r);
    }
  }
  if (failed.empty()) return;
  const double probability = static_cast<double>(failed.size()) /
                             static_cast<double>(std::max<std::size_t>(live_count_, 1));
  if (rng_.unit() >= probability) return;
  const Record* target = failed[rng_.below(failed.size())];
  // The Ping carries our verdict about the target so that, if it is alive, it refutes.
  send(out, target->name.str(), target->address.str(),
       wire::Ping{.probe = next_seq_++,
                  .target = target->name.str(),
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
  enqueue(update_of(at(self_.name)));
  send_join(out);
}

void Membership::leave(TimePoint now, Effects& out) {
  catch_up_gossip_grid(now);
  if (left_) return;
  left_ = true;
  probe_.reset();
  Record& me = at(self_.name);
  ++me.incarnation;
  set_accuser(me, self_.name);
  set_state(now, me, MemberState::kLeft);
  enqueue(update_of(me));
  const auto targets = random_members(static_cast<std::size_t>(std::max(config_.gossip_fanout, 1)),
                                      false, std::string{}, now);
  for (const Slot slot : targets) {
    const Record& r = slots_[slot];
    send(out, r.name.str(), r.address.str(), wire::Ack{.probe = 0, .updates = piggyback(nullptr)});
  }
}

}  // namespace elastic::membership
