// Golden bytes of every map-encoded MessagePack message: the wire bodies between daemons and
// what the Raft log and snapshots persist (job table commands, snapshots, job specs). Old peers
// and old logs must keep decoding, so the encoders must keep writing the same keys in the same
// order with the same types, and the decoders must keep answering the same sentence for the
// same bad bytes.
//
// For each representative message the test encodes it and compares the bytes with
// tests/data/wire_golden.txt, decodes the golden bytes and encodes them again (same bytes), and
// then decodes variations of the golden bytes: every map key at any depth (first element of an
// array only) dropped, its value replaced by nil, by 2^64-1, by 7 and by a 2000-byte string, plus
// an unknown key added at the top. Each result (the error class and sentence, or "ok" and the bytes
// encoded back) is compared with the file too. The file was written by the hand-written encoders
// and decoders that the schema codec replaced, so any difference is a change of format or of
// behaviour.
//
// To rewrite the file after a deliberate format change (a new key):
//   ELASTIC_WRITE_GOLDEN=1 ./wire_golden_test
#include <gtest/gtest.h>
#include <msgpack.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/consensus/raft_codec.h"
#include "daemon/consensus/voter_list.h"
#include "daemon/node/forward_codec.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_report.h"
#include "daemon/rendezvous/job_codec.h"
#include "daemon/rendezvous/job_spec.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/wire/codec.h"

namespace elastic {
namespace {

using namespace std::chrono_literals;

const std::string kGoldenPath = std::string(ELASTIC_SOURCE_DIR) + "/tests/data/wire_golden.txt";

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 0xf];
  }
  return out;
}

// Long values as their length and FNV-1a hash, so the file stays readable.
std::string summary(std::string_view bytes) {
  if (bytes.size() <= 128) return hex(bytes);
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return std::to_string(bytes.size()) + " bytes, fnv1a " +
         hex(std::string_view(reinterpret_cast<const char*>(&h), 8));
}

// What a decoder made of some bytes: "ok <the value encoded back>", or "<class>: <sentence>"
// (the class where the decoder reports one). "ok same" when it encodes back to the input.
using Decoder = std::function<std::string(std::string_view)>;

template <typename T, typename Encode>
std::string outcome(const Result<T>& decoded, Encode encode, const wire::DecodeError* reason,
                    std::string_view input) {
  if (decoded.ok()) {
    const std::string again = encode(*decoded);
    return again == input ? "ok same" : "ok " + summary(again);
  }
  std::string prefix = reason != nullptr ? std::string(wire::to_string(*reason)) + ": " : "";
  return prefix + decoded.error().message;
}

struct Case {
  std::string name;
  std::string bytes;
  Decoder decode;
};

// ---------------------------------------------------------------------------------------------
// Variations of a MessagePack value: one map entry changed.

enum class Change { kDrop, kNil, kMax, kSeven, kLong };
const char* change_name(Change c) {
  switch (c) {
    case Change::kDrop:
      return "drop";
    case Change::kNil:
      return "nil";
    case Change::kMax:
      return "max";
    case Change::kSeven:
      return "seven";
    case Change::kLong:
      return "long";
  }
  return "?";
}

// Every path to a map key ("/u/0/n"): all keys of every map, descending into the first element
// of arrays.
void collect_paths(const msgpack::object& o, const std::string& at, std::vector<std::string>* out) {
  if (o.type == msgpack::type::MAP) {
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
      const msgpack::object& k = o.via.map.ptr[i].key;
      if (k.type != msgpack::type::STR) continue;
      const std::string path = at + "/" + std::string(k.via.str.ptr, k.via.str.size);
      out->push_back(path);
      collect_paths(o.via.map.ptr[i].val, path, out);
    }
  } else if (o.type == msgpack::type::ARRAY && o.via.array.size > 0) {
    collect_paths(o.via.array.ptr[0], at + "/0", out);
  }
}

