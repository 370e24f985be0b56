#include "daemon/control/protocol.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace elastic::control {

namespace {

using nlohmann::json;

// Member names and addresses come from peers: invalid UTF-8 is replaced instead of throwing.
std::string dump(const json& value, int indent = -1) {
  return value.dump(indent, ' ', false, json::error_handler_t::replace);
}

json to_json(const SelfInfo& self) {
  return json{{"name", self.name},
              {"generation", self.generation},
              {"address", self.address},
              {"cluster_id", self.cluster_id},
              {"uptime_s", self.uptime_s}};
}

json to_json(const MemberRow& row) {
  return json{{"name", row.name},
              {"state", row.state},
              {"incarnation", row.incarnation},
              {"generation", row.generation},
              {"address", row.address},
              {"last_heard_ms_ago", row.last_heard_ms_ago},
              {"state_since_ms_ago", row.state_since_ms_ago}};
}

json to_json(const MembershipCounters& c) {
  return json{{"probes", c.probes},
              {"probe_timeouts", c.probe_timeouts},
              {"indirect_probes", c.indirect_probes},
              {"nacks_received", c.nacks_received},
              {"suspicions", c.suspicions},
              {"deaths", c.deaths},
              {"refutations", c.refutations},
              {"messages_sent", c.messages_sent},
              {"messages_received", c.messages_received},
              {"local_health", c.local_health}};
}

json to_json(const TransportCounters& c) {
  return json{{"sent", c.sent},
              {"received", c.received},
              {"send_failures", c.send_failures},
              {"dropped_malformed", c.dropped_malformed},
              {"dropped_oversized", c.dropped_oversized},
              {"dropped_wrong_version", c.dropped_wrong_version},
              {"dropped_wrong_cluster", c.dropped_wrong_cluster},
              {"dropped_unauthenticated", c.dropped_unauthenticated},
              {"dropped_undecodable", c.dropped_undecodable},
              {"control_received", c.control_received},
              {"control_dropped", c.control_dropped},
              {"control_unauthenticated", c.control_unauthenticated},
              {"peers_opened", c.peers_opened},
              {"peers_closed", c.peers_closed},
              {"open_peers", c.open_peers},
              {"accept_failures", c.accept_failures},
              {"accept_pauses", c.accept_pauses}};
}

// Reads an optional field of the expected type; a present field of another type, or a number
// the type cannot hold (a float or a negative number for an unsigned count, 1e116 for any
// integer: nlohmann's get<> would convert it with undefined behaviour), is an error.
template <typename T>
bool read_field(const json& object, const char* key, T& out, std::string& error) {
  const auto it = object.find(key);
  if (it == object.end()) return true;
  const auto wrong = [&](const char* what) {
    error = std::string("field \"") + key + "\" " + what;
    return false;
  };
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!it->is_number_integer()) return wrong("has the wrong type");
    if (it->is_number_unsigned()) {
      const std::uint64_t value = it->get<std::uint64_t>();
      if (value > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
        return wrong("is out of range");
      }
      out = static_cast<T>(value);
      return true;
    }
    const std::int64_t value = it->get<std::int64_t>();
    if (std::is_unsigned_v<T> || value < static_cast<std::int64_t>(std::numeric_limits<T>::min())) {
      return wrong("is out of range");
    }
    out = static_cast<T>(value);
    return true;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) return wrong("has the wrong type");
    out = it->get<T>();
    return true;
  } else {
    try {
      out = it->get<T>();
      return true;
    } catch (const json::exception&) {
      return wrong("has the wrong type");
    }
  }
}

bool read_self(const json& object, SelfInfo& self, std::string& error) {
  if (!object.is_object()) {
    error = "field \"self\" is not an object";
    return false;
  }
  return read_field(object, "name", self.name, error) &&
         read_field(object, "generation", self.generation, error) &&
         read_field(object, "address", self.address, error) &&
         read_field(object, "cluster_id", self.cluster_id, error) &&
         read_field(object, "uptime_s", self.uptime_s, error);
}

// Parses a reply and checks its "ok" field; nullopt-like failure is reported through the Error.
Result<json> parse_reply(const std::string& text) {
  json reply = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object()) {
    return Error{"The daemon's reply is not a JSON object."};
  }
  const auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean()) {
    return Error{"The daemon's reply has no boolean \"ok\" field."};
  }
  if (!ok->get<bool>()) {
    const auto message = reply.find("error");
    return Error{message != reply.end() && message->is_string()
                     ? message->get<std::string>()
                     : std::string("The daemon refused the request without saying why.")};
  }
  return reply;
}

}  // namespace

