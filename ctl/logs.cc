#include "ctl/logs.h"

#include <charconv>

#include "ctl/common.h"

namespace elastic::ctl {
namespace {

// What one `elasticctl logs` shows (LogsVerb::run checks the combinations first).
struct LogsOptions {
  std::optional<std::uint32_t> rank;   // --rank: only this rank
  std::optional<std::uint64_t> round;  // --round: this round's files, from every member daemon
  bool all = false;                    // --all: every round's files, from every member daemon
  bool follow = false;                 // --follow (current round only)
  bool as_json = false;
};

// One rank's position in its current log file, and the tail of a line not yet ended.
struct RankCursor {
  std::optional<std::uint64_t> offset;  // nullopt: start at the last kLogChunk bytes
  std::string partial;
  std::string node;                    // whose file the offset is in: a rank can move
  std::optional<std::uint64_t> round;  // and each round has its own file
  // What the offset was asked for with (the job's rank map then): when the map moves on,
  // --follow finishes that file first.
  std::string asked_node;
  std::optional<std::uint64_t> asked_round;
};

// Where one rank's log file of one round is (a row of a daemon's log_files reply).
struct ListedLog {
  std::string node;
  std::uint64_t size = 0;
};

class LogReader {
 public:
  LogReader(std::string socket, std::string job, const LogsOptions& options)
      : socket_(std::move(socket)),
        job_(std::move(job)),
        only_rank_(options.rank),
        follow_(options.follow),
        as_json_(options.as_json),
        round_(options.round),
        all_(options.all),
        asker_(socket_, /*patient=*/options.follow) {}

  int run() {
    if (round_ || all_) return run_rounds();
    std::vector<json> replies;  // --json without --follow: one document at the end
    while (true) {
      const Answer status = asker_.ask({{"verb", "job"}, {"job", job_}});
      if (status.code != 0) return fail(status);
      const json& job = member(status.reply, "job");
      const bool terminal = is_terminal(str(job, "state"));
      const std::uint64_t world = world_of(job);
      // Which daemon runs each rank of the job's current (or last) round: its logs are there.
      rank_nodes_.clear();
      job_round_.reset();
      if (const auto ranks = job.find("ranks"); ranks != job.end() && ranks->is_array()) {
        for (const json& entry : *ranks) {
          const auto first = static_cast<std::uint32_t>(num(entry, "first_rank"));
          const auto slots = static_cast<std::uint32_t>(num(entry, "slots"));
          for (std::uint32_t r = first; r < first + slots && r < first + 4096; ++r) {
            rank_nodes_[r] = str(entry, "node");
          }
        }
        if (const auto round = job.find("round");
            round != job.end() && round->is_number_unsigned()) {
          job_round_ = round->get<std::uint64_t>();
        }
      }
      if (only_rank_ && world > 0 && *only_rank_ >= world && !follow_) {
        std::cerr << "elasticctl: job " << job_ << " has ranks 0.." << world - 1 << " (world "
                  << world << "), no rank " << *only_rank_ << "\n";
        return kExitRefused;
      }
      bool got_data = false;
      std::vector<std::uint32_t> ranks;
      if (only_rank_) {
        ranks.push_back(*only_rank_);
      } else {
        for (std::uint32_t r = 0; r < world; ++r) ranks.push_back(r);
      }
      if (ranks.empty() && (terminal || !follow_)) {
        // No current round (the job ended or waits for nodes): the logs of its last round may
        // still be there; ask rank after rank until one has none.
        bool missing = false;
        for (std::uint32_t r = 0; r < kMaxDiscoveredRanks && !missing; ++r) {
          const int code = read_rank(r, got_data, replies, &missing);
          if (code != 0) return code;
        }
        if (cursors_.empty() && !follow_ && !as_json_) {
          std::cerr << "elasticctl: job " << job_ << " has no worker logs yet (state "
                    << str(job, "state", "?") << ")\n";
          return 0;
        }
      }
      for (std::uint32_t rank : ranks) {
        const int code = read_rank(rank, got_data, replies, nullptr);
        if (code != 0) return code;
      }
      if (!follow_ || (terminal && !got_data)) break;
      if (!got_data) std::this_thread::sleep_for(kPollInterval);
    }
    // The job ended (or one pass was asked for): lines left without a newline are shown too.
    for (auto& [rank, cursor] : cursors_) {
      if (!cursor.partial.empty()) emit(rank, "\n", cursor);
    }
    if (as_json_ && !follow_) {
      std::cout << dump(json{{"ok", true}, {"job", job_}, {"logs", replies}}) << "\n";
    }
    std::cout.flush();
    return 0;
  }

 private:
  int fail(const Answer& answer) {
    std::cerr << "elasticctl: " << answer.error << "\n";
    return answer.code;
  }

