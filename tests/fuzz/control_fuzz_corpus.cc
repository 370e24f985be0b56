// Writes the seed corpus of the control fuzzer (control_fuzz.cc): valid requests of every verb,
// a full job spec as JSON and in its binary form, and the nodes/status replies, each prefixed
// with the selector byte control_fuzz.cc reads first.
// Usage: control_fuzz_corpus <dir>
#include <cstdio>
#include <fstream>
#include <string>

#include "daemon/control/protocol.h"
#include "daemon/rendezvous/job_spec.h"

using namespace elastic;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 64;
  }
  const std::string dir = argv[1];
  int n = 0;
  auto write = [&](char selector, const std::string& body) {
    std::ofstream out(dir + "/seed-" + std::to_string(n++), std::ios::binary);
    out << selector << body;
  };
  rendezvous::JobSpec spec;
  spec.name = "train";
  spec.command = {"elastic-trainer", "--steps", "100"};
  spec.env = {{"NCCL_DEBUG", "INFO"}, {"OMP_PROC_BIND", "close"}};
  spec.min_nodes = 2;
  spec.max_nodes = 4;
  spec.workers_per_node = 8;
  spec.checkpoint_root = "/shared/ckpt";
  spec.max_restarts = 5;
  spec.restart_backoff = std::chrono::seconds(2);
  spec.last_call = std::chrono::milliseconds(1500);
  spec.hang_timeout = std::chrono::seconds(60);
  spec.working_dir = "/home/alice";
  spec.user = "alice";
  spec.uid = 1000;
  spec.gid = 1000;
  const std::string spec_json = rendezvous::to_json(spec);
  write(1, spec_json);
  write(4, rendezvous::encode_job_spec(spec));
  // A spec at every size bound, and the same with the name one byte over (valid JSON, refused by
  // validation and by the binary decoder): the fuzzer starts next to the edges.
  rendezvous::JobSpec edge = spec;
  edge.name = std::string(rendezvous::kMaxJobNameBytes, 'n');
  edge.user = std::string(rendezvous::kMaxUserBytes, 'u');
  edge.checkpoint_root = "/" + std::string(rendezvous::kMaxPathBytes - 1, 'c');
  edge.working_dir = "/" + std::string(rendezvous::kMaxPathBytes - 1, 'w');
  edge.env.emplace(std::string(rendezvous::kMaxEnvNameBytes, 'E'), "v");
  edge.max_nodes = rendezvous::kMaxNodesPerJob;
  edge.workers_per_node = rendezvous::kMaxWorkersPerNode;
  edge.max_restarts = rendezvous::kMaxRestartsLimit;
  edge.restart_backoff = rendezvous::kMaxRestartBackoff;
  edge.last_call = rendezvous::kMaxLastCall;
  edge.hang_timeout = rendezvous::kMaxHangTimeout;
  if (Status valid = rendezvous::validate(edge); !valid.ok()) {
    std::fprintf(stderr, "the edge seed spec is not valid: %s\n", valid.error().message.c_str());
    return 1;
  }
  write(1, rendezvous::to_json(edge));
  write(4, rendezvous::encode_job_spec(edge));
  edge.name.push_back('n');
  write(1, rendezvous::to_json(edge));
  for (const std::string& request :
       {std::string(R"({"verb":"nodes"})"), std::string(R"({"verb":"status"})"),
        std::string(R"({"verb":"jobs"})"), std::string(R"({"verb":"cancel","job":"train-1"})"),
        std::string(R"({"verb":"priority","job":"train-1","priority":-5})"),
        std::string(R"({"verb":"suspend","job":"train-1"})"),
        std::string(R"({"verb":"drain","node":"n2","reason":"bad DIMM"})"),
        std::string(R"({"verb":"logs","job":"train-1","rank":3,"offset":0,"max":65536})"),
        std::string(R"({"verb":"voters","action":"add","node":"n4"})"),
        std::string(R"({"verb":"events","job":"train-1","limit":10})"),
        R"({"verb":"submit","spec":)" + spec_json + "}"}) {
    write(0, request);
    write(5, request);
  }
  // The requests that stopped the leader before the arguments were typed.
  for (const char* request :
       {R"({"verb":"events","job":1})", R"({"verb":"voters","action":1})",
        R"({"verb":"drain","node":"n1","reason":1})", R"({"verb":"voters","node":[1]})",
        R"({"verb":"logs","job":"j","rank":-1,"offset":1.5})"}) {
    write(5, request);
  }
  control::NodesReply nodes;
  nodes.self = {"n1", 3, "tcp://10.0.0.1:7946", "prod", 12.5};
  nodes.members.push_back({"n1", "alive", 0, 3, "tcp://10.0.0.1:7946", -1, 1000});
  nodes.members.push_back({"n2", "suspect", 2, 1, "tcp://10.0.0.2:7946", 250, 40});
  write(2, control::encode_reply(nodes));
  control::StatusReply status;
  status.self = nodes.self;
  status.alive = 2;
  status.consensus.voter = true;
  status.consensus.role = "leader";
  status.consensus.leader = "n1";
  status.consensus.voters = {"n1", "n2", "n3"};
  status.rounds.push_back({"train-1", 4, 2, 0, 8, 16, "tcp://10.0.0.1:29500", false, 1, 1, 0});
  write(3, control::encode_reply(status));
  write(0, control::encode_error_reply("No job \"x\" is known."));
  return 0;
}