std::string encode_request(const Request& request) {
  // A request with arguments was built whole by the caller (its "verb" included).
  return request.text.empty() ? dump(json{{"verb", request.verb}}) : request.text;
}

Result<Request> decode_request(const std::string& text) {
  const json request = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return Error{"The request is not valid JSON."};
  if (!request.is_object()) return Error{"The request is not a JSON object."};
  const auto verb = request.find("verb");
  if (verb == request.end() || !verb->is_string()) {
    return Error{"The request has no string \"verb\" field."};
  }
  return Request{.verb = verb->get<std::string>(), .text = text};
}

std::string encode_reply(const NodesReply& reply) {
  json members = json::array();
  for (const MemberRow& row : reply.members) members.push_back(to_json(row));
  return dump(json{{"ok", true},
                   {"self", to_json(reply.self)},
                   {"members", std::move(members)},
                   {"stats", to_json(reply.stats)},
                   {"transport", to_json(reply.transport)}});
}

std::string encode_reply(const StatusReply& reply) {
  json rounds = json::array();
  for (const RoundRow& r : reply.rounds) {
    rounds.push_back({{"job", r.job},
                      {"term", r.term},
                      {"round", r.round},
                      {"first_rank", r.first_rank},
                      {"slots", r.slots},
                      {"world", r.world},
                      {"store_endpoint", r.store_endpoint},
                      {"fenced", r.fenced},
                      {"suspicions", r.suspicions},
                      {"suspicions_cleared", r.suspicions_cleared},
                      {"declared", r.declared}});
  }
  return dump(json{{"ok", true},
                   {"self", to_json(reply.self)},
                   {"members",
                    {{"alive", reply.alive},
                     {"suspect", reply.suspect},
                     {"dead", reply.dead},
                     {"left", reply.left}}},
                   {"consensus",
                    {{"voter", reply.consensus.voter},
                     {"role", reply.consensus.role},
                     {"leader", reply.consensus.leader},
                     {"term", reply.consensus.term},
                     {"commit_index", reply.consensus.commit_index},
                     {"last_index", reply.consensus.last_index},
                     {"voters", reply.consensus.voters},
                     {"jobs", reply.consensus.jobs}}},
                   {"rounds", std::move(rounds)}});
}

std::string encode_error_reply(const std::string& message, ErrorCode code) {
  json reply{{"ok", false}, {"error", message}};
  if (code == ErrorCode::kPermission) reply["code"] = "permission";
  if (code == ErrorCode::kConfig) reply["code"] = "config";
  return dump(reply);
}

Result<NodesReply> decode_nodes_reply(const std::string& text) {
  auto parsed = parse_reply(text);
  if (!parsed.ok()) return parsed.error();
  const json& reply = *parsed;
  NodesReply out;
  std::string error;
  if (const auto self = reply.find("self"); self != reply.end()) {
    if (!read_self(*self, out.self, error)) return Error{"Bad nodes reply: " + error + "."};
  }
  const auto members = reply.find("members");
  if (members == reply.end() || !members->is_array()) {
    return Error{"Bad nodes reply: no \"members\" array."};
  }
  for (const json& item : *members) {
    if (!item.is_object()) return Error{"Bad nodes reply: a member is not an object."};
    MemberRow row;
    if (!(read_field(item, "name", row.name, error) &&
          read_field(item, "state", row.state, error) &&
          read_field(item, "incarnation", row.incarnation, error) &&
          read_field(item, "generation", row.generation, error) &&
          read_field(item, "address", row.address, error) &&
          read_field(item, "last_heard_ms_ago", row.last_heard_ms_ago, error) &&
          read_field(item, "state_since_ms_ago", row.state_since_ms_ago, error))) {
      return Error{"Bad nodes reply: " + error + "."};
    }
    out.members.push_back(std::move(row));
  }
  if (const auto stats = reply.find("stats"); stats != reply.end() && stats->is_object()) {
    MembershipCounters& c = out.stats;
    if (!(read_field(*stats, "probes", c.probes, error) &&
          read_field(*stats, "probe_timeouts", c.probe_timeouts, error) &&
          read_field(*stats, "indirect_probes", c.indirect_probes, error) &&
          read_field(*stats, "nacks_received", c.nacks_received, error) &&
          read_field(*stats, "suspicions", c.suspicions, error) &&
          read_field(*stats, "deaths", c.deaths, error) &&
          read_field(*stats, "refutations", c.refutations, error) &&
          read_field(*stats, "messages_sent", c.messages_sent, error) &&
          read_field(*stats, "messages_received", c.messages_received, error) &&
          read_field(*stats, "local_health", c.local_health, error))) {
      return Error{"Bad nodes reply: " + error + "."};
    }
  }
  // Absent from daemons older than the field: the counters then stay 0.
  if (const auto counters = reply.find("transport");
      counters != reply.end() && counters->is_object()) {
    TransportCounters& c = out.transport;
    if (!(read_field(*counters, "sent", c.sent, error) &&
          read_field(*counters, "received", c.received, error) &&
          read_field(*counters, "send_failures", c.send_failures, error) &&
          read_field(*counters, "dropped_malformed", c.dropped_malformed, error) &&
          read_field(*counters, "dropped_oversized", c.dropped_oversized, error) &&
          read_field(*counters, "dropped_wrong_version", c.dropped_wrong_version, error) &&
          read_field(*counters, "dropped_wrong_cluster", c.dropped_wrong_cluster, error) &&
          read_field(*counters, "dropped_unauthenticated", c.dropped_unauthenticated, error) &&
          read_field(*counters, "dropped_undecodable", c.dropped_undecodable, error) &&
          read_field(*counters, "control_received", c.control_received, error) &&
          read_field(*counters, "control_dropped", c.control_dropped, error) &&
          read_field(*counters, "control_unauthenticated", c.control_unauthenticated, error) &&
          read_field(*counters, "peers_opened", c.peers_opened, error) &&
          read_field(*counters, "peers_closed", c.peers_closed, error) &&
          read_field(*counters, "open_peers", c.open_peers, error) &&
          read_field(*counters, "accept_failures", c.accept_failures, error) &&
          read_field(*counters, "accept_pauses", c.accept_pauses, error))) {
      return Error{"Bad nodes reply: " + error + "."};
    }
  }
  return out;
}

