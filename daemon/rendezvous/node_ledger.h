// NodeLedger: which job holds each node's worker slots and store ports, so the leader never
// gives a slot or a store port twice. The leader (RoundLeader::lead, daemon/node/round_leader.h)
// builds one per planning pass and feeds it everything that may hold a node:
//   1. hold_table(): every job of the applied table in a round (rendezvous, running and
//      recovering: a recovering job keeps its surviving members). A job whose round was put
//      away (suspended, or requeued by a preemption: pending again with a round) holds no slots,
//      as the scheduler (scheduler.h) counts it: its nodes go to other jobs while its workers
//      stop, as a shrunk job's released nodes do; it keeps its store port (the old store may
//      still be bound);
//   2. hold() for each OpenRound proposed but not applied yet: its ranks hold their slots from
//      the moment it is proposed (the planner must not give them again while it commits);
//   3. hold() for each round decided in this very pass, before the next job is planned.
// A job that holds a node twice (its committed round and a proposal moving it) holds the larger
// slot count there, and both store ports. A terminal job holds nothing: its rounds are over.
// Only a job's own holdings are left out of what it may use, so a job keeps its slots.
//
// Store ports: a round's store is its rank-0 node's MASTER_PORT ("host:port" endpoint). On each
// node a port belongs to at most one job, and a job's next round never reuses the port its
// current round holds (the old store may still be bound while its workers stop). free_port()
// scans the range from a start that moves with the round, so consecutive rounds and jobs
// spread over the range.
//
// Thread safety: a value type; no locks. Errors: none (unknown nodes have 0 slots).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/types.h"

namespace elastic::rendezvous {

// The port of a "host:port" or "[v6]:port" store endpoint; 0 when there is none.
std::uint16_t endpoint_port(std::string_view endpoint);
// The host of "host:port" ("v6" of "[v6]:port"); the whole text when it has no port.
std::string endpoint_host(std::string_view endpoint);

struct PortRange {
  std::uint16_t min = 0;
  std::uint16_t max = 0;  // inclusive
};

class NodeLedger {
 public:
  // The node's worker slots (its daemon's node_info). A node never given a capacity has none.
  void set_capacity(const std::string& node, std::uint32_t slots);
  // `job` holds `ranks`, and `store_port` (0: none) on the node of its rank 0.
  void hold(const std::string& job, const RankMap& ranks, std::uint16_t store_port);
  // Every job of `table` in a round holds its rank map and store port; a job whose round was
  // put away (suspended, or pending again) only its store port.
  void hold_table(const JobTable& table);

  // The node's slots that no job but `job` holds (0 when other jobs hold all or more).
  std::uint32_t free_slots(const std::string& node, const std::string& job) const;
  // A port of `range` on `node` that no job holds (the asking job's own current port
  // included) and that is not in `avoid`, scanning from range.min + round mod size; 0 when
  // there is none.
  std::uint16_t free_port(const std::string& node, std::uint64_t round, PortRange range,
                          const std::set<std::uint16_t>& avoid = {}) const;
  // Slots held on `node` by all jobs together.
  std::uint32_t held_slots(const std::string& node) const;

 private:
  // `store_port` (0: none) on the node of rank 0 of `ranks`.
  void hold_port(const std::string& job, const RankMap& ranks, std::uint16_t store_port);

  std::map<std::string, std::uint32_t> capacity_;
  std::map<std::string, std::map<std::string, std::uint32_t>> slots_;  // node -> job -> slots
  std::map<std::string, std::map<std::uint16_t, std::string>> ports_;  // node -> port -> job
};

}  // namespace elastic::rendezvous
