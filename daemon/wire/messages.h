// The wire schema between daemons: an envelope and one struct per message (STYLE.md rule 5).
//
// Message type numbers are only ever appended, never reused or renumbered. Bodies are
// map-encoded MessagePack (daemon/wire/codec.h), so fields can be added: a decoder ignores keys
// it does not know and fills absent optional fields with their defaults.
// These structs are what the pure state machines consume and produce; only the codec turns them
// into bytes. Plain values; thread safety as for any value type.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace elastic::wire {

inline constexpr std::uint32_t kProtocolVersion = 1;

enum class MsgType : std::uint16_t {
  // membership (SWIM + Lifeguard)
  kPing = 1,
  kAck = 2,
  kPingReq = 3,
  kNack = 4,
  kPushPullDigest = 5,
  kPushPullState = 6,
  // consensus (Raft among the voters; bodies in daemon/consensus/raft_codec.h)
  kRaftVoteRequest = 7,  // RequestVote and PreVote (a flag in the body)
  kRaftVoteReply = 8,
  kRaftAppendEntries = 9,
  kRaftAppendReply = 10,
  kRaftInstallSnapshot = 11,  // a snapshot chunk for a follower behind the leader's log start
  kRaftInstallSnapshotReply = 12,
  // client requests a non-leader forwards to the Raft leader, and the leader's answer
  kForwardRequest = 13,
  kForwardReply = 14,
  // job tier: daemons of one running round watch each other (daemon/rendezvous/job_watch.h)
  kJobKeepalive = 15,
  kJobKeepaliveAck = 16,
  kJobProbeRequest = 17,  // "probe this round peer for me"
  kJobProbeReply = 18,
  // rendezvous: the leader tells member daemons about rounds, and grants worker leases
  kRoundStart = 19,
  kLeaseRequest = 20,
  kLeaseGrant = 21,
  // a member daemon's report to the Raft leader about its rounds (daemon/node/round_report.h)
  kRoundReport = 22,
  // job tier: a large round's "this peer is lost" (daemon/rendezvous/job_watch.h)
  kJobLossNotice = 23,
  // local control (elasticctl <-> elasticd)
  kControlRequest = 100,
  kControlReply = 101,
};

// Every message starts with this header. The sender's generation is a restart counter persisted
// in its state directory, so a restarted daemon is a new (name, generation) and never mistaken
// for its former self. `sender_address` is the endpoint replies go to (its ROUTER).
struct Envelope {
  std::uint32_t version = kProtocolVersion;
  std::string cluster_id;
  std::string sender;
  std::uint64_t generation = 0;
  std::string sender_address;
  MsgType type = MsgType::kPing;
  std::uint64_t seq = 0;  // per-sender message counter, for logs and duplicate detection
  std::string body;       // the MessagePack-encoded message of `type`
  // Gossip hint: the Raft leader the sender believes in and its term ("" / 0: none). Every
  // message carries it, so a non-voter learns the leader from ordinary membership traffic; a
  // receiver keeps the hint with the highest term. Optional on the wire (keys "lh", "lt").
  std::string leader_hint;
  std::uint64_t leader_term = 0;
};

enum class MemberState : std::uint8_t { kAlive = 0, kSuspect = 1, kDead = 2, kLeft = 3 };

// "alive", "suspect", "dead", "left" (logs, `elasticctl nodes`, metrics labels); "?" otherwise.
constexpr const char* member_state_name(MemberState state) {
  switch (state) {
    case MemberState::kAlive:
      return "alive";
    case MemberState::kSuspect:
      return "suspect";
    case MemberState::kDead:
      return "dead";
    case MemberState::kLeft:
      return "left";
  }
  return "?";
}

// What one node says about one member; piggybacked on probes and carried by push-pull.
// Versions order as (generation, incarnation), then state alive < suspect < dead/left.
struct MemberUpdate {
  std::string name;
  std::uint64_t generation = 0;
  std::uint32_t incarnation = 0;
  MemberState state = MemberState::kAlive;
  std::string address;
  std::string from;  // who declared suspect/dead (for confirmations); empty for alive
  bool operator==(const MemberUpdate&) const = default;
};

// Direct probe. `target`/`target_generation` name the intended recipient, so a probe that
// reaches a restarted or different node at the same address is answered as such.
struct Ping {
  std::uint64_t probe = 0;
  std::string target;
  std::uint64_t target_generation = 0;
  std::vector<MemberUpdate> updates;
  bool operator==(const Ping&) const = default;
};

struct Ack {
  std::uint64_t probe = 0;
  std::vector<MemberUpdate> updates;
  bool operator==(const Ack&) const = default;
};

// Ask the receiver to probe `target` on the sender's behalf (SWIM indirect probe).
struct PingReq {
  std::uint64_t probe = 0;
  std::string target;
  std::uint64_t target_generation = 0;
  std::string target_address;
  bool want_nack = true;  // Lifeguard: answer with a Nack if the target stays silent
  std::vector<MemberUpdate> updates;
  bool operator==(const PingReq&) const = default;
};

// Lifeguard: the relay is alive but got no answer from the target in time.
struct Nack {
  std::uint64_t probe = 0;
  bool operator==(const Nack&) const = default;
};

// Anti-entropy, digest first: a mismatching digest is answered with the full state.
struct PushPullDigest {
  std::uint64_t digest = 0;
  std::uint32_t members = 0;
  bool reply = false;
  bool operator==(const PushPullDigest&) const = default;
};

// Full state; also how a node joins (join = true, sent to a seed, which answers with its state).
struct PushPullState {
  std::vector<MemberUpdate> members;
  bool join = false;
  bool reply = false;
  bool operator==(const PushPullState&) const = default;
};

using MembershipMessage = std::variant<Ping, Ack, PingReq, Nack, PushPullDigest, PushPullState>;

}  // namespace elastic::wire