Result<StatusReply> decode_status_reply(const std::string& text) {
  auto parsed = parse_reply(text);
  if (!parsed.ok()) return parsed.error();
  const json& reply = *parsed;
  StatusReply out;
  std::string error;
  if (const auto self = reply.find("self"); self != reply.end()) {
    if (!read_self(*self, out.self, error)) return Error{"Bad status reply: " + error + "."};
  }
  if (const auto members = reply.find("members"); members != reply.end() && members->is_object()) {
    if (!(read_field(*members, "alive", out.alive, error) &&
          read_field(*members, "suspect", out.suspect, error) &&
          read_field(*members, "dead", out.dead, error) &&
          read_field(*members, "left", out.left, error))) {
      return Error{"Bad status reply: " + error + "."};
    }
  }
  if (const auto raft = reply.find("consensus"); raft != reply.end() && raft->is_object()) {
    ConsensusInfo& c = out.consensus;
    if (!(read_field(*raft, "voter", c.voter, error) && read_field(*raft, "role", c.role, error) &&
          read_field(*raft, "leader", c.leader, error) &&
          read_field(*raft, "term", c.term, error) &&
          read_field(*raft, "commit_index", c.commit_index, error) &&
          read_field(*raft, "last_index", c.last_index, error) &&
          read_field(*raft, "voters", c.voters, error) &&
          read_field(*raft, "jobs", c.jobs, error))) {
      return Error{"Bad status reply: " + error + "."};
    }
  }
  if (const auto rounds = reply.find("rounds"); rounds != reply.end() && rounds->is_array()) {
    for (const json& row : *rounds) {
      if (!row.is_object()) return Error{"Bad status reply: a round is not an object."};
      RoundRow r;
      if (!(read_field(row, "job", r.job, error) && read_field(row, "term", r.term, error) &&
            read_field(row, "round", r.round, error) &&
            read_field(row, "first_rank", r.first_rank, error) &&
            read_field(row, "slots", r.slots, error) && read_field(row, "world", r.world, error) &&
            read_field(row, "store_endpoint", r.store_endpoint, error) &&
            read_field(row, "fenced", r.fenced, error) &&
            read_field(row, "suspicions", r.suspicions, error) &&
            read_field(row, "suspicions_cleared", r.suspicions_cleared, error) &&
            read_field(row, "declared", r.declared, error))) {
        return Error{"Bad status reply: " + error + "."};
      }
      out.rounds.push_back(std::move(r));
    }
  }
  return out;
}

std::string pretty_json(const std::string& text) {
  const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return text;
  return dump(value, 2) + "\n";
}

std::string frame_header(std::uint32_t length) {
  std::string header(4, '\0');
  header[0] = static_cast<char>((length >> 24) & 0xff);
  header[1] = static_cast<char>((length >> 16) & 0xff);
  header[2] = static_cast<char>((length >> 8) & 0xff);
  header[3] = static_cast<char>(length & 0xff);
  return header;
}

std::uint32_t read_frame_header(const unsigned char* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

}  // namespace elastic::control
