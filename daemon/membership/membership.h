// Membership: SWIM failure detection with the Lifeguard extensions, as a pure state machine.
//
// It never touches a socket, a clock, a thread or the filesystem: the caller feeds it the time
// and inbound messages and carries out the Effects it returns (messages to send, member
// events). The daemon drives it with its steady clock and ZeroMQ transport; the simulator
// (tests/sim) with virtual time and a simulated network. Same code, same behaviour.
//
// What it implements (parameters from config::MembershipConfig):
//  - one probe per probe_interval (scaled by local health), round-robin over a shuffled member
//    list; after probe_timeout, PingReq through `indirect_probes` random members, who answer
//    with an Ack relayed from the target or a Nack (Lifeguard);
//  - Lifeguard local health (LHM): missed acks/nacks and refutations raise it, successful probes
//    lower it; probe interval and timeout are scaled by (1 + LHM), capped by
//    awareness_max_multiplier;
//  - suspicion: timeout from suspicion_max_multiplier * min down to
//    min = suspicion_multiplier * log10(max(N, 1)) * probe_interval as independent
//    confirmations arrive (Lifeguard's logarithmic decay, K = suspicion_multiplier - 2);
//  - incarnation refutation: a node that hears itself suspected or declared dead raises its
//    incarnation and gossips alive;
//  - last calls: kSuspicionLastCalls probe_timeouts before a suspicion's deadline (one apart),
//    a node still holding it Pings the suspect with the verdict, so a suspect that refuted
//    long ago but whose refutation gossip missed this node (the epidemic's tail: a few nodes
//    in 10^5 at 5% loss) answers with its alive before the deadline, instead of being declared
//    dead; the deadline itself does not move;
//  - dissemination: updates are piggybacked on probes/acks and sent to gossip_fanout members at
//    the points of a fixed gossip_interval grid (memberlist's ticker; a node with nothing queued
//    gets no wake-ups, and news heard between points waits for the next one), each up to
//    retransmit_multiplier * ceil(log10(N + 1)) times;
//  - push-pull anti-entropy every push_pull_interval (times ceil(log2(N / 32)) + 1 above 32
//    nodes, memberlist's pushPullScale),
//    digest first; a remote suspect/dead about a live member becomes a local suspicion;
//  - tombstones per (name, generation) kept for tombstone_ttl: a dead generation never revives,
//    a higher generation (the node restarted) always replaces it, whatever its address;
//  - reconnect: every reconnect_interval one dead member is pinged again with probability
//    failed/alive (Serf), the Ping carrying our verdict so it refutes; seeds are re-joined
//    every rejoin_interval while none is a live member, so healed partitions merge;
//  - join through seed addresses (PushPullState join) and graceful leave (kLeft);
//  - bulk bootstrap: seed_members() adds a known member list at once, without the join storm
//    (for the simulator at 10,000 nodes and for a daemon restarting with a known member list).
//
// Ordering of member records: (generation, incarnation) first, then alive < suspect < dead/left.
//
// Wire usage (no message type beyond wire/messages.h):
//  - pure gossip rides on Ack{probe = 0}; at most kMaxPiggybackUpdates updates (and about
//    kMaxPiggybackBytes) per message, fewest-transmitted then newest first; one queued update
//    per member, a newer one replaces it;
//  - a message to a member we hold as suspect/dead carries that verdict first (buddy system),
//    also unasked when such a member talks to us (at most once per gossip_interval), so it
//    refutes quickly; a stale verdict about us re-gossips our current alive;
//  - push-pull: Digest -> State (on mismatch) -> State{reply} (if the views still differ);
//    join: State{join} to each seed address (Outgoing::to empty) -> State{join, reply}. A reply is
//    merged and never answered;
//  - the envelope's (sender, generation) counts as evidence: an unknown sender is added alive,
//    a newer generation replaces the record (restart), an older one drops the message.
// Events: one per change of another member's state or generation as this node sees it (self is
// never reported); a tombstone heard about a member never seen is recorded silently.
// next_deadline() may be <= now after on_message (the caller then ticks at once); after tick it
// is always later than now. Above 64 members random picks sample; below they shuffle.
// Memory: one compact record per member (about 70 bytes with its index entries); names and
// addresses are interned in a NameTable, shared between instances when the caller passes one
// (the simulator: 10,000 instances x 10,000 records), and per-member heap objects exist only
// for members that are not alive (accuser, suspicion).
// Thread safety: none; one owner calls everything (instances sharing a NameTable: one thread
// for all of them). Randomness comes only from the seeded Rng.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/config/config.h"
#include "daemon/core/rng.h"
#include "daemon/core/time.h"
#include "daemon/wire/messages.h"