  json logs_request(std::uint32_t rank, const std::string& node, std::optional<std::uint64_t> round,
                    std::uint64_t max_bytes) const {
    json request{{"verb", "logs"}, {"job", job_}, {"rank", rank}, {"max_bytes", max_bytes}};
    if (round) request["round"] = *round;
    if (!node.empty()) request["node"] = node;
    return request;
  }

  // --follow: the rank moved to another round (or node) since it was last read; the rest of
  // its old file (a traceback) is shown before the new one starts.
  void finish_old_file(std::uint32_t rank, RankCursor& cursor, bool& got_data,
                       const std::string& node, std::optional<std::uint64_t> round) {
    for (int chunk = 0; chunk < 64 && cursor.offset; ++chunk) {
      json request = logs_request(rank, cursor.asked_node, cursor.asked_round, kFollowChunk);
      request["offset"] = *cursor.offset;
      const Answer answer = asker_.ask(request);
      if (answer.code != 0 || flag(answer.reply, "rotated")) break;
      const std::string data = str(answer.reply, "data");
      if (data.empty()) break;
      got_data = true;
      if (as_json_) {
        std::cout << answer.reply.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
      } else {
        emit(rank, data, cursor);
      }
      cursor.offset = static_cast<std::uint64_t>(std::max<std::int64_t>(
          num(answer.reply, "offset", static_cast<std::int64_t>(*cursor.offset)), 0));
    }
    if (!cursor.partial.empty() && !as_json_) emit(rank, "\n", cursor);
    // The new file from its start (also when it does not exist yet).
    cursor.offset = 0;
    cursor.node = cursor.asked_node = node;
    cursor.round = cursor.asked_round = round;
  }

  // Reads what is new in one rank's log (everything new when following, in chunks).
  // With `missing`, any refusal (no such rank, no log) only sets *missing: ranks are being
  // discovered.
  int read_rank(std::uint32_t rank, bool& got_data, std::vector<json>& replies, bool* missing) {
    std::string node;
    std::optional<std::uint64_t> round;
    if (const auto known = rank_nodes_.find(rank); known != rank_nodes_.end()) {
      node = known->second;
      round = job_round_;
    }
    if (const auto known = cursors_.find(rank);
        follow_ && known != cursors_.end() && known->second.offset && round &&
        (known->second.asked_node != node || known->second.asked_round != round)) {
      finish_old_file(rank, known->second, got_data, node, round);
    }
    for (int chunk = 0; chunk < 64; ++chunk) {  // bounded: other ranks get their turn
      json request = logs_request(rank, node, round, follow_ ? kFollowChunk : kLogChunk);
      if (const auto known = cursors_.find(rank); known != cursors_.end()) {
        if (known->second.offset) request["offset"] = *known->second.offset;
      }
      const Answer answer = asker_.ask(request);
      if (missing != nullptr && answer.code == kExitRefused &&
          (answer.error.find("no log") != std::string::npos ||
           answer.error.find("rank") != std::string::npos)) {
        *missing = true;
        return 0;
      }
      // A round's file is made when its worker starts: until then the rank has none.
      if (answer.code == kExitRefused && (answer.error.find("no log yet") != std::string::npos ||
                                          answer.error.find("has no log") != std::string::npos)) {
        if (!follow_ && only_rank_) {
          std::cerr << "elasticctl: " << answer.error << "\n";
          return kExitRefused;
        }
        return 0;  // not started yet: all ranks show up once they write
      }
      if (answer.code != 0) return fail(answer);
      const json& reply = answer.reply;
      RankCursor& cursor = cursors_[rank];
      const std::string served_by = str(reply, "node");
      std::optional<std::uint64_t> served_round = round;  // a daemon before rounds says none
      if (const auto r = reply.find("round"); r != reply.end() && r->is_number_unsigned()) {
        served_round = r->get<std::uint64_t>();
      }
      if (!cursor.node.empty() && (served_by != cursor.node || served_round != cursor.round) &&
          cursor.offset) {
        // Another file than the one our offset is in (another node or round): start it over.
        cursor.node = served_by;
        cursor.round = served_round;
        cursor.offset = 0;
        if (!cursor.partial.empty() && !as_json_) emit(rank, "\n", cursor);
        continue;
      }
      cursor.node = served_by;
      cursor.round = served_round;
      cursor.asked_node = node;
      cursor.asked_round = round;
      if (as_json_) {
        if (follow_) {
          std::cout << reply.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
        } else {
          replies.push_back(reply);
        }
      }
      const std::string data = str(reply, "data");
      if (flag(reply, "rotated") && !cursor.partial.empty() && !as_json_) {
        // The rest of that line went to the rotated file: show what we have.
        emit(rank, "\n", cursor);
      }
      const std::uint64_t next = static_cast<std::uint64_t>(std::max<std::int64_t>(
          num(reply, "offset", static_cast<std::int64_t>(cursor.offset.value_or(0))), 0));
      const std::uint64_t size =
          static_cast<std::uint64_t>(std::max<std::int64_t>(num(reply, "size"), 0));
      cursor.offset = next;
      if (!data.empty()) {
        got_data = true;
        if (!as_json_) emit(rank, data, cursor);
      }
      if (!follow_ || data.empty() || next >= size) return 0;
    }
    return 0;
  }