using Packer = msgpack::packer<msgpack::sbuffer>;

void repack(Packer& p, const msgpack::object& o, const std::string& at, const std::string& target,
            Change change) {
  if (o.type == msgpack::type::MAP) {
    std::uint32_t size = o.via.map.size;
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
      const msgpack::object& k = o.via.map.ptr[i].key;
      if (change == Change::kDrop && k.type == msgpack::type::STR &&
          at + "/" + std::string(k.via.str.ptr, k.via.str.size) == target) {
        --size;
      }
    }
    p.pack_map(size);
    for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
      const msgpack::object& k = o.via.map.ptr[i].key;
      const std::string path =
          k.type == msgpack::type::STR ? at + "/" + std::string(k.via.str.ptr, k.via.str.size) : "";
      if (path == target) {
        if (change == Change::kDrop) continue;
        p.pack(k);
        if (change == Change::kNil) p.pack_nil();
        if (change == Change::kMax) p.pack_uint64(~std::uint64_t{0});
        if (change == Change::kSeven) p.pack_uint64(7);
        if (change == Change::kLong) p.pack(std::string(2000, 'x'));
        continue;
      }
      p.pack(k);
      repack(p, o.via.map.ptr[i].val, path, target, change);
    }
  } else if (o.type == msgpack::type::ARRAY) {
    p.pack_array(o.via.array.size);
    for (std::uint32_t i = 0; i < o.via.array.size; ++i) {
      repack(p, o.via.array.ptr[i], i == 0 ? at + "/0" : "", target, change);
    }
  } else {
    p.pack(o);
  }
}

