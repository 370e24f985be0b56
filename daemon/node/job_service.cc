#include "daemon/node/job_service.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <memory>

#include "daemon/control/credentials.h"
#include "daemon/rendezvous/job_table.h"

namespace elastic::node {
namespace {

using json = nlohmann::json;
using rendezvous::ApplyCode;
using rendezvous::ApplyResult;

// Apply results travel from the apply loop to the proposer as bytes (StateMachine::apply):
// code, job id and message in a small JSON object (local only, never on the wire).
std::string encode_result(const ApplyResult& result) {
  return json{{"code", static_cast<int>(result.code)},
              {"job", result.job_id},
              {"message", result.message},
              {"duplicate", result.duplicate}}
      .dump();
}

ApplyResult decode_result(const std::string& bytes) {
  const json value = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  ApplyResult result;
  if (!value.is_object()) {
    result.code = ApplyCode::kMalformed;
    result.message = "The job table returned no result.";
    return result;
  }
  const int code = value.value("code", 2);
  if (code < 0 || code > static_cast<int>(ApplyCode::kDenied)) {
    result.code = ApplyCode::kMalformed;
    result.message = "The job table returned an unknown result code " + std::to_string(code) + ".";
    return result;
  }
  result.code = static_cast<ApplyCode>(code);
  result.job_id = value.value("job", "");
  result.message = value.value("message", "");
  result.duplicate = value.value("duplicate", false);
  return result;
}

rendezvous::WallTime wall_now() {
  return std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

// The string member `key` of the request object, or an error sentence.
Result<std::string> string_arg(const std::string& args, const char* key) {
  const json value = json::parse(args, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) return Error{"The request is not a JSON object."};
  const auto found = value.find(key);
  if (found == value.end() || !found->is_string() || found->get<std::string>().empty()) {
    return Error{std::string("The request needs a non-empty string \"") + key + "\"."};
  }
  return found->get<std::string>();
}

std::string user_name(std::uint32_t uid) {
  const std::optional<control::Account> account = control::account_of(uid);
  return account ? account->name : std::to_string(uid);
}

std::string job_reply(const rendezvous::JobTable& table, const std::string& id, bool duplicate) {
  const rendezvous::JobRecord* job = table.job(id);
  json reply{{"ok", true}, {"duplicate", duplicate}};
  reply["job"] = job != nullptr ? json::parse(rendezvous::to_json(*job, 20), nullptr, false)
                                : json{{"id", id}};
  return reply.dump();
}

}  // namespace

bool is_leader_verb(std::string_view verb) {
  return verb == "submit" || verb == "cancel" || verb == "jobs" || verb == "job" ||
         verb == "voters" || verb == "events" || verb == "drain" || verb == "undrain" ||
         verb == "drained";
}

JobService::JobService() : table_(std::make_unique<rendezvous::JobTable>()) {}
JobService::~JobService() = default;

std::size_t JobService::job_count() const { return table_->jobs().size(); }

std::string JobService::apply(consensus::Index index, std::string_view command) {
  const ApplyResult result = table_->apply(index, command);
  if (result.code == ApplyCode::kApplied && !result.duplicate) {
    spdlog::debug("job table: applied index {} ({})", index, result.job_id);
  } else if (result.code != ApplyCode::kApplied) {
    spdlog::info("job table: index {} refused: {}", index, result.message);
  }
  return encode_result(result);
}

void JobService::serve_voters(TimePoint now, const ClientRequest& request, ConsensusHost& consensus,
                              ServeDone done) {
  const json args = json::parse(request.args, nullptr, /*allow_exceptions=*/false);
  const std::string action = args.is_object() ? args.value("action", "") : "";
  const std::string node = args.is_object() ? args.value("node", "") : "";
  if (action.empty()) {
    json voters = consensus.voters();
    return done(ForwardOutcome::kOk, json{{"ok", true}, {"voters", voters}}.dump());
  }
  if (!request.admin) {
    return done(ForwardOutcome::kDenied,
                "Changing the voters needs root or a member of control.admin_group.");
  }
  if (action != "add" && action != "remove") {
    return done(ForwardOutcome::kError,
                "The voters request needs \"action\": \"add\" or \"remove\".");
  }
  const std::vector<std::string> current = consensus.voters();
  const bool present = std::find(current.begin(), current.end(), node) != current.end();
  if (action == "add") {
    if (present) return done(ForwardOutcome::kError, node + " is already a voter.");
    if (current.size() >= 5) {
      return done(ForwardOutcome::kError,
                  "The cluster already has 5 voters; remove one before adding " + node + ".");
    }
    if (!is_member_ || !is_member_(node)) {
      return done(ForwardOutcome::kError,
                  node + " is not an alive member of the cluster; start its daemon first.");
    }
  } else if (!present) {
    return done(ForwardOutcome::kError, node + " is not a voter.");
  }
  consensus.change_voter(
      now, action == "add", node,
      [&consensus, done = std::move(done)](Result<std::string> applied) {
        if (!applied.ok()) {
          return done(ForwardOutcome::kError, applied.error().message);
        }
        done(ForwardOutcome::kOk, json{{"ok", true}, {"voters", consensus.voters()}}.dump());
      });
}

std::string JobService::snapshot() const { return table_->snapshot(); }

Status JobService::restore(consensus::Index index, std::string_view bytes) {
  auto restored = rendezvous::JobTable::restore(bytes);
  if (!restored.ok()) return restored.error();
  if (restored->applied_index() > index) {
    return Error{"The job table snapshot is at index " + std::to_string(restored->applied_index()) +
                 ", past the Raft snapshot's " + std::to_string(index) + "."};
  }
  *table_ = std::move(*restored);
  return ok_status();
}

void JobService::serve(TimePoint now, const ClientRequest& request, ConsensusHost& consensus,
                       ServeDone done) {
  // Reads answer from this leader's applied table. A leader deposed a moment ago may answer
  // slightly stale data; writes never are (they go through the log).
  if (request.verb == "jobs") {
    json jobs = json::array();
    for (const auto& [id, job] : table_->jobs()) {
      jobs.push_back(json::parse(rendezvous::to_json(job, 0), nullptr, false));
    }
    done(ForwardOutcome::kOk, json{{"ok", true}, {"jobs", std::move(jobs)}}.dump());
    return;
  }
  if (request.verb == "job") {
    auto id = string_arg(request.args, "job");
    if (!id.ok()) return done(ForwardOutcome::kError, id.error().message);
    const rendezvous::JobRecord* job = table_->job(*id);
    if (job == nullptr) return done(ForwardOutcome::kError, "No job \"" + *id + "\" is known.");
    return done(ForwardOutcome::kOk, job_reply(*table_, *id, false));
  }

  if (request.verb == "voters") {
    serve_voters(now, request, consensus, std::move(done));
    return;
  }
  if (request.verb == "events") {
    const json args = json::parse(request.args, nullptr, /*allow_exceptions=*/false);
    const std::string only = args.is_object() ? args.value("job", "") : "";
    std::size_t limit = 100;
    if (args.is_object() && args.contains("limit") && args["limit"].is_number_unsigned()) {
      limit = std::clamp<std::size_t>(args["limit"].get<std::size_t>(), 1, 100'000);
    }
    if (!only.empty() && table_->job(only) == nullptr) {
      return done(ForwardOutcome::kError, "No job \"" + only + "\" is known.");
    }
    json events = json::array();
    for (const auto& [id, job] : table_->jobs()) {
      if (!only.empty() && id != only) continue;
      for (const rendezvous::JobEvent& e : job.events) {
        events.push_back({{"job", id},
                          {"at_ms", e.at.time_since_epoch().count()},
                          {"round", e.round},
                          {"from", rendezvous::to_string(e.from)},
                          {"to", rendezvous::to_string(e.to)},
                          {"reason", e.reason}});
      }
    }
    // Oldest first across jobs; the most recent `limit` of them.
    std::stable_sort(events.begin(), events.end(), [](const json& a, const json& b) {
      return a["at_ms"].get<std::int64_t>() < b["at_ms"].get<std::int64_t>();
    });
    if (events.size() > limit) {
      events.erase(events.begin(), events.end() - static_cast<std::ptrdiff_t>(limit));
    }
    json reply{{"ok", true}, {"events", std::move(events)}};
    if (events_source_) {
      json extra = json::parse(events_source_(only, limit), nullptr, /*allow_exceptions=*/false);
      if (extra.is_object()) {
        reply["cluster"] = std::move(extra["cluster"]);
        reply["incidents"] = std::move(extra["incidents"]);
      }
    }
    done(ForwardOutcome::kOk, reply.dump());
    return;
  }
  if (request.verb == "drained") {
    done(ForwardOutcome::kOk,
         json{{"ok", true},
              {"drained", json::parse(rendezvous::drained_to_json(*table_), nullptr, false)}}
             .dump());
    return;
  }

  rendezvous::Command command;
  if (request.verb == "submit") {
    const json args = json::parse(request.args, nullptr, /*allow_exceptions=*/false);
    const auto spec_json = args.is_object() ? args.find("spec") : args.end();
    if (!args.is_object() || spec_json == args.end() || !spec_json->is_object()) {
      return done(ForwardOutcome::kError, "The submit request needs a \"spec\" object.");
    }
    auto spec = rendezvous::job_spec_from_json(spec_json->dump());
    if (!spec.ok()) return done(ForwardOutcome::kError, spec.error().message);
    // Who runs the job comes from the caller's credentials, never from the spec.
    spec->uid = request.uid;
    spec->gid = request.gid;
    spec->user = user_name(request.uid);
    if (auto valid = rendezvous::validate(*spec); !valid.ok()) {
      return done(ForwardOutcome::kError, valid.error().message);
    }
    command = rendezvous::SubmitJob{.client_id = request.client_id,
                                    .client_seq = request.client_seq,
                                    .spec = std::move(*spec),
                                    .submitted_at = wall_now()};
  } else if (request.verb == "cancel") {
    auto id = string_arg(request.args, "job");
    if (!id.ok()) return done(ForwardOutcome::kError, id.error().message);
    command = rendezvous::CancelJob{.client_id = request.client_id,
                                    .client_seq = request.client_seq,
                                    .job_id = *id,
                                    .by_uid = request.uid,
                                    .is_admin = request.admin,
                                    .at = wall_now()};
  } else if (request.verb == "drain" || request.verb == "undrain") {
    auto node = string_arg(request.args, "node");
    if (!node.ok()) return done(ForwardOutcome::kError, node.error().message);
    const json args = json::parse(request.args, nullptr, /*allow_exceptions=*/false);
    const std::string reason = args.value("reason", "");
    if (reason.size() > rendezvous::kMaxReasonBytes) {
      return done(
          ForwardOutcome::kError,
          "The reason is longer than " + std::to_string(rendezvous::kMaxReasonBytes) + " bytes.");
    }
    command = rendezvous::DrainNode{.client_id = request.client_id,
                                    .client_seq = request.client_seq,
                                    .node = *node,
                                    .drained = request.verb == "drain",
                                    .reason = reason,
                                    .by_uid = request.uid,
                                    .is_admin = request.admin,
                                    .at = wall_now()};
  } else {
    return done(ForwardOutcome::kError, "Unknown verb \"" + request.verb + "\".");
  }
  const rendezvous::JobTable* table = table_.get();
  consensus.propose(
      now, rendezvous::encode_command(command),
      [table, command, done = std::move(done)](Result<std::string> applied) {
        if (!applied.ok()) return done(ForwardOutcome::kRedirect, applied.error().message);
        const ApplyResult result = decode_result(*applied);
        if (result.code != ApplyCode::kApplied) {
          return done(
              result.code == ApplyCode::kDenied ? ForwardOutcome::kDenied : ForwardOutcome::kError,
              result.message);
        }
        if (const auto* drain = std::get_if<rendezvous::DrainNode>(&command)) {
          return done(
              ForwardOutcome::kOk,
              json{{"ok", true}, {"node", drain->node}, {"drained", drain->drained}}.dump());
        }
        done(ForwardOutcome::kOk, job_reply(*table, result.job_id, result.duplicate));
      });
}

}  // namespace elastic::node