namespace elastic::membership {

using wire::MemberState;

// NameTable: interned, reference-counted, immutable strings (member names and addresses), so
// that a process running thousands of Membership instances stores each distinct name once
// rather than once per instance and record. A Ref keeps its string alive and compares by
// identity (two Refs of one table are equal exactly when their strings are). Ownership: the
// table must outlive its Refs (each Membership holds a shared_ptr to its table). Thread safety:
// none, not even between instances that share a table. Errors: none; destroying a table that
// still has Refs aborts.
class NameTable {
 public:
  struct Entry {
    std::string text;
    std::uint64_t hash = 0;  // hash_of(text)
    std::uint32_t refs = 0;
    NameTable* table = nullptr;
  };

  class Ref {
   public:
    Ref() = default;
    Ref(const Ref& other) : entry_(other.entry_) {
      if (entry_ != nullptr) ++entry_->refs;
    }
    Ref(Ref&& other) noexcept : entry_(other.entry_) { other.entry_ = nullptr; }
    Ref& operator=(Ref other) noexcept {
      std::swap(entry_, other.entry_);
      return *this;
    }
    ~Ref() {
      if (entry_ != nullptr && --entry_->refs == 0) entry_->table->release(entry_);
    }
    explicit operator bool() const { return entry_ != nullptr; }
    // "" for a null Ref.
    const std::string& str() const { return entry_ != nullptr ? entry_->text : empty(); }
    std::uint64_t hash() const { return entry_ != nullptr ? entry_->hash : hash_of({}); }
    friend bool operator==(const Ref& a, const Ref& b) { return a.entry_ == b.entry_; }

   private:
    friend class NameTable;
    explicit Ref(Entry* entry) : entry_(entry) { ++entry_->refs; }
    static const std::string& empty();
    Entry* entry_ = nullptr;
  };

  NameTable() = default;
  NameTable(const NameTable&) = delete;
  NameTable& operator=(const NameTable&) = delete;
  ~NameTable();

  // The Ref of `text`; a null Ref for "".
  Ref intern(std::string_view text);
  std::size_t size() const { return entries_.size(); }
  // FNV-1a mixed with splitmix64's finaliser: a well-spread 64-bit hash of a name.
  static std::uint64_t hash_of(std::string_view text);

 private:
  void release(Entry* entry);
  std::unordered_map<std::string_view, std::unique_ptr<Entry>> entries_;  // keys view Entry::text
};

struct Self {
  std::string name;
  std::uint64_t generation = 0;
  std::string address;  // the endpoint peers reach this node at
};

struct Inbound {
  std::string from;  // sender name
  std::uint64_t from_generation = 0;
  std::string from_address;
  wire::MembershipMessage message;
};

struct Outgoing {
  std::string to;  // member name; empty when only the address is known (a seed)
  std::string to_address;
  wire::MembershipMessage message;
};

// A change of a member's state as this node sees it (evidence, not a decision).
struct MemberEvent {
  std::string name;
  std::uint64_t generation = 0;
  MemberState state = MemberState::kAlive;
  std::string address;
};

struct Effects {
  std::vector<Outgoing> sends;
  std::vector<MemberEvent> events;
};

struct MemberView {
  std::string name;
  std::uint64_t generation = 0;
  std::uint32_t incarnation = 0;
  MemberState state = MemberState::kAlive;
  std::string address;
  TimePoint last_heard{};   // last message received from it (TimePoint{} if never)
  TimePoint state_since{};  // when this node adopted the current state
};

struct Stats {
  std::uint64_t probes = 0;
  std::uint64_t probe_timeouts = 0;  // direct probe unanswered within the timeout
  std::uint64_t indirect_probes = 0;
  std::uint64_t nacks_received = 0;
  std::uint64_t suspicions = 0;  // members this node started suspecting
  std::uint64_t deaths = 0;      // members this node declared dead
  std::uint64_t refutations = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t messages_received = 0;
  int local_health = 0;
};

class Membership {
 public:
  // `names` may be shared with other instances driven by the same thread (the simulator);
  // nullptr gives this instance a private table.
  Membership(Self self, const config::MembershipConfig& config, std::uint64_t seed, TimePoint now,
             std::shared_ptr<NameTable> names = nullptr);

  // Bulk bootstrap, for the simulator and for a daemon restarting with a known member list:
  // adds every listed member this node does not know yet, as given (alive ones alive, a suspect
  // with a fresh suspicion, dead/left ones as tombstones), without messages, gossip or events
  // (the caller knows the list it passed). Known members, self and empty names are skipped.
  // O(members); call it before or instead of join().
  void seed_members(TimePoint now, const std::vector<wire::MemberUpdate>& members);