// The golden text of one case: its bytes, then the outcome of every variation.
std::string describe(const Case& c) {
  std::ostringstream out;
  out << "== " << c.name << "\n";
  out << "bytes " << hex(c.bytes) << "\n";
  out << "decoded " << c.decode(c.bytes) << "\n";
  const msgpack::object_handle handle = msgpack::unpack(c.bytes.data(), c.bytes.size());
  std::vector<std::string> paths;
  collect_paths(handle.get(), "", &paths);
  for (const std::string& path : paths) {
    for (Change change :
         {Change::kDrop, Change::kNil, Change::kMax, Change::kSeven, Change::kLong}) {
      msgpack::sbuffer buffer;
      Packer p(buffer);
      repack(p, handle.get(), "", path, change);
      out << change_name(change) << " " << path << " -> "
          << c.decode(std::string_view(buffer.data(), buffer.size())) << "\n";
    }
  }
  // An unknown key at the top is ignored.
  const msgpack::object& top = handle.get();
  if (top.type == msgpack::type::MAP) {
    msgpack::sbuffer buffer;
    Packer p(buffer);
    p.pack_map(top.via.map.size + 1);
    for (std::uint32_t i = 0; i < top.via.map.size; ++i) {
      p.pack(top.via.map.ptr[i].key);
      p.pack(top.via.map.ptr[i].val);
    }
    p.pack(std::string("zz-unknown"));
    p.pack(std::string("ignored"));
    out << "unknown /zz-unknown -> " << c.decode(std::string_view(buffer.data(), buffer.size()))
        << "\n";
  }
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// Representative messages: every field set to a value unlike its default, integers of several
// MessagePack widths, and each written-only-when-set key both present and absent.

Decoder envelope_decoder(std::size_t (*max_body)(wire::MsgType)) {
  return [max_body](std::string_view bytes) {
    wire::DecodeLimits limits;
    limits.cluster_id = "prod";
    limits.max_body_bytes = max_body;
    wire::DecodeError reason = wire::DecodeError::kMalformed;
    return outcome(wire::decode_envelope(bytes, limits, &reason), wire::encode_envelope, &reason,
                   bytes);
  };
}

void add_envelopes(std::vector<Case>* cases) {
  wire::Envelope e;
  e.cluster_id = "prod";
  e.sender = "node-a.example.org";
  e.generation = 70'000;
  e.sender_address = "tcp://10.0.0.1:7946";
  e.type = wire::MsgType::kPingReq;
  e.seq = 5'000'000'000;
  e.body = std::string("\x81\xa1p\x01", 4);
  cases->push_back({"envelope", wire::encode_envelope(e), envelope_decoder(nullptr)});
  // The per-type body limit (checked before the body is copied).
  cases->push_back({"envelope body limit", wire::encode_envelope(e),
                    envelope_decoder([](wire::MsgType) -> std::size_t { return 3; })});
  e.leader_hint = "node-b";
  e.leader_term = 300;
  cases->push_back(
      {"envelope with leader hint", wire::encode_envelope(e), envelope_decoder(nullptr)});
}

void add_membership(std::vector<Case>* cases) {
  const std::vector<wire::MemberUpdate> updates = {
      {"node-a", 3, 7, wire::MemberState::kSuspect, "tcp://10.0.0.1:7946", "node-c"},
      {"node-b-with-a-name-longer-than-31-bytes", 1ULL << 40, 65'536, wire::MemberState::kAlive,
       "tcp://10.0.0.2:7946", ""}};
  auto add = [cases](std::string name, const wire::MembershipMessage& m) {
    const wire::MsgType type = wire::message_type(m);
    cases->push_back({std::move(name), wire::encode_body(m), [type](std::string_view bytes) {
                        wire::DecodeError reason = wire::DecodeError::kMalformed;
                        return outcome(wire::decode_membership(type, bytes, &reason),
                                       wire::encode_body, &reason, bytes);
                      }});
  };
  add("Ping", wire::Ping{12, "node-b", 4, updates});
  add("Ack", wire::Ack{13, {}});
  add("Ack with updates", wire::Ack{14, {updates[0]}});
  add("PingReq", wire::PingReq{15, "node-c", 9, "tcp://10.0.0.3:7946", false, updates});
  add("Nack", wire::Nack{16});
  add("PushPullDigest", wire::PushPullDigest{0xfedcba9876543210ULL, 250, true});
  add("PushPullState", wire::PushPullState{updates, true, false});
}

void add_raft(std::vector<Case>* cases) {
  using namespace consensus;
  auto add = [cases](std::string name, MessageBody body) {
    const Message m{3, 1'000, std::move(body)};
    const wire::MsgType type = raft_message_type(m.body);
    cases->push_back({std::move(name), encode_raft(m), [type](std::string_view bytes) {
                        wire::DecodeError reason = wire::DecodeError::kMalformed;
                        return outcome(decode_raft(type, bytes, &reason), encode_raft, &reason,
                                       bytes);
                      }});
  };
  add("VoteRequest", VoteRequest{true, 7, 120, 6});
  add("VoteReply", VoteReply{false, 8, true});
  AppendEntries append;
  append.term = 9;
  append.prev_log_index = 200;
  append.prev_log_term = 8;
  append.leader_commit = 199;
  append.entries = {Entry{9, 201, EntryType::kConfig, encode_voters({1, 2, 3})},
                    Entry{9, 202, EntryType::kCommand, std::string("\x00\xff payload", 10)},
                    Entry{9, 203, EntryType::kNoop, ""}};
  add("AppendEntries", append);
  add("AppendReply", AppendReply{9, false, 150, 140, 7});
  InstallSnapshot install;
  install.term = 10;
  install.snapshot.last_index = 5'000;
  install.snapshot.last_term = 9;
  install.snapshot.voters = {1, 2, 300};
  install.snapshot.data = "snapshot bytes";
  add("InstallSnapshot", install);
  add("InstallSnapshotReply", InstallSnapshotReply{10, 5'000});
}

void add_job_tier(std::vector<Case>* cases) {
  using namespace rendezvous;
  auto add_job = [cases](std::string name, const JobMessage& m) {
    const wire::MsgType type = job_message_type(m);
    cases->push_back({std::move(name), encode_job(m), [type](std::string_view bytes) {
                        wire::DecodeError reason = wire::DecodeError::kMalformed;
                        return outcome(decode_job(type, bytes, &reason), encode_job, &reason,
                                       bytes);
                      }});
  };
  auto add_lease = [cases](std::string name, const LeaseMessage& m) {
    const wire::MsgType type = lease_message_type(m);
    cases->push_back({std::move(name), encode_lease(m), [type](std::string_view bytes) {
                        wire::DecodeError reason = wire::DecodeError::kMalformed;
                        return outcome(decode_lease(type, bytes, &reason), encode_lease, &reason,
                                       bytes);
                      }});
  };
  const JobRoundRef ref{"fmnist-3", 12, 4};
  add_job("JobKeepalive", JobKeepalive{ref, 77});
  add_job("JobKeepaliveAck", JobKeepaliveAck{ref, 78});
  add_job("JobProbeRequest", JobProbeRequest{ref, 79, "node-d", 5});
  add_job("JobProbeReply", JobProbeReply{ref, 80, "node-d", 5, true});
  add_job("JobLossNotice", JobLossNotice{ref, "node-d", 5});
  add_lease("LeaseRequest", LeaseRequest{"node-e", 2, 31, 11});
  add_lease("LeaseGrant", LeaseGrant{"node-e", 2, 31, 12, 1500ms});
}

rendezvous::WallTime ms(std::int64_t t) {
  return rendezvous::WallTime(std::chrono::milliseconds(t));
}

rendezvous::JobSpec full_spec() {
  rendezvous::JobSpec s;
  s.name = "fmnist";
  s.command = {"/usr/bin/python3", "train.py", "--epochs", "300"};
  s.env = {{"NCCL_DEBUG", "INFO"}, {"OMP_NUM_THREADS", "4"}};
  s.exported_env = {{"PATH", "/usr/bin:/bin"}};
  s.min_nodes = 2;
  s.max_nodes = 300;
  s.workers_per_node = 8;
  s.checkpoint_root = "/nfs/ck";
  s.max_restarts = 70'000;
  s.restart_backoff = 10s;
  s.last_call = 5s;
  s.hang_timeout = 60s;
  s.working_dir = "/home/alice";
  s.warm = true;
  s.user = "alice";
  s.uid = 1000;
  s.gid = 100;
  return s;
}

rendezvous::JobSpec minimal_spec() {
  rendezvous::JobSpec s;
  s.name = "tiny";
  s.command = {"/bin/true"};
  s.user = "bob";
  s.uid = 1001;
  s.gid = 1001;
  return s;
}

rendezvous::RankMap rank_map() { return {{"node-a", 3, 8, 0, 0}, {"node-b", 1ULL << 33, 8, 8, 2}}; }

void add_job_table(std::vector<Case>* cases) {
  using namespace rendezvous;
  auto add_command = [cases](std::string name, const Command& c) {
    cases->push_back({std::move(name), encode_command(c), [](std::string_view bytes) {
                        return outcome(decode_command(bytes), encode_command, nullptr, bytes);
                      }});
  };
  add_command("SubmitJob", SubmitJob{"client-1", 17, full_spec(), ms(1'790'000'000'000)});
  add_command("SubmitJob minimal spec", SubmitJob{"client-2", 1, minimal_spec(), ms(1000)});
  add_command("CancelJob", CancelJob{"client-1", 18, "fmnist-1", 1000, true, ms(2000)});
  add_command("OpenRound",
              OpenRound{"fmnist-1", 5, 4, rank_map(), "10.0.0.1:29500", RoundReason::kWorkerFailed,
                        "a worker of node-b failed", ms(3000), "node-b"});
  add_command("OpenRound without failed node", OpenRound{"fmnist-1",
                                                         1,
                                                         0,
                                                         {{"node-a", 3, 8, 0, 0}},
                                                         "10.0.0.1:29500",
                                                         RoundReason::kSubmitted,
                                                         "",
                                                         ms(3000),
                                                         ""});
  OpenRound delta{.job_id = "fmnist-1",
                  .round = 6,
                  .expected_prev_round = 5,
                  .ranks = {},
                  .store_endpoint = "10.0.0.1:29500",
                  .reason = RoundReason::kMemberLost,
                  .detail = "node-b was lost",
                  .at = ms(3500)};
  // A copy with a restart more, a new entry with every key, a copy of one entry.
  delta.delta = RankDelta{.base_round = 5, .base_size = 3, .runs = {}};
  delta.delta->runs.push_back({.from = 0, .count = 1, .add_restarts = 1});
  delta.delta->runs.push_back(
      {.node = "node-d", .generation = 1ULL << 33, .slots = 8, .restarts = 2});
  delta.delta->runs.push_back({.from = 2, .count = 1});
  add_command("OpenRound as a rank delta", delta);
  add_command("SetJobState",
              SetJobState{"fmnist-1", 5, JobState::kRecovering, RoundReason::kWorkerFailed,
                          "rank 3 exited 1", ms(4000), "node-b"});
  add_command(
      "SetJobState without failed node",
      SetJobState{"fmnist-1", 5, JobState::kRunning, RoundReason::kMemberLost, "", ms(4000), ""});
  add_command("DrainNode", DrainNode{"ops", 3, "node-c", true, "bad DIMM", 0, true, ms(5000)});
  add_command("SetPriority",
              SetPriority{"client-1", 19, "fmnist-1", -250, 100, 1000, false, ms(6000)});
  add_command("SuspendJob", SuspendJob{"client-1", 20, "fmnist-1", true, 0, true, ms(7000)});
  add_command("SetJobState requeued",
              SetJobState{"fmnist-1", 5, JobState::kPending, RoundReason::kPreempted,
                          "preempted for job big-3", ms(8000), ""});

  auto add_spec = [cases](std::string name, const JobSpec& s) {
    cases->push_back({std::move(name), encode_job_spec(s), [](std::string_view bytes) {
                        return outcome(decode_job_spec(bytes), encode_job_spec, nullptr, bytes);
                      }});
  };
  add_spec("JobSpec", full_spec());
  add_spec("JobSpec minimal", minimal_spec());
  JobSpec scheduled = minimal_spec();
  scheduled.priority = -42;
  scheduled.preemptible = true;
  scheduled.scale = ScaleMode::kThroughput;
  scheduled.scale_min_gain = 0.125;
  scheduled.scale_window = 2min;
  scheduled.hang_timeout = Duration::zero();
  add_spec("JobSpec scheduling", scheduled);

  auto add_snapshot = [cases](std::string name, const JobTable& table) {
    cases->push_back({std::move(name), table.snapshot(), [](std::string_view bytes) {
                        return outcome(
                            JobTable::restore(bytes),
                            [](const JobTable& t) { return t.snapshot(); }, nullptr, bytes);
                      }});
  };
  add_snapshot("snapshot of an empty table", JobTable{});
  // A table with a running job (rank map, events), a cancelled one, remembered clients and a
  // drained node, made by applying commands as Raft would.
  JobTable table;
  Index index = 0;
  auto apply = [&](const Command& c) {
    const ApplyResult r = table.apply(++index, encode_command(c));
    EXPECT_TRUE(r.ok()) << r.message;
  };
  apply(SubmitJob{"client-1", 1, full_spec(), ms(1000)});
  apply(SubmitJob{"client-2", 1, minimal_spec(), ms(1100)});
  apply(OpenRound{"fmnist-1", 1, 0, rank_map(), "10.0.0.1:29500", RoundReason::kSubmitted, "",
                  ms(2000), ""});
  apply(SetJobState{"fmnist-1", 1, JobState::kRecovering, RoundReason::kWorkerFailed,
                    "rank 3 exited 1", ms(2500), "node-b"});
  apply(CancelJob{"client-2", 2, "tiny-2", 1001, false, ms(3000)});
  apply(DrainNode{"ops", 1, "node-c", true, "bad DIMM", 0, true, ms(4000)});
  add_snapshot("snapshot", table);
  // A suspended job and a requeued one (its preemption count).
  JobTable held;
  Index held_index = 0;
  auto apply_held = [&](const Command& c) {
    const ApplyResult r = held.apply(++held_index, encode_command(c));
    EXPECT_TRUE(r.ok()) << r.message;
  };
  apply_held(SubmitJob{"client-1", 1, scheduled, ms(1000)});
  apply_held(SubmitJob{"client-2", 1, minimal_spec(), ms(1100)});
  apply_held(OpenRound{"tiny-1",
                       1,
                       0,
                       {{"node-a", 3, 8, 0, 0}},
                       "10.0.0.1:29500",
                       RoundReason::kSubmitted,
                       "",
                       ms(2000),
                       ""});
  apply_held(SetJobState{"tiny-1", 1, JobState::kPending, RoundReason::kPreempted,
                         "preempted for job big-3", ms(2500), ""});
  apply_held(SuspendJob{"client-2", 2, "tiny-2", false, 1001, false, ms(3000)});
  add_snapshot("snapshot with suspension and preemption", held);
}

void add_node(std::vector<Case>* cases) {
  node::RoundStart start;
  start.term = 12;
  start.state = rendezvous::JobState::kRunning;
  start.round = rendezvous::OpenRound{
      "fmnist-1",      5,        4, rank_map(), "10.0.0.1:29500", rendezvous::RoundReason::kGrow,
      "node-c joined", ms(3000), ""};
  start.spec = full_spec();
  start.restarts = 2;
  cases->push_back({"RoundStart", node::encode_round_start(start), [](std::string_view bytes) {
                      return outcome(node::decode_round_start(bytes), node::encode_round_start,
                                     nullptr, bytes);
                    }});
  // The delta form (round_codec.h): round 5 against round 4, which held node-c too.
  node::HeldRound held;
  held.round = 4;
  held.ranks = rank_map();
  held.ranks.push_back({"node-c", 2, 8, 16, 1});
  held.spec = full_spec();
  held.spec_digest = node::spec_digest(held.spec);
  cases->push_back(
      {"RoundStart delta", *node::encode_round_start_delta(start, 4, held.ranks, held.spec_digest),
       [held](std::string_view bytes) {
         return outcome(
             node::decode_round_start(bytes, [&](const std::string&) { return &held; }),
             [&](const node::RoundStart& s) {
               return node::encode_round_start_delta(s, 4, held.ranks, held.spec_digest)
                   .value_or("");
             },
             nullptr, bytes);
       }});
  const node::ForwardRequest request{42, "submit", R"({"verb":"submit"})", 1000, 100, true, 7};
  cases->push_back({"ForwardRequest", node::encode_forward(request), [](std::string_view bytes) {
                      return outcome(
                          node::decode_forward_request(bytes),
                          [](const node::ForwardRequest& r) { return node::encode_forward(r); },
                          nullptr, bytes);
                    }});
  const node::ForwardReply reply{42, node::ForwardOutcome::kRedirect, "not the leader", "node-b"};
  cases->push_back({"ForwardReply", node::encode_forward(reply), [](std::string_view bytes) {
                      return outcome(
                          node::decode_forward_reply(bytes),
                          [](const node::ForwardReply& r) { return node::encode_forward(r); },
                          nullptr, bytes);
                    }});
  // Round reports: each kind's own keys (wall times and steps are msgpack ints), and kinds with
  // none.
  auto add_report = [cases](std::string name, const node::RoundReport& report) {
    cases->push_back(
        {std::move(name), node::encode_round_report(report), [](std::string_view bytes) {
           return outcome(node::decode_round_report(bytes), node::encode_round_report, nullptr,
                          bytes);
         }});
  };
  node::RoundReport info = node::round_report(node::ReportKind::kNodeInfo, "", 0);
  info.slots = 8;
  add_report("RoundReport node_info", info);
  add_report("RoundReport round_ack",
             node::round_report(node::ReportKind::kRoundAck, "fmnist-1", 70'000));
  node::RoundReport failed = node::round_report(node::ReportKind::kWorkerFailed, "fmnist-1", 5);
  failed.rank = 3;
  failed.detail = "rank 3 on node node-b exited with status 1";
  failed.at_ms = 1'790'000'000'000;
  add_report("RoundReport worker_failed", failed);
  node::RoundReport lost = node::round_report(node::ReportKind::kPeerLost, "fmnist-1", 5);
  lost.peer = "node-c";
  lost.peer_generation = 1ULL << 33;
  lost.reason = "keepalive timeout";
  lost.last_heard_ms = 1'790'000'000'000;
  add_report("RoundReport peer_lost", lost);
  node::RoundReport progress = node::round_report(node::ReportKind::kProgress, "fmnist-1", 5);
  progress.rank = 0;
  progress.event = "checkpoint";
  progress.step = 300;
  progress.resumed_from = 250;
  add_report("RoundReport progress", progress);
  node::RoundReport busy = node::round_report(node::ReportKind::kStorePortBusy, "fmnist-1", 5);
  busy.port = 29500;
  busy.detail = "another process on node node-a holds TCP port 29500";
  add_report("RoundReport store_port_busy", busy);
  add_report("RoundReport round_received",
             node::round_report(node::ReportKind::kRoundReceived, "fmnist-1", 5));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  add_envelopes(&cases);
  add_membership(&cases);
  add_raft(&cases);
  add_job_tier(&cases);
  add_job_table(&cases);
  add_node(&cases);
  return cases;
}

// The golden file split into its cases ("== name" starts one).
std::map<std::string, std::string> read_golden() {
  std::ifstream in(kGoldenPath);
  std::map<std::string, std::string> cases;
  std::string line;
  std::string name;
  while (std::getline(in, line)) {
    if (line.starts_with("== ")) name = line.substr(3);
    if (!name.empty()) cases[name] += line + "\n";
  }
  return cases;
}

TEST(WireGolden, EveryMessageEncodesAndDecodesAsTheGoldenFileRecords) {
  const std::vector<Case> cases = all_cases();
  if (std::getenv("ELASTIC_WRITE_GOLDEN") != nullptr) {
    std::ofstream out(kGoldenPath);
    out << "# Written by tests/unit/wire_golden_test.cc (see there); do not edit by hand.\n";
    for (const Case& c : cases) out << describe(c);
    ASSERT_TRUE(out.good()) << kGoldenPath;
    GTEST_SKIP() << "wrote " << kGoldenPath;
  }
  const std::map<std::string, std::string> golden = read_golden();
  ASSERT_FALSE(golden.empty()) << "cannot read " << kGoldenPath;
  EXPECT_EQ(golden.size(), cases.size()) << "the file and the test list different cases";
  for (const Case& c : cases) {
    const auto it = golden.find(c.name);
    ASSERT_NE(it, golden.end()) << "no golden entry for " << c.name;
    const std::string actual = describe(c);
    // Line by line, so a failure names the variation that changed.
    std::istringstream want(it->second);
    std::istringstream got(actual);
    for (;;) {
      std::string w;
      std::string g;
      const bool more_wanted = static_cast<bool>(std::getline(want, w));
      const bool more_got = static_cast<bool>(std::getline(got, g));
      if (!more_wanted && !more_got) break;
      EXPECT_EQ(g, w) << "case " << c.name;
    }
  }
}

}  // namespace
}  // namespace elastic
