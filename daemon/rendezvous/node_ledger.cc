#include "daemon/rendezvous/node_ledger.h"

#include <algorithm>
#include <charconv>

namespace elastic::rendezvous {

std::uint16_t endpoint_port(std::string_view endpoint) {
  const auto colon = endpoint.rfind(':');
  if (colon == std::string_view::npos || colon + 1 >= endpoint.size()) return 0;
  const std::string_view digits = endpoint.substr(colon + 1);
  std::uint32_t port = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (error != std::errc() || end != digits.data() + digits.size() || port > 65535) return 0;
  return static_cast<std::uint16_t>(port);
}

std::string endpoint_host(std::string_view endpoint) {
  const auto colon = endpoint.rfind(':');
  std::string_view host = colon == std::string_view::npos ? endpoint : endpoint.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::string(host);
}

void NodeLedger::set_capacity(const std::string& node, std::uint32_t slots) {
  capacity_[node] = slots;
}

void NodeLedger::hold(const std::string& job, const RankMap& ranks, std::uint16_t store_port) {
  for (const RankAssignment& r : ranks) {
    std::uint32_t& held = slots_[r.node][job];
    held = std::max(held, r.slots);
  }
  hold_port(job, ranks, store_port);
}

void NodeLedger::hold_port(const std::string& job, const RankMap& ranks, std::uint16_t store_port) {
  if (store_port == 0 || ranks.empty()) return;
  // The store runs on the node of rank 0 (the planner puts it first).
  const auto rank0 = std::find_if(ranks.begin(), ranks.end(),
                                  [](const RankAssignment& r) { return r.first_rank == 0; });
  const std::string& node = rank0 == ranks.end() ? ranks.front().node : rank0->node;
  ports_[node].try_emplace(store_port, job);
}

void NodeLedger::hold_table(const JobTable& table) {
  for (const auto& [id, job] : table.jobs()) {
    if (is_terminal(job.state) || job.round == 0) continue;
    const bool in_round = job.state == JobState::kRendezvous || job.state == JobState::kRunning ||
                          job.state == JobState::kRecovering;
    if (in_round) {
      hold(id, job.ranks, endpoint_port(job.store_endpoint));
    } else {
      hold_port(id, job.ranks, endpoint_port(job.store_endpoint));
    }
  }
}

std::uint32_t NodeLedger::free_slots(const std::string& node, const std::string& job) const {
  const auto capacity = capacity_.find(node);
  std::uint32_t free = capacity == capacity_.end() ? 0 : capacity->second;
  if (const auto held = slots_.find(node); held != slots_.end()) {
    for (const auto& [other, n] : held->second) {
      if (other != job) free -= std::min(free, n);
    }
  }
  return free;
}

std::uint32_t NodeLedger::held_slots(const std::string& node) const {
  std::uint32_t total = 0;
  if (const auto held = slots_.find(node); held != slots_.end()) {
    for (const auto& [job, n] : held->second) total += n;
  }
  return total;
}

std::uint16_t NodeLedger::free_port(const std::string& node, std::uint64_t round, PortRange range,
                                    const std::set<std::uint16_t>& avoid) const {
  if (range.min == 0 || range.max < range.min) return 0;
  const std::uint32_t size = std::uint32_t{range.max} - range.min + 1;
  const auto held = ports_.find(node);
  for (std::uint32_t i = 0; i < size; ++i) {
    const auto port = static_cast<std::uint16_t>(range.min + (round + i) % size);
    if (avoid.contains(port)) continue;
    if (held != ports_.end() && held->second.contains(port)) continue;
    return port;
  }
  return 0;
}

}  // namespace elastic::rendezvous
