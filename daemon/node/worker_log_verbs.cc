#include "daemon/node/worker_log_verbs.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "daemon/control/requests.h"
#include "daemon/rendezvous/job_spec.h"

namespace elastic::node {
namespace {

using json = nlohmann::json;

Status check_job(const std::string& job) {
  if (!is_job_id(job)) return Error{"\"" + job + "\" is not a job id."};
  return Ok{};
}

// The owner rule of the header comment; `what` ends "may read its logs".
Status check_reader(const JobSupervisor& supervisor, const std::string& job, LogCaller caller,
                    bool* denied) {
  if (caller.admin || caller.uid == 0) return Ok{};
  const std::optional<std::uint32_t> owner = supervisor.job_owner(job);
  if (owner == caller.uid) return Ok{};
  *denied = true;
  return Error{"Only the owner of job " + job + ", root or control.admin_group may read its logs" +
               (owner ? "." : " (no owner is recorded beside its logs on this node).")};
}

std::string round_words(std::optional<std::uint64_t> round) {
  return round ? " round " + std::to_string(*round) : "";
}

Result<std::string> serve_logs(const std::string& args_text, const JobSupervisor& supervisor,
                               const std::string& node, LogCaller caller, bool* denied) {
  auto args = control::decode_logs_request(args_text);
  if (!args.ok()) return args.error();
  const std::string& job = args->job;
  if (Status ok = check_job(job); !ok.ok()) return ok.error();
  const std::uint64_t rank = args->rank;
  if (rank > rendezvous::kMaxNodesPerJob * std::uint64_t{rendezvous::kMaxWorkersPerNode}) {
    return Error{"rank " + std::to_string(rank) + " is out of range."};
  }
  const WorkerLogs& logs = supervisor.logs();
  std::optional<std::uint64_t> round = args->round;
  if (!round) {  // the newest round with a file of this rank here
    for (const WorkerLogFile& file : logs.files(job)) {
      if (file.rank == rank) round = file.round;
    }
  }
  const std::string path =
      round ? logs.rank_path(job, *round, static_cast<std::uint32_t>(rank)) : std::string();
  const std::optional<FileInfo> info =
      round ? logs.host().stat(path, Follow::kYes) : std::optional<FileInfo>();
  if (!info || info->kind != FileInfo::Kind::kRegular) {
    return Error{"Rank " + std::to_string(rank) + " of job " + job + round_words(args->round) +
                 " has no log on " + node + (path.empty() ? "." : " (" + path + ").")};
  }
  if (Status ok = check_reader(supervisor, job, caller, denied); !ok.ok()) return ok.error();
  const std::uint64_t max_bytes = args->max_bytes;
  const std::uint64_t size = info->size;
  std::uint64_t offset = size > max_bytes ? size - max_bytes : 0;
  bool rotated = false;
  if (args->offset) {
    offset = *args->offset;
    if (offset > size) {  // the file was rotated (or truncated) since: start over
      offset = 0;
      rotated = true;
    }
  }
  Result<FileRead> read = logs.host().read_file(
      path, Follow::kYes, offset,
      static_cast<std::size_t>(std::min<std::uint64_t>(max_bytes, size - offset)));
  if (!read.ok()) return read.error();
  std::string data = std::move(read->bytes);
  json reply = {{"ok", true},
                {"node", node},
                {"job", job},
                {"rank", rank},
                {"round", *round},
                {"path", path},
                {"offset", offset + data.size()},
                {"size", size},
                {"rotated", rotated}};
  reply["data"] = std::move(data);
  return reply.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<std::string> serve_log_files(const std::string& args_text, const JobSupervisor& supervisor,
                                    const std::string& node, bool shared, LogCaller caller,
                                    bool* denied) {
  auto args = control::decode_log_files_request(args_text);
  if (!args.ok()) return args.error();
  const std::string& job = args->job;
  if (Status ok = check_job(job); !ok.ok()) return ok.error();
  std::vector<WorkerLogFile> files = supervisor.logs().files(job, args->round);
  if (!files.empty()) {
    if (Status ok = check_reader(supervisor, job, caller, denied); !ok.ok()) return ok.error();
  }
  const bool truncated = files.size() > kMaxListedFiles;
  if (truncated) files.resize(kMaxListedFiles);
  json listed = json::array();
  for (const WorkerLogFile& file : files) {
    listed.push_back({{"round", file.round},
                      {"rank", file.rank},
                      {"size", file.size},
                      {"modified_ms", file.modified_ms}});
  }
  json reply = {{"ok", true},       {"node", node},    {"job", job},
                {"shared", shared}, {"files", listed}, {"truncated", truncated}};
  return reply.dump();
}

}  // namespace

Result<std::string> worker_log_verb_node(const std::string& verb, const std::string& args) {
  if (verb == "log_files") {
    auto request = control::decode_log_files_request(args);
    if (!request.ok()) return request.error();
    return request->node;
  }
  auto request = control::decode_logs_request(args);
  if (!request.ok()) return request.error();
  return request->node;
}

Result<std::string> serve_worker_log_verb(const std::string& verb, const std::string& args,
                                          const JobSupervisor& supervisor, const std::string& node,
                                          bool shared, LogCaller caller, bool* denied) {
  *denied = false;
  if (verb == "logs") return serve_logs(args, supervisor, node, caller, denied);
  if (verb == "log_files") return serve_log_files(args, supervisor, node, shared, caller, denied);
  return Error{"Unknown node verb \"" + verb + "\"."};
}

}  // namespace elastic::node
