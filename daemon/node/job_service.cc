#include "daemon/node/job_service.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "daemon/control/credentials.h"
#include "daemon/control/requests.h"
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

double seconds_of(Duration d) { return to_ms(d) / 1000.0; }

rendezvous::WallTime wall_time(const Clock& clock) {
  return rendezvous::WallTime(std::chrono::milliseconds(clock.wall_ms()));
}

std::string user_name(const Host& host, std::uint32_t uid) {
  const std::optional<control::Account> account = host.account(uid);
  return account ? account->name : std::to_string(uid);
}

// A job's env and exported environment often carry secrets (tokens, passwords): only its
// owner, root and control.admin_group see them; everyone else sees the job without them and
// "env_hidden": true.
// Also the job's place in the queue from `queue` (may be empty).
json job_json(const rendezvous::JobRecord& job, std::size_t max_events, std::uint32_t uid,
              bool admin, const QueueInfoSource& queue) {
  json value = json::parse(rendezvous::to_json(job, max_events), nullptr, false);
  if (!value.is_object()) return value;
  const bool may_see_env = admin || uid == 0 || uid == job.spec.uid;
  if (!may_see_env && value.contains("spec") && value["spec"].is_object()) {
    value["spec"].erase("env");
    value["spec"].erase("exported_env");
    value["spec"]["env_hidden"] = true;
  }
  if (queue) {
    if (const std::optional<QueueInfo> info = queue(job.id)) {
      if (info->position > 0) value["position"] = info->position;
      if (!info->reason.empty()) value["waiting"] = info->reason;
      if (info->samples_per_s) value["samples_per_s"] = *info->samples_per_s;
    }
  }
  return value;
}

std::string job_reply(const rendezvous::JobTable& table, const std::string& id, bool duplicate,
                      std::uint32_t uid, bool admin, const QueueInfoSource& queue) {
  const rendezvous::JobRecord* job = table.job(id);
  json reply{{"ok", true}, {"duplicate", duplicate}};
  reply["job"] = job != nullptr ? job_json(*job, 20, uid, admin, queue) : json{{"id", id}};
  return reply.dump();
}

// Per-user refusals are addressed to a person: their name when the host knows it.
std::string who(const Host& host, std::uint32_t uid) {
  const std::optional<control::Account> account = host.account(uid);
  return account ? "User " + account->name + " (uid " + std::to_string(uid) + ")"
                 : "uid " + std::to_string(uid);
}

}  // namespace