  // Prints `data`: raw for one rank; otherwise whole lines prefixed "[rank N] ", keeping an
  // unfinished line until its newline arrives so lines of different ranks never mix.
  void emit(std::uint32_t rank, const std::string& data, RankCursor& cursor) {
    if (only_rank_) {
      std::cout << data;
      std::cout.flush();
      return;
    }
    emit_lines("[rank " + std::to_string(rank) + "] ", data, cursor.partial);
  }

  // Whole lines of `partial` + `data`, each after `prefix`; an unfinished one stays in partial.
  static void emit_lines(const std::string& prefix, const std::string& data, std::string& partial) {
    std::string text = partial + data;
    partial.clear();
    std::size_t start = 0;
    while (start < text.size()) {
      const auto newline = text.find('\n', start);
      if (newline == std::string::npos) {
        partial = text.substr(start);
        break;
      }
      std::cout << prefix << std::string_view(text).substr(start, newline - start) << "\n";
      start = newline + 1;
    }
    std::cout.flush();
  }

  // ---- --round R and --all: the files of every member daemon, whatever round they are of

  // Adds a log_files reply's files to `found` ((round, rank) -> where; the first node to list
  // a file serves it).
  void add_listed(const json& reply,
                  std::map<std::pair<std::uint64_t, std::uint32_t>, ListedLog>& found) const {
    const std::string node = str(reply, "node");
    const json& files = member(reply, "files");
    if (!files.is_array()) return;
    for (const json& file : files) {
      const auto rank = static_cast<std::uint32_t>(num(file, "rank", -1));
      if (only_rank_ && rank != *only_rank_) continue;
      const auto round = static_cast<std::uint64_t>(num(file, "round"));
      found.emplace(std::pair{round, rank},
                    ListedLog{.node = node, .size = static_cast<std::uint64_t>(num(file, "size"))});
    }
  }

  json log_files_request(const std::string& node) const {
    json request{{"verb", "log_files"}, {"job", job_}};
    if (round_) request["round"] = *round_;
    if (!node.empty()) request["node"] = node;
    return request;
  }

  int run_rounds() {
    const Answer status = asker_.ask({{"verb", "job"}, {"job", job_}});
    if (status.code != 0) return fail(status);
    std::map<std::pair<std::uint64_t, std::uint32_t>, ListedLog> found;
    std::vector<std::string> unanswered;  // "h2 (why)", for the warning line
    json unanswered_json = json::array();
    const auto note = [&](const std::string& node, std::string why) {
      if (why.ends_with('.')) why.pop_back();  // a sentence inside the warning's parentheses
      unanswered.push_back(node + " (" + why + ")");
      unanswered_json.push_back({{"node", node}, {"error", why}});
    };
    // The local daemon first: with spawner.log_root its list is every daemon's.
    const Answer local = asker_.ask(log_files_request(""));
    if (local.code != 0) return fail(local);
    add_listed(local.reply, found);
    if (!flag(local.reply, "shared")) {
      const Answer nodes = asker_.ask({{"verb", "nodes"}});
      if (nodes.code != 0) return fail(nodes);
      const std::string self = str(local.reply, "node");
      const json& members = member(nodes.reply, "members");
      for (const json& m : members.is_array() ? members : json::array()) {
        const std::string name = str(m, "name");
        if (name.empty() || name == self) continue;
        const std::string state = str(m, "state");
        if (state == "dead" || state == "left") {  // it would only time out
          note(name, state + ", not asked");
          continue;
        }
        const Answer listed = asker_.ask(log_files_request(name));
        if (listed.code == kExitNoPermission) return fail(listed);
        if (listed.code != 0) {
          note(name, listed.error);
          continue;
        }
        add_listed(listed.reply, found);
      }
    }
    std::vector<json> replies;
    for (const auto& [key, where] : found) {
      const int code = print_file(key.first, key.second, where.node, replies, note);
      if (code != 0) return code;
    }
    if (as_json_) {
      std::cout << dump(json{{"ok", true},
                             {"job", job_},
                             {"logs", replies},
                             {"unanswered", unanswered_json}})
                << "\n";
    }
    std::cout.flush();
    if (!unanswered.empty()) {
      std::cerr << "elasticctl: warning: no logs from ";
      for (std::size_t i = 0; i < unanswered.size(); ++i) {
        std::cerr << (i > 0 ? ", " : "") << unanswered[i];
      }
      std::cerr << "; what they hold is not shown\n";
    }
    if (found.empty() && !as_json_) {
      std::cerr << "elasticctl: job " << job_ << " has no worker logs"
                << (round_ ? " of round " + std::to_string(*round_) : std::string())
                << (only_rank_ ? " of rank " + std::to_string(*only_rank_) : std::string())
                << (unanswered.empty() ? "" : " on the nodes that answered") << "\n";
      return round_ ? kExitRefused : 0;
    }
    return 0;
  }