  // Sends a join (this node's state) to every seed address; answers merge their state.
  void join(TimePoint now, const std::vector<std::string>& seed_addresses, Effects& out);
  // Marks this node left and tells members; after this the node only answers probes.
  void leave(TimePoint now, Effects& out);
  void on_message(TimePoint now, const Inbound& in, Effects& out);
  // The transport could not deliver to `address` (no route, queue full): treated like silence.
  void on_unreachable(TimePoint now, const std::string& address, Effects& out);
  // Runs every timer that is due at `now`.
  void tick(TimePoint now, Effects& out);
  // When tick() next has something to do.
  TimePoint next_deadline() const;

  std::vector<MemberView> members() const;  // every known member, self included, by name
  std::size_t alive_count() const;          // alive + suspect, self included
  std::size_t member_count() const { return member_count_; }  // every record, self included
  const Self& self() const { return self_; }
  const Stats& stats() const { return stats_; }

  // Additions for the node loop, the simulator and tests.
  std::optional<MemberView> member(const std::string& name) const;
  // Order-independent hash of every record's (name, generation, incarnation, state).
  std::uint64_t digest() const;
  std::size_t queued_updates() const { return queue_.size(); }

  // The formulas, exposed so tests and the simulator assert them exactly.
  // Lifeguard suspicion timeout for a cluster of n members after `confirmations` independent
  // confirmations: max(min, max - (max - min) * log(C + 1) / log(K + 1)), floored to
  // milliseconds as memberlist does; K = 0 (timeout = min) when n - 2 < suspicion_multiplier - 2.
  static Duration suspicion_timeout(const config::MembershipConfig& config, std::size_t n,
                                    int confirmations);
  // retransmit_multiplier * ceil(log10(n + 1)).
  static int retransmit_limit(const config::MembershipConfig& config, std::size_t n);
  // memberlist pushPullScale: the interval, times ceil(log2(n) - log2(32)) + 1 above 32 nodes.
  static Duration push_pull_period(const config::MembershipConfig& config, std::size_t n);

  // At most this many updates ride on one message, so datagrams stay under 1400 bytes.
  static constexpr std::size_t kMaxPiggybackUpdates = 16;
  static constexpr std::size_t kMaxPiggybackBytes = 1100;
  // Verdict Pings to a suspect in the last probe_timeouts of its suspicion (see above).
  static constexpr int kSuspicionLastCalls = 2;

 private:
  using Name = NameTable::Ref;
  using Slot = std::uint32_t;  // a record's position in slots_
  struct Suspicion {
    TimePoint start{};
    Duration min{};
    Duration max{};
    int k = 0;
    int confirmations = 0;
    std::set<std::string> accusers;  // the first accuser and every confirmer
    TimePoint deadline{};
    TimePoint timer{};   // its key in suspicion_timers_: the next last call, then the deadline
    int last_calls = 0;  // verdict Pings sent to the suspect ahead of the deadline
  };
  // What only a member that is not alive needs; allocated on the first verdict, freed on alive.
  struct Verdict {
    Name accuser;            // who declared it suspect/dead/left
    TimePoint buddy_sent{};  // when we last told it our suspect/dead verdict unasked
    std::optional<Suspicion> suspicion;
  };
  // Kept small on purpose: a 10,000-node simulation holds 10^8 of them.
  struct Record {
    Name name;  // null: a free slot
    Name address;
    std::uint64_t generation = 0;
    TimePoint last_heard{};
    TimePoint state_since{};
    std::unique_ptr<Verdict> verdict;
    std::uint32_t incarnation = 0;
    MemberState state = MemberState::kAlive;
  };
  struct Probe {
    std::uint64_t seq = 0;
    std::string target;
    std::uint64_t generation = 0;
    std::string address;
    TimePoint timeout_at{};
    TimePoint interval_end{};
    bool indirect_sent = false;
    int expected_nacks = 0;
    int nacks = 0;
  };
  // A PingReq this node relays: its own probe number maps back to the requester's.
  struct Relay {
    std::string requester;
    std::string requester_address;
    std::uint64_t requester_probe = 0;
    std::string target_address;
    bool want_nack = true;
    bool nacked = false;
    TimePoint nack_at{};
    TimePoint expires{};
  };
  struct Queued {
    wire::MemberUpdate update;
    int transmits = 0;
    std::uint64_t id = 0;  // larger = newer
  };
  // Queue order: fewest transmissions first, then newest first (~id), then name.
  using QueueKey = std::tuple<int, std::uint64_t, std::string>;