JobService::JobService(const Clock& clock, const Host& host)
    : clock_(&clock), host_(&host), table_(std::make_unique<rendezvous::JobTable>()) {}
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
                              const ServeDone& done) {
  auto args = control::decode_voters_request(request.args);
  if (!args.ok()) return done(ForwardOutcome::kError, args.error().message);
  using Action = control::VotersRequest::Action;
  if (args->action == Action::kList) {
    return after_read_index(now, request, consensus, done, [&consensus, done] {
      json voters = consensus.voters();
      done(ForwardOutcome::kOk, json{{"ok", true}, {"voters", voters}}.dump());
    });
  }
  if (!request.admin) {
    return done(ForwardOutcome::kDenied,
                "Changing the voters needs root or a member of control.admin_group.");
  }
  const bool add = args->action == Action::kAdd;
  const std::string& node = args->node;
  const std::vector<std::string> current = consensus.voters();
  const bool present = std::find(current.begin(), current.end(), node) != current.end();
  if (add) {
    if (present) return done(ForwardOutcome::kError, node + " is already a voter.");
    if (current.size() >= 5) {
      return done(ForwardOutcome::kError,
                  "The cluster already has 5 voters; remove one before adding " + node + ".");
    }
    const auto alive = [&] {
      if (members_ == nullptr) return false;
      for (const membership::MemberView& m : members_->members()) {
        if (m.name == node) return m.state == membership::MemberState::kAlive;
      }
      return false;
    };
    if (!alive()) {
      return done(ForwardOutcome::kError,
                  node + " is not an alive member of the cluster; start its daemon first.");
    }
  } else if (!present) {
    return done(ForwardOutcome::kError, node + " is not a voter.");
  }
  consensus.change_voter(now, add, node, [&consensus, done](Result<std::string> applied) {
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

SubmitLimits submit_limits(const config::ControlConfig& control) {
  // validate() keeps them in 0..10000 and >= 0.
  return SubmitLimits{
      .max_active_jobs_per_user = static_cast<std::uint32_t>(control.max_active_jobs_per_user),
      .submits_per_minute_per_user =
          static_cast<std::uint32_t>(control.submits_per_minute_per_user),
      .submit_burst_per_user = static_cast<std::uint32_t>(control.submit_burst_per_user)};
}

void JobService::set_submit_limits(const SubmitLimits& limits) {
  limits_ = limits;
  buckets_.clear();  // a new rate starts every user with a full burst
}

Status JobService::admit_submit(TimePoint now, std::uint32_t uid) {
  if (uid == 0) return ok_status();  // root is not capped: its tools must never be locked out
  if (limits_.max_active_jobs_per_user > 0) {
    std::size_t active = 0;
    for (const auto& [id, job] : table_->jobs()) {
      if (job.spec.uid == uid && !rendezvous::is_terminal(job.state)) ++active;
    }
    const auto pending = pending_submits_.find(uid);
    if (pending != pending_submits_.end()) active += pending->second;
    if (active >= limits_.max_active_jobs_per_user) {
      return Error{who(*host_, uid) + " has " + std::to_string(active) + " active jobs, the most " +
                   "control.max_active_jobs_per_user (" +
                   std::to_string(limits_.max_active_jobs_per_user) +
                   ") allows; wait for some to finish or cancel some."};
    }
  }
  if (limits_.submits_per_minute_per_user > 0) {
    // A token bucket per user: burst_per_user submits at once, then one every
    // 60 s / submits_per_minute_per_user.
    const double capacity = limits_.submit_burst_per_user;
    const double per_second = limits_.submits_per_minute_per_user / 60.0;
    if (buckets_.size() >= kMaxSubmitBuckets && !buckets_.contains(uid)) {
      // Forget users whose bucket has refilled: they are indistinguishable from new ones.
      std::erase_if(buckets_, [&](const auto& entry) {
        return entry.second.tokens + per_second * seconds_of(now - entry.second.at) >= capacity;
      });
    }
    auto [it, added] = buckets_.try_emplace(uid, Bucket{.tokens = capacity, .at = now});
    Bucket& bucket = it->second;
    bucket.tokens = std::min(capacity, bucket.tokens + per_second * seconds_of(now - bucket.at));
    bucket.at = now;
    if (bucket.tokens < 1.0) {
      const double wait_s = (1.0 - bucket.tokens) / per_second;
      char wait[32];
      std::snprintf(wait, sizeof(wait), "%.1f", wait_s);
      return Error{who(*host_, uid) + " submitted more than control.submit_burst_per_user (" +
                   std::to_string(limits_.submit_burst_per_user) +
                   ") jobs at once, beyond control.submits_per_minute_per_user (" +
                   std::to_string(limits_.submits_per_minute_per_user) + "); try again in " + wait +
                   " s."};
    }
    bucket.tokens -= 1.0;
  }
  return ok_status();
}

void JobService::serve(TimePoint now, const ClientRequest& request, ConsensusHost& consensus,
                       ServeDone done) {
  // The last line of defence: whatever a request holds, no exception leaves a handler (one
  // would stop the daemon, and a forwarded request the leader after it). The request gets one
  // error reply, exactly once, and the failure is logged and counted.
  auto answered = std::make_shared<bool>(false);
  ServeDone once = [answered, done](ForwardOutcome outcome, std::string body) {
    if (*answered) return;
    *answered = true;
    done(outcome, std::move(body));
  };
  guarded(request, once, [&] { serve_request(now, request, consensus, once); });
}

void JobService::guarded(const ClientRequest& request, const ServeDone& done,
                         const std::function<void()>& handler) {
  try {
    handler();
  } catch (const std::exception& e) {
    ++handler_failures_;
    spdlog::error("job service: the \"{}\" request of uid {} failed: {}", request.verb, request.uid,
                  e.what());
    done(ForwardOutcome::kError, "The daemon could not serve this \"" + request.verb +
                                     "\" request (an internal error, logged); nothing changed.");
  }
}

void JobService::after_read_index(TimePoint now, const ClientRequest& request,
                                  ConsensusHost& consensus, const ServeDone& done,
                                  std::function<void()> answer) {
  // The answer may run later, from ConsensusHost's effects, outside serve()'s guard: it gets
  // its own.
  consensus.read(now, [this, request, done, answer = std::move(answer)](Status confirmed) {
    if (!confirmed.ok()) return done(ForwardOutcome::kRedirect, confirmed.error().message);
    guarded(request, done, answer);
  });
}

void JobService::answer_events(const std::string& only, std::size_t limit, const ServeDone& done) {
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
  if (incidents_ != nullptr) {
    json extra = json::parse(incidents_->to_json(only, limit), nullptr, /*allow_exceptions=*/false);
    if (extra.is_object()) {
      reply["cluster"] = std::move(extra["cluster"]);
      reply["incidents"] = std::move(extra["incidents"]);
    }
  }
  done(ForwardOutcome::kOk, reply.dump());
}

void JobService::serve_request(TimePoint now, const ClientRequest& request,
                               ConsensusHost& consensus, const ServeDone& done) {
  // Reads answer from this leader's applied table once after_read_index() confirmed that it
  // still leads and has applied everything committed when the request came: a leader deposed
  // without knowing it yet never answers stale data. Writes go through the log.
  if (request.verb == "jobs") {
    return after_read_index(now, request, consensus, done, [this, request, done] {
      json jobs = json::array();
      for (const auto& [id, job] : table_->jobs()) {
        jobs.push_back(job_json(job, 0, request.uid, request.admin, queue_info_));
      }
      done(ForwardOutcome::kOk, json{{"ok", true}, {"jobs", std::move(jobs)}}.dump());
    });
  }
  if (request.verb == "job") {
    auto args = control::decode_job_request(request.verb, request.args);
    if (!args.ok()) return done(ForwardOutcome::kError, args.error().message);
    return after_read_index(now, request, consensus, done, [this, request, job = args->job, done] {
      if (table_->job(job) == nullptr) {
        return done(ForwardOutcome::kError, "No job \"" + job + "\" is known.");
      }
      done(ForwardOutcome::kOk,
           job_reply(*table_, job, false, request.uid, request.admin, queue_info_));
    });
  }

  if (request.verb == "voters") {
    serve_voters(now, request, consensus, done);
    return;
  }
  if (request.verb == "events") {
    auto args = control::decode_events_request(request.args);
    if (!args.ok()) return done(ForwardOutcome::kError, args.error().message);
    return after_read_index(
        now, request, consensus, done,
        [this, only = args->job, limit = args->limit, done] { answer_events(only, limit, done); });
  }
  if (request.verb == "drained") {
    return after_read_index(now, request, consensus, done, [this, done] {
      done(ForwardOutcome::kOk,
           json{{"ok", true},
                {"drained", json::parse(rendezvous::drained_to_json(*table_), nullptr, false)}}
               .dump());
    });
  }

  rendezvous::Command command;
  std::optional<std::uint32_t> submitter;  // set for a submit: it counts as pending until applied
  if (request.verb == "submit") {
    auto args = control::decode_submit_request(request.args);
    if (!args.ok()) return done(ForwardOutcome::kError, args.error().message);
    auto spec = rendezvous::job_spec_from_json(args->spec);
    if (!spec.ok()) return done(ForwardOutcome::kError, spec.error().message);
    // Who runs the job comes from the caller's credentials, never from the spec.
    spec->uid = request.uid;
    spec->gid = request.gid;
    spec->user = user_name(*host_, request.uid);
    if (auto valid = rendezvous::validate(*spec); !valid.ok()) {
      return done(ForwardOutcome::kError, valid.error().message);
    }
    if (!request.admin && spec->priority > priority_ceiling_) {
      return done(ForwardOutcome::kDenied, "Priority " + std::to_string(spec->priority) +
                                               " is above limits.priority_ceiling (" +
                                               std::to_string(priority_ceiling_) +
                                               "); only an admin may submit a job above it.");
    }
    if (Status admitted = admit_submit(now, request.uid); !admitted.ok()) {
      spdlog::info("job service: submit refused: {}", admitted.error().message);
      return done(ForwardOutcome::kError, admitted.error().message);
    }
    submitter = request.uid;
    command = rendezvous::SubmitJob{.client_id = request.client_id,
                                    .client_seq = request.client_seq,
                                    .spec = std::move(*spec),
                                    .submitted_at = wall_time(*clock_)};
  } else if (request.verb == "cancel") {
    auto args = control::decode_job_request(request.verb, request.args);
    if (!args.ok()) return done(ForwardOutcome::kError, args.error().message);
    command = rendezvous::CancelJob{.client_id = request.client_id,
                                    .client_seq = request.client_seq,
                                    .job_id = args->job,
                                    .by_uid = request.uid,
                                    .is_admin = request.admin,
                                    .at = wall_time(*clock_)};
  } else if (request.verb == "priority") {
    auto args = control::decode_priority_request(request.args);
    if (!args.ok()) return done(ForwardOutcome::kError, args.error().message);
    command = rendezvous::SetPriority{.client_id = request.client_id,
                                      .client_seq = request.client_seq,
                                      .job_id = args->job,
                                      .priority = args->priority,
                                      .ceiling = priority_ceiling_,
                                      .by_uid = request.uid,
                                      .is_admin = request.admin,
                                      .at = wall_time(*clock_)};
  } else if (request.verb == "suspend" || request.verb == "resume") {
    auto args = control::decode_job_request(request.verb, request.args);
    if (!args.ok()) return done(ForwardOutcome::kError, args.error().message);
    command = rendezvous::SuspendJob{.client_id = request.client_id,
                                     .client_seq = request.client_seq,
                                     .job_id = args->job,
                                     .resume = request.verb == "resume",
                                     .by_uid = request.uid,
                                     .is_admin = request.admin,
                                     .at = wall_time(*clock_)};
  } else if (request.verb == "drain" || request.verb == "undrain") {
    auto args = control::decode_drain_request(request.verb, request.args);
    if (!args.ok()) return done(ForwardOutcome::kError, args.error().message);
    if (args->reason.size() > rendezvous::kMaxReasonBytes) {
      return done(
          ForwardOutcome::kError,
          "The reason is longer than " + std::to_string(rendezvous::kMaxReasonBytes) + " bytes.");
    }
    command = rendezvous::DrainNode{.client_id = request.client_id,
                                    .client_seq = request.client_seq,
                                    .node = args->node,
                                    .drained = request.verb == "drain",
                                    .reason = args->reason,
                                    .by_uid = request.uid,
                                    .is_admin = request.admin,
                                    .at = wall_time(*clock_)};
  } else {
    return done(ForwardOutcome::kError, "Unknown verb \"" + request.verb + "\".");
  }
  if (submitter) ++pending_submits_[*submitter];
  const rendezvous::JobTable* table = table_.get();
  consensus.propose(
      now, rendezvous::encode_command(command),
      [this, table, command, submitter, uid = request.uid, admin = request.admin,
       done](Result<std::string> applied) {
        if (submitter) {
          const auto pending = pending_submits_.find(*submitter);
          if (pending != pending_submits_.end() && --pending->second == 0) {
            pending_submits_.erase(pending);
          }
        }
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
        done(ForwardOutcome::kOk,
             job_reply(*table, result.job_id, result.duplicate, uid, admin, queue_info_));
      });
}

}  // namespace elastic::node