  // Prints one round's file of one rank whole, from the node that listed it.
  template <typename Note>
  int print_file(std::uint64_t round, std::uint32_t rank, const std::string& node,
                 std::vector<json>& replies, const Note& note) {
    const bool raw = round_ && only_rank_;
    const std::string prefix =
        all_ ? "[round " + std::to_string(round) + " rank " + std::to_string(rank) + "] "
             : "[rank " + std::to_string(rank) + "] ";
    std::string partial;
    std::uint64_t offset = 0;
    std::optional<std::uint64_t> end;  // the size when first read: a live file is not chased
    for (;;) {
      json request = logs_request(rank, node, round, kMaxListedChunk);
      request["offset"] = offset;
      const Answer answer = asker_.ask(request);
      if (answer.code == kExitNoPermission) return fail(answer);
      if (answer.code != 0) {
        note(node, answer.error);
        break;
      }
      if (as_json_) replies.push_back(answer.reply);
      const std::string data = str(answer.reply, "data");
      if (!end)
        end = static_cast<std::uint64_t>(std::max<std::int64_t>(num(answer.reply, "size"), 0));
      offset = static_cast<std::uint64_t>(std::max<std::int64_t>(
          num(answer.reply, "offset", static_cast<std::int64_t>(offset)), 0));
      if (!as_json_) {
        if (raw) {
          std::cout << data;
        } else {
          emit_lines(prefix, data, partial);
        }
      }
      if (data.empty() || offset >= *end || flag(answer.reply, "rotated")) break;
    }
    if (!partial.empty()) emit_lines(prefix, "\n", partial);
    std::cout.flush();
    return 0;
  }

  std::string socket_;
  std::string job_;
  std::optional<std::uint32_t> only_rank_;
  bool follow_;
  bool as_json_;
  std::optional<std::uint64_t> round_;  // --round
  bool all_;                            // --all
  PatientAsker asker_;
  std::map<std::uint32_t, RankCursor> cursors_;
  std::map<std::uint32_t, std::string> rank_nodes_;  // rank -> the daemon that runs it
  std::optional<std::uint64_t> job_round_;           // the round of that rank map
};

}  // namespace

void LogsVerb::add(CLI::App& app) {
  logs_ = app.add_subcommand(
      "logs",
      "Show a job's worker output: every rank of the current round, each line prefixed "
      "[rank N], or one rank raw; --round R or --all: that round's or every round's output "
      "wherever it ran (a member that does not answer is named in a warning, exit status "
      "unchanged)");
  logs_->add_option("job", job_, "The job id")->required();
  rank_opt_ = logs_->add_option("--rank", rank_, "Only this rank, unprefixed");
  logs_->add_flag("-f,--follow", follow_,
                  "Keep printing new output of the current round until the job ends");
  round_opt_ = logs_->add_option("--round", round_,
                                 "Only this round's output, every rank of it (wherever it ran)");
  logs_->add_flag("--all", all_,
                  "Every round's output, round then rank, each line prefixed "
                  "[round R rank N]");
  add_json_flag(logs_, as_json_);
}

bool LogsVerb::parsed() const { return logs_->parsed(); }

int LogsVerb::run(const std::string& socket) const {
  LogsOptions options;
  options.all = all_;
  options.follow = follow_;
  options.as_json = as_json_;
  if (rank_opt_->count() > 0) options.rank = rank_;
  if (round_opt_->count() > 0) {
    std::uint64_t round = 0;
    const char* end = round_.data() + round_.size();
    const auto parsed = std::from_chars(round_.data(), end, round);
    if (round_.empty() || parsed.ec != std::errc() || parsed.ptr != end) {
      std::cerr << "elasticctl: --round must be a round number (0, 1, 2, ...; elasticctl "
                   "status JOB shows the current one), not \""
                << round_ << "\"\n";
      return cfg::kExitUsage;
    }
    options.round = round;
  }
  if (options.round && options.all) {
    std::cerr << "elasticctl: logs takes --round R or --all, not both\n";
    return cfg::kExitUsage;
  }
  if (follow_ && (options.round || options.all)) {
    std::cerr << "elasticctl: --follow reads the current round; it does not combine with "
              << (options.all ? "--all" : "--round") << "\n";
    return cfg::kExitUsage;
  }
  return LogReader(socket, job_, options).run();
}

}  // namespace elastic::ctl