  // Record storage: slots_ (a deque, so references stay valid while records are added) with a
  // free list, and an open-addressing index by name (linear probing, slot + 1, 0 = empty).
  std::optional<Slot> lookup(std::string_view name) const;
  Record* find(std::string_view name);
  const Record* find(std::string_view name) const;
  Record& at(std::string_view name);  // aborts when absent: callers hold a known name
  void index_insert(Slot slot);
  void index_erase(Slot slot);
  void index_reserve(std::size_t members);
  bool is_self(const Record& r) const { return r.name == self_name_; }
  const std::string& accuser_of(const Record& r) const;
  void set_accuser(Record& r, const std::string& accuser);
  Suspicion* suspicion_of(Record& r);

  Record& add_record(TimePoint now, const wire::MemberUpdate& u);
  void remove_record(const std::string& name);
  void set_state(TimePoint now, Record& r, MemberState state);
  void start_suspicion(TimePoint now, Record& r, const std::string& accuser);
  bool confirm_suspicion(Record& r, const std::string& accuser);
  void clear_suspicion(Record& r);
  void arm_suspicion_timer(TimePoint now, Record& r);
  void suspicion_timer_fired(TimePoint now, Record& r, Effects& out);
  void emit(const Record& r, Effects& out) const;
  wire::MemberUpdate update_of(const Record& r) const;
  void enqueue(const wire::MemberUpdate& u);
  std::vector<wire::MemberUpdate> piggyback(const Record* about);
  std::vector<wire::MemberUpdate> full_state() const;
  static std::uint64_t digest_of(const std::vector<wire::MemberUpdate>& members);
  std::vector<Slot> random_members(std::size_t k, bool include_recent_dead,
                                   const std::string& exclude, TimePoint now);
  const Record* next_probe_target();
  void raise_health(int delta);
  void send(Effects& out, const std::string& to, const std::string& address,
            wire::MembershipMessage message);

  bool note_sender(TimePoint now, const Inbound& in, Effects& out);
  void apply_update(TimePoint now, const wire::MemberUpdate& u, const std::string& via,
                    bool from_push_pull, Effects& out);
  void apply_self_update(const wire::MemberUpdate& u);
  void apply_updates(TimePoint now, const std::vector<wire::MemberUpdate>& updates,
                     const std::string& via, Effects& out);
  void handle(TimePoint now, const Inbound& in, const wire::Ping& m, Effects& out);
  void handle(TimePoint now, const Inbound& in, const wire::Ack& m, Effects& out);
  void handle(TimePoint now, const Inbound& in, const wire::PingReq& m, Effects& out);
  void handle(TimePoint now, const Inbound& in, const wire::Nack& m, Effects& out);
  void handle(TimePoint now, const Inbound& in, const wire::PushPullDigest& m, Effects& out);
  void handle(TimePoint now, const Inbound& in, const wire::PushPullState& m, Effects& out);

  void start_probe(TimePoint now, Effects& out);
  void send_indirect(TimePoint now, Effects& out);
  void finish_probe(TimePoint now, Effects& out);
  void send_join(Effects& out);
  void gossip(TimePoint now, Effects& out);
  void catch_up_gossip_grid(TimePoint now);
  void advance_gossip_grid(TimePoint now, bool past_now);
  void push_pull(TimePoint now, Effects& out);
  void reconnect(TimePoint now, Effects& out);

  std::shared_ptr<NameTable> names_;  // first, so it outlives every Ref below
  Self self_;
  Name self_name_;
  config::MembershipConfig config_;
  Rng rng_;
  Stats stats_;
  bool left_ = false;
  std::deque<Record> slots_;  // self included; free slots have a null name
  std::vector<Slot> free_slots_;
  std::vector<Slot> index_;  // power-of-two size, at most 70% full
  std::size_t member_count_ = 0;
  std::size_t live_count_ = 0;  // alive + suspect, self included
  std::vector<std::string> seeds_;

  std::vector<Slot> probe_order_;  // shuffled round-robin list (may hold freed or reused slots)
  std::size_t probe_index_ = 0;
  std::optional<Probe> probe_;
  std::uint64_t next_seq_ = 1;  // probe numbers; 0 marks a pure gossip Ack
  std::map<std::uint64_t, Relay> relays_;

  std::set<std::pair<TimePoint, std::string>> suspicion_timers_;
  std::set<std::pair<TimePoint, std::string>> tombstone_timers_;

  std::map<std::string, Queued> queue_;  // at most one pending update per member
  std::set<QueueKey> queue_order_;
  std::uint64_t queue_ids_ = 0;

  TimePoint next_probe_{};
  TimePoint next_gossip_{};
  TimePoint next_push_pull_{};
  TimePoint next_reconnect_{};
  TimePoint next_rejoin_ = kNever;
};

}  // namespace elastic::membership
