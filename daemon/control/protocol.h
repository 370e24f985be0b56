// The local control protocol between elasticctl and its elasticd, and the values it carries.
//
// Transport (daemon/control/server.h, client.h): a plain AF_UNIX SOCK_STREAM socket at
// control.socket. Each message is one frame: a 4-byte big-endian length, then that many bytes of
// UTF-8 JSON. We chose a plain unix socket over a ZeroMQ ipc:// ROUTER because the daemon must
// know who is calling (SO_PEERCRED: pid, uid, gid) and ZeroMQ cannot report the peer's
// credentials portably; JSON because the replies are what `elasticctl ... --json` prints, so
// scripts and the namespace harness read exactly what the daemon sent.
//
// Request:  {"verb": "<one of control/verbs.h>", ...verb-specific fields (requests.h)...}
// Reply:    {"ok": true, ...verb-specific fields...} or {"ok": false, "error": "<sentence>"}
// Field names are only ever added; decoders ignore unknown fields.
//
// Errors: decode_* return an Error (never throw) on malformed or hostile input.
// Thread safety: pure functions over plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/result.h"

namespace elastic::control {

// A request frame larger than this closes the connection: real requests are tiny.
inline constexpr std::uint32_t kMaxRequestBytes = 64 * 1024;
// Replies carry the member table, which grows with the cluster (about 200 bytes per member).
inline constexpr std::uint32_t kMaxReplyBytes = 64 * 1024 * 1024;

struct Request {
  std::string verb;
  // The whole request as received (a JSON object): verbs with arguments (submit, cancel, ...)
  // read them from here. encode_request() sends it as is when set (it must hold "verb").
  std::string text;
};

struct MemberRow {
  std::string name;
  std::string state;  // "alive", "suspect", "dead", "left"
  std::uint32_t incarnation = 0;
  std::uint64_t generation = 0;
  std::string address;
  double last_heard_ms_ago = -1;  // -1: never heard (self, or a member known only by gossip)
  double state_since_ms_ago = 0;
};

struct SelfInfo {
  std::string name;
  std::uint64_t generation = 0;
  std::string address;
  std::string cluster_id;
  double uptime_s = 0;
};

struct MembershipCounters {
  std::uint64_t probes = 0;
  std::uint64_t probe_timeouts = 0;
  std::uint64_t indirect_probes = 0;
  std::uint64_t nacks_received = 0;
  std::uint64_t suspicions = 0;
  std::uint64_t deaths = 0;
  std::uint64_t refutations = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t messages_received = 0;
  int local_health = 0;
};

// The daemon's transport counters (transport::TransportStats), so operators and tests can see
// refused CURVE handshakes (dropped_unauthenticated) and hostile bytes without reading logs.
struct TransportCounters {
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  std::uint64_t send_failures = 0;
  std::uint64_t dropped_malformed = 0;
  std::uint64_t dropped_oversized = 0;
  std::uint64_t dropped_wrong_version = 0;
  std::uint64_t dropped_wrong_cluster = 0;
  std::uint64_t dropped_unauthenticated = 0;
  std::uint64_t dropped_undecodable = 0;  // valid envelope, body not a valid message
  // The remote control socket (control.remote_listen): requests, frames not of the protocol,
  // refused client keys.
  std::uint64_t control_received = 0;
  std::uint64_t control_dropped = 0;
  std::uint64_t control_unauthenticated = 0;
  std::uint64_t peers_opened = 0;
  std::uint64_t peers_closed = 0;
  std::uint64_t open_peers = 0;
  // Inbound connections: failed accepts (out of fds) and the listening pauses they caused.
  std::uint64_t accept_failures = 0;
  std::uint64_t accept_pauses = 0;
};

// Reply to "nodes": every member this node knows, self included, by name, and the counters.
struct NodesReply {
  SelfInfo self;
  std::vector<MemberRow> members;
  MembershipCounters stats;
  TransportCounters transport;
};

// What this node knows of Raft: its role if it is a voter, and the leader it believes in.
struct ConsensusInfo {
  bool voter = false;
  std::string role;    // "follower", "pre-candidate", "candidate", "leader"; "" for non-voters
  std::string leader;  // "" = unknown
  std::uint64_t term = 0;
  std::uint64_t commit_index = 0;
  std::uint64_t last_index = 0;
  std::vector<std::string> voters;
  std::uint64_t jobs = 0;  // jobs in this node's applied table (voters only)
};

// A job round this daemon is a member of, and what its job tier has seen (JobWatchStats).
struct RoundRow {
  std::string job;
  std::uint64_t term = 0;
  std::uint64_t round = 0;
  std::uint32_t first_rank = 0;
  std::uint32_t slots = 0;
  std::uint64_t world = 0;
  std::string store_endpoint;
  bool fenced = false;  // its lease ran out: the workers must not run
  std::uint64_t suspicions = 0;
  std::uint64_t suspicions_cleared = 0;
  std::uint64_t declared = 0;  // peers declared lost
};

// Reply to "status": who this node is, how many members it sees in each state, and Raft.
struct StatusReply {
  SelfInfo self;
  std::uint64_t alive = 0;
  std::uint64_t suspect = 0;
  std::uint64_t dead = 0;
  std::uint64_t left = 0;
  ConsensusInfo consensus;
  std::vector<RoundRow> rounds;
};

std::string encode_request(const Request& request);
Result<Request> decode_request(const std::string& json);

std::string encode_reply(const NodesReply& reply);
std::string encode_reply(const StatusReply& reply);
// What kind of refusal an error reply is, for the client's exit status: kPermission (the
// caller may not do this: not the job's owner, not an admin) adds "code":"permission", which
// elasticctl turns into exit 77; kConfig (the reload verb: the daemon refused its configuration
// file) adds "code":"config", exit 78; every other refusal has no code.
enum class ErrorCode { kNone, kPermission, kConfig };
std::string encode_error_reply(const std::string& message, ErrorCode code = ErrorCode::kNone);

// Decoding a reply: an {"ok": false} reply becomes an Error carrying the daemon's sentence.
Result<NodesReply> decode_nodes_reply(const std::string& json);
Result<StatusReply> decode_status_reply(const std::string& json);

// The reply re-indented for people and scripts (`elasticctl ... --json`); input must be JSON.
std::string pretty_json(const std::string& json);

// 4-byte big-endian length prefix of a frame.
std::string frame_header(std::uint32_t length);
std::uint32_t read_frame_header(const unsigned char* bytes);

}  // namespace elastic::control
