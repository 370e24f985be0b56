#include "daemon/rendezvous/job_watch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace elastic::rendezvous {
namespace {

const JobRoundRef& ref_of(const JobMessage& message) {
  return std::visit([](const auto& m) -> const JobRoundRef& { return m.ref; }, message);
}

// FNV-1a 64 with a final avalanche (splitmix64's), over the bytes of each part: the ring position
// of a member in one round. Every member computes it from the same values.
class RingHash {
 public:
  RingHash& add(std::string_view bytes) {
    for (const char c : bytes) {
      h_ ^= static_cast<unsigned char>(c);
      h_ *= 0x100000001b3ull;
    }
    h_ ^= 0xff;  // a separator, so ("ab", "c") and ("a", "bc") differ
    h_ *= 0x100000001b3ull;
    return *this;
  }
  RingHash& add(std::uint64_t n) { return add(std::to_string(n)); }
  std::uint64_t value() const {
    std::uint64_t z = h_ + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace

const char* to_string(LostReason reason) {
  switch (reason) {
    case LostReason::kSilent:
      return "silent";
    case LostReason::kWorkerExited:
      return "worker_exited";
    case LostReason::kRestarted:
      return "restarted";
    case LostReason::kReported:
      return "reported";
  }
  return "unknown";
}

JobWatchConfig JobWatchConfig::from(Duration keepalive_interval, Duration peer_timeout) {
  JobWatchConfig c;
  c.keepalive_interval = keepalive_interval;
  c.peer_timeout = peer_timeout;
  c.confirm_window = peer_timeout * 2 / 3;
  c.helper_timeout = c.confirm_window * 3 / 8;
  return c;
}

Status JobWatchConfig::validate() const {
  if (keepalive_interval <= Duration::zero()) {
    return Error{"The job watch keepalive_interval must be positive."};
  }
  if (peer_timeout <= keepalive_interval) {
    return Error{"The job watch peer_timeout must be longer than keepalive_interval."};
  }
  if (confirm_window <= Duration::zero()) {
    return Error{"The job watch confirm_window must be positive."};
  }
  if (helper_timeout <= Duration::zero() || helper_timeout >= confirm_window) {
    return Error{"The job watch helper_timeout must be positive and shorter than confirm_window."};
  }
  if (indirect_probes < 0) return Error{"The job watch indirect_probes must not be negative."};
  if (watchers < 1 || static_cast<std::size_t>(watchers) > watch_all_up_to) {
    return Error{"The job watch watchers must be at least 1 and at most watch_all_up_to (" +
                 std::to_string(watch_all_up_to) + ")."};
  }
  if (notice_forwards < 0) return Error{"The job watch notice_forwards must not be negative."};
  if (joiner_grace < Duration::zero()) {
    return Error{"The job watch joiner_grace must not be negative."};
  }
  return ok_status();
}

JobWatch::JobWatch(std::string self, std::uint64_t self_generation, const JobWatchConfig& config,
                   std::uint64_t seed)
    : self_(std::move(self)), self_generation_(self_generation), config_(config), rng_(seed) {
  if (Status s = config_.validate(); !s.ok()) {
    std::fprintf(stderr, "JobWatch: %s\n", s.error().message.c_str());
    std::abort();
  }
}

Status JobWatch::set_round(TimePoint now, const std::string& job, std::uint64_t term,
                           std::uint64_t round, const std::vector<JobPeer>& peers,
                           JobWatchEffects& out) {
  if (!ref_.job.empty() && job != ref_.job) {
    std::fprintf(stderr, "JobWatch for job %s was given a round of job %s\n", ref_.job.c_str(),
                 job.c_str());
    std::abort();
  }
  if (!ref_.job.empty() && std::tie(round, term) <= std::tie(ref_.round, ref_.term)) {
    return Error{"Round " + std::to_string(round) + " (term " + std::to_string(term) + ") of job " +
                 job + " is not newer than the watched round " + std::to_string(ref_.round) +
                 " (term " + std::to_string(ref_.term) + ")."};
  }
  ref_ = JobRoundRef{job, term, round};
  active_ = true;
  confirming_ = false;
  std::map<std::string, Peer> before = std::exchange(peers_, {});
  relays_.clear();
  for (const JobPeer& info : peers) {
    if (info.name == self_) continue;
    Peer p;
    p.info = info;
    // Counting every peer as heard now gives late starters a full peer_timeout to speak; a
    // joiner's RoundStart may come a leader resend later (JobWatchConfig::joiner_grace).
    const auto old = before.find(info.name);
    const bool joiner = old == before.end() || old->second.info.generation != info.generation;
    p.last_heard = joiner ? now + config_.joiner_grace : now;
    peers_.emplace(info.name, std::move(p));
  }
  if (large_round()) build_ring();
  index_peers();
  send_keepalives(out);
  next_keepalive_ = now + config_.keepalive_interval;
  recompute_deadline();
  return ok_status();
}

void JobWatch::build_ring() {
  struct Place {
    std::uint64_t hash;
    const std::string* name;
    std::uint64_t generation;
    bool operator<(const Place& o) const {
      return std::tie(hash, *name, generation) < std::tie(o.hash, *o.name, o.generation);
    }
  };
  const auto place = [&](const std::string& name, std::uint64_t generation) {
    return Place{RingHash()
                     .add(ref_.job)
                     .add(ref_.term)
                     .add(ref_.round)
                     .add(name)
                     .add(generation)
                     .value(),
                 &name, generation};
  };
  std::vector<Place> ring;
  ring.reserve(peers_.size() + 1);
  ring.push_back(place(self_, self_generation_));
  for (auto& [name, p] : peers_) {
    ring.push_back(place(name, p.info.generation));
    p.watched = false;
    p.watcher = false;
  }
  std::sort(ring.begin(), ring.end());
  const std::size_t n = ring.size();
  std::size_t self = 0;
  while (*ring[self].name != self_) ++self;
  const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(config_.watchers), n - 1);
  for (std::size_t d = 1; d <= k; ++d) {
    peers_.at(*ring[(self + d) % n].name).watcher = true;     // it watches this daemon
    peers_.at(*ring[(self + n - d) % n].name).watched = true;  // this daemon watches it
  }
}

void JobWatch::clear_round() {
  active_ = false;
  confirming_ = false;
  peers_.clear();
  timed_.clear();
  keepalive_to_.clear();
  relays_.clear();
  next_keepalive_ = kNever;
  next_deadline_ = kNever;
}

const JobWatch::Peer* JobWatch::find(const std::string& peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? nullptr : &it->second;
}

bool JobWatch::suspected(const std::string& peer) const {
  const Peer* p = find(peer);
  return p != nullptr && p->suspected;
}

bool JobWatch::lost(const std::string& peer) const {
  const Peer* p = find(peer);
  return p != nullptr && p->lost;
}

void JobWatch::index_peers() {
  timed_.clear();
  keepalive_to_.clear();
  for (auto& [name, p] : peers_) {
    p.timed = p.watched;
    if (p.watched) timed_.push_back(&p);
    if (p.watcher) keepalive_to_.push_back(&p);
  }
}

bool JobWatch::watches(const std::string& peer) const {
  const Peer* p = find(peer);
  return p != nullptr && p->watched;
}

bool JobWatch::watched_by(const std::string& peer) const {
  const Peer* p = find(peer);
  return p != nullptr && p->watcher;
}

void JobWatch::send(JobWatchEffects& out, const Peer& to, JobMessage message) {
  out.sends.push_back(JobOutgoing{to.info.name, to.info.address, std::move(message)});
}

void JobWatch::send_keepalives(JobWatchEffects& out) {
  for (const Peer* p : keepalive_to_) {
    if (p->lost) continue;
    send(out, *p, JobKeepalive{ref_, 0});
    ++stats_.keepalives_sent;
  }
}

void JobWatch::heard(TimePoint now, Peer& p) {
  p.last_heard = now;
  if (p.suspected) {
    p.suspected = false;
    p.retry_at = kNever;
    p.attempts = 0;
    ++stats_.suspicions_cleared;
  }
  // The silence deadline moved later; the cached next_deadline_ stays a valid lower bound.
}

void JobWatch::suspect(TimePoint now, Peer& p, JobWatchEffects& out) {
  if (p.suspected || p.lost) return;
  if (!p.timed) {  // a large round's unwatched peer (a disconnect): its window needs the timer
    p.timed = true;
    timed_.push_back(&p);
  }
  p.suspected = true;
  p.suspected_at = now;
  p.attempts = 0;
  ++stats_.suspicions;
  probe_attempt(now, p, out);
}

void JobWatch::probe_attempt(TimePoint now, Peer& p, JobWatchEffects& out) {
  ++p.attempts;
  // Two attempts: at the start and halfway through the window, each with a direct ping and
  // fresh helpers, so one unlucky set of lost packets cannot declare a live peer.
  p.retry_at = p.attempts < 2 ? p.suspected_at + config_.confirm_window / 2 : kNever;
  send(out, p, JobKeepalive{ref_, next_probe_++});
  ++stats_.direct_probes;

  std::vector<const Peer*> candidates;
  for (const auto& [name, q] : peers_) {
    if (&q == &p || q.lost || q.suspected) continue;
    candidates.push_back(&q);
  }
  const std::size_t k = pick_random(candidates, config_.indirect_probes);
  for (std::size_t i = 0; i < k; ++i) {
    send(out, *candidates[i], JobProbeRequest{ref_, next_probe_++, p.info.name, p.info.generation});
    ++stats_.indirect_requests;
  }
  lower_deadline(p.retry_at);
  lower_deadline(p.suspected_at + config_.confirm_window);
}

void JobWatch::declare(Peer& p, LostReason reason, JobWatchEffects& out) {
  if (p.lost) return;
  p.lost = true;
  // A lost peer can never confirm: the failure may be its loss seen early.
  if (confirming_) end_confirmation();
  p.suspected = false;
  p.retry_at = kNever;
  ++stats_.declared;
  out.lost.push_back(
      PeerLost{ref_.job, ref_.term, ref_.round, p.info.name, p.info.generation, reason});
  if (large_round()) spread_loss(p, reason, out);
  // Relays about it answer "not heard" now rather than at their expiry.
  for (auto it = relays_.begin(); it != relays_.end();) {
    if (it->second.target == p.info.name) {
      auto requester = peers_.find(it->second.requester);
      if (requester != peers_.end() && !requester->second.lost) {
        send(out, requester->second,
             JobProbeReply{ref_, it->second.requester_probe, it->second.target,
                           it->second.target_generation, false});
      }
      it = relays_.erase(it);
    } else {
      ++it;
    }
  }
}

void JobWatch::spread_loss(const Peer& lost, LostReason reason, JobWatchEffects& out) {
  const JobLossNotice notice{ref_, lost.info.name, lost.info.generation};
  std::vector<const Peer*> live;
  for (const auto& [name, q] : peers_) {
    if (!q.lost) live.push_back(&q);
  }
  if (reason != LostReason::kReported) {
    for (const Peer* p : live) send(out, *p, notice);
    stats_.notices_sent += live.size();
    return;
  }
  // Learnt from a notice: a copy to each live member this daemon sends keepalives to (so every
  // member gets one from each of its ring predecessors that learnt it) and to a few random
  // ones, so a survivor misses the loss only if the first-hand copies and all of these are lost.
  for (const Peer* p : keepalive_to_) {
    if (p->lost) continue;
    send(out, *p, notice);
    ++stats_.notices_sent;
  }
  const std::size_t count = pick_random(live, config_.notice_forwards);
  for (std::size_t i = 0; i < count; ++i) {
    send(out, *live[i], notice);
    ++stats_.notices_sent;
  }
}

std::size_t JobWatch::pick_random(std::vector<const Peer*>& from, int k) {
  const std::size_t n = std::min(from.size(), static_cast<std::size_t>(std::max(k, 0)));
  for (std::size_t i = 0; i < n; ++i) {  // partial Fisher-Yates: n distinct random entries
    const std::size_t j = i + static_cast<std::size_t>(rng_.below(from.size() - i));
    std::swap(from[i], from[j]);
  }
  return n;
}

void JobWatch::answer_relays_for(const std::string& target, JobWatchEffects& out) {
  for (auto it = relays_.begin(); it != relays_.end();) {
    if (it->second.target != target) {
      ++it;
      continue;
    }
    auto requester = peers_.find(it->second.requester);
    if (requester != peers_.end() && !requester->second.lost) {
      send(out, requester->second,
           JobProbeReply{ref_, it->second.requester_probe, target, it->second.target_generation,
                         true});
    }
    it = relays_.erase(it);
  }
}

void JobWatch::on_message(TimePoint now, const std::string& from, std::uint64_t from_generation,
                          const JobMessage& message, JobWatchEffects& out) {
  ++stats_.messages_received;
  auto it = peers_.find(from);
  if (!active_ || it == peers_.end() || !(ref_of(message) == ref_)) {
    ++stats_.stale_dropped;
    return;
  }
  Peer& p = it->second;
  if (from_generation < p.info.generation) {
    ++stats_.stale_dropped;
    return;
  }
  if (from_generation > p.info.generation) {
    // The daemon restarted: the generation that was in the round is gone for good.
    ++stats_.stale_dropped;
    declare(p, LostReason::kRestarted, out);
    return;
  }
  if (!p.lost) {
    heard(now, p);
    answer_relays_for(from, out);
  }

  if (const auto* keepalive = std::get_if<JobKeepalive>(&message)) {
    if (keepalive->probe != 0) send(out, p, JobKeepaliveAck{ref_, keepalive->probe});
  } else if (const auto* ack = std::get_if<JobKeepaliveAck>(&message)) {
    // Probe numbers grow: an answer to the confirmation's probe or a later one left this peer
    // after the failure. Anything older (a keepalive in flight) proves nothing about then.
    // (A peer declared lost ended the confirmation: see declare().)
    if (confirming_ && p.confirm_probe != 0 && ack->probe >= p.confirm_probe) {
      p.confirm_probe = 0;
      finish_confirmation(out);
    }
  } else if (const auto* request = std::get_if<JobProbeRequest>(&message)) {
    auto target = peers_.find(request->target);
    if (target == peers_.end() || target->second.info.generation != request->target_generation ||
        request->target == self_ || p.lost) {
      return;  // not a peer of this round as we know it; the requester's window decides
    }
    if (target->second.lost) {
      send(out, p,
           JobProbeReply{ref_, request->probe, request->target, request->target_generation, false});
      return;
    }
    const std::uint64_t probe = next_probe_++;
    relays_[probe] = Relay{from, request->probe, request->target, request->target_generation,
                           now + config_.helper_timeout};
    send(out, target->second, JobKeepalive{ref_, probe});
    ++stats_.helper_probes;
    lower_deadline(now + config_.helper_timeout);
  } else if (const auto* notice = std::get_if<JobLossNotice>(&message)) {
    // Another member declared `target` (a large round's dissemination). One about this daemon
    // finds no peer entry; one about another generation names a daemon not in this round.
    auto target = peers_.find(notice->target);
    if (target == peers_.end() || target->second.lost ||
        target->second.info.generation != notice->target_generation) {
      return;
    }
    ++stats_.notices_received;
    declare(target->second, LostReason::kReported, out);
  } else if (const auto* reply = std::get_if<JobProbeReply>(&message)) {
    auto target = peers_.find(reply->target);
    if (reply->alive && target != peers_.end() && !target->second.lost &&
        target->second.info.generation == reply->target_generation) {
      // A helper heard the target after we asked: indirect evidence that it is alive.
      heard(now, target->second);
    }
  }
}

void JobWatch::confirm_peers(JobWatchEffects& out) {
  if (!active_) return;
  end_confirmation();
  // A large round's failures are not confirmed (see the protocol above): n - 1 probes each.
  if (large_round()) return;
  // A lost peer cannot answer: no confirmation in this round.
  if (std::any_of(peers_.begin(), peers_.end(), [](const auto& e) { return e.second.lost; })) {
    return;
  }
  confirming_ = true;
  for (auto& [name, p] : peers_) {
    p.confirm_probe = next_probe_++;
    send(out, p, JobKeepalive{ref_, p.confirm_probe});
    ++stats_.direct_probes;
  }
  finish_confirmation(out);
}

void JobWatch::end_confirmation() {
  confirming_ = false;
  for (auto& [name, p] : peers_) p.confirm_probe = 0;
}

void JobWatch::finish_confirmation(JobWatchEffects& out) {
  if (!confirming_) return;
  for (const auto& [name, p] : peers_) {
    if (p.confirm_probe != 0) return;
  }
  confirming_ = false;
  out.peers_confirmed = ref_;
}

void JobWatch::on_peer_event(TimePoint now, const std::string& peer, PeerEventKind kind,
                             JobWatchEffects& out) {
  if (!active_) return;
  auto it = peers_.find(peer);
  if (it == peers_.end() || it->second.lost) return;
  switch (kind) {
    case PeerEventKind::kDisconnected:
      suspect(now, it->second, out);
      break;
    case PeerEventKind::kWorkerExited:
      declare(it->second, LostReason::kWorkerExited, out);
      break;
  }
}

void JobWatch::tick(TimePoint now, JobWatchEffects& out) {
  if (!active_) return;
  if (now >= next_keepalive_) {
    send_keepalives(out);
    next_keepalive_ += config_.keepalive_interval;
    // A late tick (a starved daemon) sends once, not a burst, and keeps the grid.
    if (next_keepalive_ <= now) next_keepalive_ = now + config_.keepalive_interval;
  }
  // By index: suspect() may append to timed_ (not here: these are watched or suspected).
  for (std::size_t i = 0; i < timed_.size(); ++i) {
    Peer& p = *timed_[i];
    if (p.lost) continue;
    if (!p.suspected) {
      if (p.watched && now >= p.last_heard + config_.peer_timeout) suspect(now, p, out);
      continue;
    }
    if (now >= p.suspected_at + config_.confirm_window) {
      declare(p, LostReason::kSilent, out);
    } else if (now >= p.retry_at) {
      probe_attempt(now, p, out);
    }
  }
  for (auto it = relays_.begin(); it != relays_.end();) {
    if (now < it->second.expires) {
      ++it;
      continue;
    }
    auto requester = peers_.find(it->second.requester);
    if (requester != peers_.end() && !requester->second.lost) {
      send(out, requester->second,
           JobProbeReply{ref_, it->second.requester_probe, it->second.target,
                         it->second.target_generation, false});
    }
    it = relays_.erase(it);
  }
  recompute_deadline();
}

void JobWatch::lower_deadline(TimePoint t) { next_deadline_ = std::min(next_deadline_, t); }

void JobWatch::recompute_deadline() {
  if (!active_) {
    next_deadline_ = kNever;
    return;
  }
  TimePoint next = next_keepalive_;
  for (const Peer* p : timed_) {
    if (p->lost) continue;
    if (p->suspected) {
      next = std::min({next, p->retry_at, p->suspected_at + config_.confirm_window});
    } else if (p->watched) {
      next = std::min(next, p->last_heard + config_.peer_timeout);
    }
  }
  for (const auto& [probe, relay] : relays_) next = std::min(next, relay.expires);
  next_deadline_ = next;
}

}  // namespace elastic::rendezvous
