// Writes the seed corpus of the wire fuzzer: one valid envelope per membership and Raft message
// and the bare bodies, so libFuzzer starts from inputs that reach deep into the decoder.
// Usage: wire_fuzz_corpus <dir>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "daemon/consensus/raft_codec.h"
#include "daemon/node/forward_codec.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_report.h"
#include "daemon/rendezvous/job_codec.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/wire/codec.h"
#include "tests/fuzz/wire_fuzz_held.h"

using namespace elastic::wire;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 64;
  }
  const std::string dir = argv[1];
  MemberUpdate alive{"a", 3, 1, MemberState::kAlive, "tcp://10.0.0.1:7946", ""};
  MemberUpdate dead{"b", 2, 4, MemberState::kDead, "tcp://10.0.0.2:7946", "a"};
  const MembershipMessage messages[] = {
      Ping{1, "b", 2, {alive, dead}},
      Ack{1, {alive}},
      PingReq{2, "c", 5, "tcp://10.0.0.3:7946", true, {dead}},
      Nack{3},
      PushPullDigest{0x1234567890abcdefULL, 2, false},
      PushPullState{{alive, dead}, true, false},
  };
  int n = 0;
  auto write = [&dir, &n](MsgType type, std::string body) {
    Envelope e;
    e.cluster_id = "fuzz";
    e.sender = "a";
    e.generation = 3;
    e.sender_address = "tcp://10.0.0.1:7946";
    e.type = type;
    e.seq = static_cast<std::uint64_t>(n);
    e.body = std::move(body);
    std::ofstream(dir + "/envelope-" + std::to_string(n), std::ios::binary) << encode_envelope(e);
    std::ofstream(dir + "/body-" + std::to_string(n), std::ios::binary) << e.body;
    ++n;
  };
  for (const MembershipMessage& m : messages) write(message_type(m), encode_body(m));

  namespace raft = elastic::consensus;
  const raft::Entry noop{4, 10, raft::EntryType::kNoop, ""};
  const raft::Entry command{4, 11, raft::EntryType::kCommand, std::string("cmd\0\x01\xff", 6)};
  const raft::Message raft_messages[] = {
      {1, 2, raft::VoteRequest{true, 5, 11, 4}},
      {2, 1, raft::VoteReply{false, 5, true}},
      {1, 3, raft::AppendEntries{4, 9, 3, {noop, command}, 9, 17}},
      {3, 1, raft::AppendReply{4, false, 0, 7, 3, 17}},
      {1, 3,
       raft::AppendEntries{
           4, 11, 4, {{4, 12, raft::EntryType::kConfig, raft::encode_voters({1, 2, 3, 4})}}, 11}},
      {1, 4, raft::InstallSnapshot{4, raft::Snapshot{11, 4, {1, 2, 3}, std::string("sm\0", 3)}}},
      {4, 1, raft::InstallSnapshotReply{4, 11}},
  };
  for (const raft::Message& m : raft_messages) {
    write(raft::raft_message_type(m.body), raft::encode_raft(m));
  }

  namespace rdv = elastic::rendezvous;
  namespace node = elastic::node;
  write(MsgType::kForwardRequest, node::encode_forward(node::ForwardRequest{
                                      7, "submit", R"({"verb":"submit"})", 1000, 100, false, 3}));
  write(MsgType::kForwardReply, node::encode_forward(node::ForwardReply{
                                    7, node::ForwardOutcome::kRedirect, "not the leader", "n2"}));
  rdv::OpenRound open;
  open.job_id = "fmnist-1";
  open.round = 2;
  open.expected_prev_round = 1;
  open.ranks = {{"n1", 1, 1, 0}, {"n2", 3, 2, 1}};
  open.store_endpoint = "10.0.0.1:29502";
  open.reason = rdv::RoundReason::kMemberLost;
  rdv::JobSpec spec;
  spec.name = "fmnist";
  spec.command = {"elastic-trainer", "--model", "fmnist"};
  write(MsgType::kRoundStart,
        node::encode_round_start(node::RoundStart{5, rdv::JobState::kRunning, open, spec, 1}));
  // The next round as a delta against fuzz_held_round() (n2 lost, n4 joined).
  const node::HeldRound held = fuzz_held_round();
  rdv::OpenRound next = open;
  next.round = 3;
  next.expected_prev_round = 2;
  next.ranks = {{"n1", 1, 1, 0}, {"n4", 1, 2, 1}};
  write(MsgType::kRoundStart,
        *node::encode_round_start_delta(node::RoundStart{5, rdv::JobState::kRunning, next, spec, 1},
                                        held.round, held.ranks, held.spec_digest));
  // One round report of each kind, every field of the kind set.
  for (int kind = 0; kind <= static_cast<int>(node::kLastReportKind); ++kind) {
    node::RoundReport report =
        node::round_report(static_cast<node::ReportKind>(kind), "fmnist-1", 2);
    switch (report.kind) {
      case node::ReportKind::kNodeInfo:
        report = node::round_report(report.kind, "", 0);
        report.slots = 8;
        break;
      case node::ReportKind::kWorkerFailed:
        report.rank = 1;
        report.detail = "rank 1 on node n2 exited with status 1";
        report.at_ms = 1'700'000'000'000;
        break;
      case node::ReportKind::kPeerLost:
        report.peer = "n2";
        report.peer_generation = 3;
        report.reason = "keepalive timeout";
        report.last_heard_ms = 1'700'000'000'000;
        break;
      case node::ReportKind::kProgress:
        report.rank = 0;
        report.event = "step";
        report.step = 100;
        report.resumed_from = -1;
        break;
      case node::ReportKind::kStorePortBusy:
        report.port = 29500;
        report.detail = "another process holds TCP port 29500";
        break;
      default:
        break;
    }
    write(MsgType::kRoundReport, node::encode_round_report(report));
  }
  const rdv::JobRoundRef ref{"fmnist-1", 5, 2};
  write(MsgType::kJobKeepalive, rdv::encode_job(rdv::JobKeepalive{ref, 9}));
  write(MsgType::kJobProbeRequest, rdv::encode_job(rdv::JobProbeRequest{ref, 4, "n2", 3}));
  write(MsgType::kJobProbeReply, rdv::encode_job(rdv::JobProbeReply{ref, 4, "n2", 3, true}));
  write(MsgType::kJobLossNotice, rdv::encode_job(rdv::JobLossNotice{ref, "n2", 3}));
  write(MsgType::kLeaseRequest, rdv::encode_lease(rdv::LeaseRequest{"n2", 3, 8, 5}));
  write(MsgType::kLeaseGrant,
        rdv::encode_lease(rdv::LeaseGrant{"n2", 3, 8, 5, std::chrono::seconds(3)}));
  rdv::SubmitJob submit;
  submit.client_id = "n1/1/7";
  submit.client_seq = 1;
  submit.spec = spec;
  write(MsgType::kControlRequest, rdv::encode_command(submit));
  submit.client_seq = 2;
  submit.spec.priority = -5;
  submit.spec.preemptible = true;
  submit.spec.scale = rdv::ScaleMode::kThroughput;
  submit.spec.scale_min_gain = 0.25;
  submit.spec.hang_timeout = std::chrono::seconds(0);
  write(MsgType::kControlRequest, rdv::encode_command(submit));
  write(MsgType::kControlRequest, rdv::encode_command(open));
  write(MsgType::kControlRequest,
        rdv::encode_command(rdv::DrainNode{"n1/1/8", 2, "gpu-07", true, "bad DIMM", 0, true,
                                           rdv::WallTime(std::chrono::milliseconds(5))}));
  write(MsgType::kControlRequest,
        rdv::encode_command(rdv::SetPriority{"n1/1/9", 3, "fmnist-1", -7, 100, 1000, false,
                                             rdv::WallTime(std::chrono::milliseconds(6))}));
  write(MsgType::kControlRequest,
        rdv::encode_command(rdv::SuspendJob{"n1/1/10", 4, "fmnist-1", true, 1000, false,
                                            rdv::WallTime(std::chrono::milliseconds(7))}));
  write(MsgType::kControlRequest,
        rdv::encode_command(rdv::SetJobState{"fmnist-1", 1, rdv::JobState::kPending,
                                             rdv::RoundReason::kPreempted, "for big-3",
                                             rdv::WallTime(std::chrono::milliseconds(8))}));
  rdv::SetScale scale;
  scale.job_id = "fmnist-1";
  scale.round = 2;
  scale.state.size = 3;
  scale.state.good = 2;
  scale.state.rate = {{1, 310.5}, {2, 612.0}};
  scale.reason = "samples/s 612 at 2 nodes vs 310 at 1 (+97%): trying 3";
  write(MsgType::kControlRequest, rdv::encode_command(scale));
  rdv::RecordHistory history;
  history.points.push_back(
      rdv::JobPoint{"fmnist-1", rdv::SeriesPoint{rdv::WallTime(std::chrono::milliseconds(9)),
                                                 612.0, 0.42}});
  rdv::Incident incident;
  incident.id = 3;
  incident.job = "fmnist-1";
  incident.cause = "node_lost";
  incident.node = "n2";
  incident.from_round = 1;
  incident.to_round = 2;
  incident.detected_s = 0.4;
  incident.first_step_s = 1.1;
  incident.complete = true;
  history.incidents.push_back(incident);
  history.events.push_back(rdv::ClusterEvent{10, "member_dead", "n2", "", "no ack"});
  write(MsgType::kControlRequest, rdv::encode_command(history));
  // MessagePack bombs, small enough for the fuzzer's 1 MB envelope limit:
  // a map {"x": [an array of 100,000 one-byte integers]} (100 KB; 2.4 MB of msgpack objects
  // without a decode budget), as a body and as an unknown key of a valid envelope; and 16 nested
  // arrays that each declare 100,000 elements in 80 bytes.
  const std::string bomb =
      std::string("\x81\xa1x\x91\xdd\x00\x01\x86\xa0", 9) + std::string(100'000, '\x01');
  std::ofstream(dir + "/bomb-body", std::ios::binary) << bomb;
  Envelope e;
  e.cluster_id = "fuzz";
  e.sender = "a";
  e.sender_address = "tcp://10.0.0.1:7946";
  std::string with_key = encode_envelope(e);
  with_key[0] = static_cast<char>(0x89);  // a fixmap of 8 keys becomes one of 9
  std::ofstream(dir + "/bomb-envelope", std::ios::binary) << with_key << bomb.substr(1);
  std::string nested;
  for (int i = 0; i < 16; ++i) nested += std::string("\xdd\x00\x01\x86\xa0", 5);
  std::ofstream(dir + "/bomb-declared", std::ios::binary) << nested;
  return 0;
}
