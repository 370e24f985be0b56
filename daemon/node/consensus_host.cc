#include "daemon/node/consensus_host.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <set>
#include <variant>

#include "daemon/consensus/raft_codec.h"
#include "daemon/node/node.h"

namespace elastic::node {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Status make_dirs(const std::string& path) {
  std::string partial;
  for (std::size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      partial = path.substr(0, i);
      if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
        return Error{"Cannot create directory " + partial + ": " + std::strerror(errno) + "."};
      }
    }
  }
  return ok_status();
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out = "[";
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out + "]";
}

// What an operator does about a voter whose Raft files are damaged or gone.
std::string rebuild_advice(const std::string& dir) {
  const std::string marker = dir + "/" + ConsensusHost::kRebuildFile;
  return "To rebuild this voter from its peers (the other voters must have a leader): make " +
         marker + " an empty file (truncate -s 0 " + marker +
         ") and start elasticd again; it moves the Raft files aside into " + dir +
         "/before-rebuild-<time>/ and catches up from the leader. A single voter has no peers: "
         "restore " +
         dir + " from a backup.";
}

// Moves the Raft files of `dir` into a new before-rebuild-<time> directory beside them.
Result<std::string> move_raft_files_aside(const std::string& dir) {
  const std::string aside = dir + "/before-rebuild-" + std::to_string(::time(nullptr));
  if (::mkdir(aside.c_str(), 0700) != 0) {
    return Error{"Cannot create " + aside + ": " + std::strerror(errno) + "."};
  }
  for (const char* name : {consensus::RaftLog::kStateFile, consensus::RaftLog::kLogFile,
                           consensus::RaftLog::kSnapshotFile, consensus::RaftLog::kMarkFile}) {
    const std::string from = dir + "/" + name;
    if (exists(from) && ::rename(from.c_str(), (aside + "/" + name).c_str()) != 0) {
      return Error{"Cannot move " + from + " into " + aside + ": " + std::strerror(errno) + "."};
    }
  }
  return aside;
}

}  // namespace

consensus::NodeId voter_id(std::string_view name) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash == consensus::kNoNode ? 1 : hash;
}

std::string raft_dir(const config::DaemonConfig& config) {
  return config.consensus.data_dir.empty() ? config.node.state_dir + "/raft"
                                           : config.consensus.data_dir;
}

std::vector<std::string> effective_voters(const config::DaemonConfig& config,
                                          const std::string& self) {
  return config.consensus.voters.empty() ? std::vector<std::string>{self} : config.consensus.voters;
}

std::unique_ptr<ConsensusHost> ConsensusHost::open(const config::DaemonConfig& config,
                                                   const std::string& self,
                                                   std::uint64_t generation, StateMachine& machine,
                                                   Clock& clock, OpenFailure& failure) {
  const TimePoint now = clock.now();
  const std::vector<std::string> voters = effective_voters(config, self);
  std::vector<consensus::NodeId> ids;
  {
    std::map<consensus::NodeId, std::string> names;
    for (const std::string& name : voters) {
      const consensus::NodeId id = voter_id(name);
      if (!names.emplace(id, name).second) {
        failure = {config::kExitConfig, "consensus.voters: the names " + names[id] + " and " +
                                            name + " hash to the same Raft id; rename one."};
        return nullptr;
      }
      ids.push_back(id);
    }
  }
  const bool single_voter = ids.size() == 1 && ids.front() == voter_id(self);

  const std::string dir = raft_dir(config);
  if (auto made = make_dirs(dir); !made.ok()) {
    failure = {kExitCantCreate, made.error().message + " (consensus.data_dir)"};
    return nullptr;
  }
  bool has_state = exists(dir + "/" + consensus::RaftLog::kStateFile) ||
                   exists(dir + "/" + consensus::RaftLog::kLogFile);
  // A rebuild (kRebuildFile): an empty file is the operator's request; once this start has
  // moved the old files aside and bootstrapped afresh it says so, and later starts keep the
  // new state while the voter catches up.
  const std::string marker = dir + "/" + kRebuildFile;
  const bool rebuilding = exists(marker);
  if (rebuilding) {
    if (single_voter) {
      failure = {config::kExitConfig,
                 "consensus.data_dir: " + marker +
                     " asks to rebuild this voter from its peers, but it is the cluster's only "
                     "voter; restore " +
                     dir + " from a backup instead."};
      return nullptr;
    }
    struct stat st {};
    if (has_state && ::stat(marker.c_str(), &st) == 0 && st.st_size == 0) {
      auto aside = move_raft_files_aside(dir);
      if (!aside.ok()) {
        failure = {kExitCantCreate, aside.error().message + " (consensus.data_dir)"};
        return nullptr;
      }
      spdlog::warn("raft: rebuilding this voter from its peers: moved its Raft files to {}",
                   *aside);
      has_state = false;
    }
  }
  if (!has_state) {
    if (generation != 1 && !rebuilding) {
      failure = {config::kExitConfig,
                 "consensus.data_dir: " + dir + " holds no Raft state, but this node has run " +
                     "before (generation " + std::to_string(generation) +
                     "); a voter that lost its term and vote could elect a second leader. " +
                     rebuild_advice(dir)};
      return nullptr;
    }
    if (auto created = consensus::RaftLog::bootstrap(dir, ids); !created.ok()) {
      failure = {kExitCantCreate, created.error().message + " (consensus.data_dir)"};
      return nullptr;
    }
    spdlog::info("raft: bootstrapped {} with voters {}", dir, join_names(voters));
    if (rebuilding) {
      const int fd = ::open(marker.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
      const std::string note = "bootstrapped afresh; catching up from the leader\n";
      const bool noted =
          fd >= 0 && ::write(fd, note.data(), note.size()) == static_cast<ssize_t>(note.size()) &&
          ::fsync(fd) == 0;
      const int error = errno;
      if (fd >= 0) ::close(fd);
      if (!noted) {
        failure = {kExitCantCreate, "Cannot write " + marker + ": " + std::strerror(error) +
                                        ". (consensus.data_dir)"};
        return nullptr;
      }
    }
  }
  auto log = consensus::RaftLog::open(dir);
  if (!log.ok()) {
    failure = {kExitIoError, log.error().message + " This voter refuses to start. " +
                                 rebuild_advice(dir) + " (consensus.data_dir)"};
    return nullptr;
  }
  std::unique_ptr<consensus::RaftLog> disk = std::move(log.value());
  if (disk->repaired_bytes() > 0) {
    spdlog::warn("raft: cut {} torn bytes off the end of the log in {}", disk->repaired_bytes(),
                 dir);
  }
  if (disk->mark_was_missing()) {
    spdlog::warn(
        "raft: {}/{} was missing (a log from before marks); this start could not check "
        "the log for lost entries, later ones will",
        dir, consensus::RaftLog::kMarkFile);
  }
  if (rebuilding) {
    spdlog::warn(
        "raft: rebuilding this voter from its peers ({}): it grants no vote until a "
        "leader has reached it, and none in that leader's term",
        marker);
  }
  std::vector<consensus::NodeId> on_disk = disk->voters();
  std::vector<consensus::NodeId> configured = ids;
  std::sort(on_disk.begin(), on_disk.end());
  std::sort(configured.begin(), configured.end());
  if (on_disk != configured) {
    failure = {config::kExitConfig,
               "consensus.voters: " + join_names(voters) +
                   " is not the voter set the Raft state in " + dir +
                   " was bootstrapped with; every node must list the same voters."};
    return nullptr;
  }
  consensus::RaftConfig raft_config;
  raft_config.election_timeout = config.consensus.election_timeout;
  raft_config.heartbeat_interval = config.consensus.heartbeat_interval;
  consensus::Recovered recovered = disk->recovered();
  auto host = start(
      self, voters, raft_config,
      static_cast<std::uint64_t>(std::max(1, config.consensus.snapshot_every_entries)),
      std::move(recovered), std::move(disk), machine, clock.seed() ^ generation, now, failure);
  if (!host) {
    failure.message += " (consensus.data_dir " + dir + ")";
    return nullptr;
  }
  host->dir_ = dir;
  host->rebuilding_ = rebuilding;
  return host;
}

std::unique_ptr<ConsensusHost> ConsensusHost::start(
    const std::string& self, const std::vector<std::string>& voters,
    const consensus::RaftConfig& raft_config, std::uint64_t snapshot_every,
    consensus::Recovered recovered, std::unique_ptr<consensus::RaftStore> store,
    StateMachine& machine, std::uint64_t seed, TimePoint now, OpenFailure& failure) {
  std::unique_ptr<ConsensusHost> host(new ConsensusHost());
  host->self_ = self;
  host->self_id_ = voter_id(self);
  host->machine_ = &machine;
  host->store_ = std::move(store);
  std::vector<consensus::NodeId> ids;
  for (const std::string& name : voters) {
    const consensus::NodeId id = voter_id(name);
    if (!host->names_.emplace(id, name).second) {
      failure = {config::kExitConfig, "consensus.voters: the names " + host->names_[id] + " and " +
                                          name + " hash to the same Raft id; rename one."};
      return nullptr;
    }
    ids.push_back(id);
  }
  host->names_.emplace(host->self_id_, self);
  host->snapshot_every_ = std::max<std::uint64_t>(1, snapshot_every);
  if (recovered.snapshot) {
    // The state machine starts from the snapshot; Raft applies the entries after it.
    if (auto restored = machine.restore(recovered.snapshot->last_index, recovered.snapshot->data);
        !restored.ok()) {
      failure = {kExitIoError, "The Raft snapshot does not restore: " + restored.error().message};
      return nullptr;
    }
  }
  host->raft_ = std::make_unique<consensus::Raft>(host->self_id_, ids, raft_config,
                                                  std::move(recovered), seed, now);
  spdlog::info("raft: voter {} at term {} with {} log entries", self, host->raft_->term(),
               host->raft_->last_index());
  return host;
}

std::string ConsensusHost::name_of(consensus::NodeId id) const {
  const auto found = names_.find(id);
  return found == names_.end() ? std::string() : found->second;
}

std::string ConsensusHost::leader() const { return name_of(raft_->leader()); }

void ConsensusHost::learn_name(const std::string& name) { names_.emplace(voter_id(name), name); }

std::vector<std::string> ConsensusHost::voters() const {
  std::vector<std::string> names;
  for (const auto id : raft_->voters()) {
    const std::string name = name_of(id);
    names.push_back(name.empty() ? "#" + std::to_string(id) : name);
  }
  return names;
}

void ConsensusHost::change_voter(TimePoint now, bool add, const std::string& name,
                                 Completion done) {
  if (failed_) {
    done(Error{"This voter cannot write its Raft log."});
    return;
  }
  learn_name(name);
  consensus::Effects effects;
  const consensus::VoterChangeOutcome outcome = raft_->propose_voter_change(
      now,
      consensus::VoterChange{
          .kind = add ? consensus::VoterChange::Kind::kAdd : consensus::VoterChange::Kind::kRemove,
          .node = voter_id(name)},
      effects);
  if (!outcome.accepted) {
    done(Error{outcome.refusal});
    return;
  }
  spdlog::info("raft: proposed to {} voter {} at index {}", add ? "add" : "remove", name,
               outcome.index);
  pending_.emplace(outcome.index, std::make_pair(outcome.term, std::move(done)));
  carry_out(now, effects);
}

RaftStatus ConsensusHost::status() const {
  RaftStatus status;
  status.voter = is_voter();
  status.role = consensus::role_name(raft_->role());
  status.leader = leader();
  status.term = raft_->term();
  status.commit_index = raft_->commit_index();
  status.last_index = raft_->last_index();
  status.applied_index = raft_->last_applied();
  status.voters = voters();
  return status;
}

void ConsensusHost::tick(TimePoint now) {
  if (failed_) return;
  consensus::Effects effects;
  raft_->tick(now, effects);
  carry_out(now, effects);
}

void ConsensusHost::leader_unreachable(TimePoint now, const std::string& name) {
  if (failed_ || name.empty() || name != leader()) return;
  consensus::Effects effects;
  raft_->leader_unreachable(now, voter_id(name), effects);
  if (effects.leader_change) {
    spdlog::info("raft: leader {} is gone by this node's failure detection; electing now", name);
  }
  carry_out(now, effects);
}

void ConsensusHost::on_envelope(TimePoint now, const wire::Envelope& envelope) {
  if (failed_) return;
  auto message = consensus::decode_raft(envelope.type, envelope.body);
  // The envelope's sender was authenticated by the transport (CURVE); the body's ids must agree
  // with it, so one voter cannot speak for another.
  if (!message.ok() || message->to != self_id_ || message->from != voter_id(envelope.sender)) {
    ++dropped_;
    spdlog::debug(
        "raft: dropped a message from {}: {}", envelope.sender,
        message.ok() ? "ids do not match its sender or this voter" : message.error().message);
    return;
  }
  learn_name(envelope.sender);
  if (rebuilding_) {
    // A rebuilt voter forgot whom it voted for, in terms up to the current leader's at least:
    // it must not vote there again (two leaders in one term), nor help a pre-vote before it
    // has caught up.
    const auto* vote = std::get_if<consensus::VoteRequest>(&message->body);
    if (vote != nullptr && (rebuild_leader_term_ == 0 || vote->term <= rebuild_leader_term_)) {
      ++dropped_;
      spdlog::debug("raft: rebuilding: no vote for {} in term {}", envelope.sender, vote->term);
      return;
    }
  }
  consensus::Effects effects;
  raft_->on_message(now, *message, effects);
  carry_out(now, effects);
  if (rebuilding_) note_rebuild_progress();
}

void ConsensusHost::note_rebuild_progress() {
  if (rebuild_leader_term_ == 0) {
    const consensus::NodeId leader = raft_->leader();
    if (leader == consensus::kNoNode || leader == self_id_) return;
    rebuild_leader_term_ = raft_->term();
    spdlog::info(
        "raft: rebuilding: leader {} of term {} reached this voter; it catches up and "
        "votes again from term {}",
        name_of(leader), rebuild_leader_term_, rebuild_leader_term_ + 1);
    return;
  }
  if (raft_->term() <= rebuild_leader_term_) return;
  // A later term began: every vote this voter can be asked for now is in a term it never saw.
  if (Status removed = store_->remove_file(kRebuildFile); !removed.ok()) {
    spdlog::warn("raft: {}", removed.error().message);
    return;
  }
  rebuilding_ = false;
  spdlog::info("raft: rebuilt from its peers at term {}; this voter votes again", raft_->term());
}

void ConsensusHost::propose(TimePoint now, std::string command, Completion done) {
  if (failed_) {
    done(Error{"This voter cannot write its Raft log."});
    return;
  }
  consensus::Effects effects;
  const consensus::ProposeOutcome outcome = raft_->propose(now, std::move(command), effects);
  if (!outcome.accepted) {
    done(Error{not_leader(outcome.leader_hint)});
    return;
  }
  pending_.emplace(outcome.index, std::make_pair(outcome.term, std::move(done)));
  carry_out(now, effects);
}

std::string ConsensusHost::not_leader(consensus::NodeId hint) const {
  const std::string name = name_of(hint);
  return name.empty() ? "No leader is known yet; retry shortly."
                      : "Not the leader; the leader is " + name + ".";
}

void ConsensusHost::read(TimePoint now, ReadDone done) {
  if (failed_) {
    done(Error{"This voter cannot write its Raft log."});
    return;
  }
  consensus::Effects effects;
  consensus::ReadOutcome outcome = raft_->read_index(now, effects);
  if (!outcome.accepted) {
    done(Error{raft_->role() == consensus::Role::kLeader ? std::move(outcome.refusal)
                                                         : not_leader(outcome.leader_hint)});
    return;
  }
  unconfirmed_reads_.emplace(outcome.id, std::move(done));
  carry_out(now, effects);
}

void ConsensusHost::answer_applied_reads() {
  // Completions may start new reads: take each out before calling it.
  while (!confirmed_reads_.empty() && confirmed_reads_.begin()->first <= raft_->last_applied()) {
    ReadDone done = std::move(confirmed_reads_.begin()->second);
    confirmed_reads_.erase(confirmed_reads_.begin());
    done(ok_status());
  }
}

void ConsensusHost::fail_all_waiting() {
  const Error error{"This voter cannot write its Raft log."};
  for (auto& [index, waiting] : std::exchange(pending_, {})) waiting.second(error);
  for (auto& [id, done] : std::exchange(unconfirmed_reads_, {})) done(error);
  for (auto& [index, done] : std::exchange(confirmed_reads_, {})) done(error);
}

void ConsensusHost::carry_out(TimePoint now, consensus::Effects& effects) {
  (void)now;
  if (!effects.persist.empty()) {
    const Status persisted = store_->persist(effects.persist);
    if (!persisted.ok()) {
      // Nothing of this step may leave the node: a vote or ack must never outrun the disk.
      spdlog::critical("raft: {}; this voter stops (it can no longer promise durability)",
                       persisted.error().message);
      failed_ = true;
      fail_all_waiting();
      return;
    }
  }
  for (const consensus::Message& message : effects.sends) {
    const std::string to = name_of(message.to);
    if (to.empty()) continue;
    wire::Envelope envelope;
    envelope.type = consensus::raft_message_type(message.body);
    envelope.body = consensus::encode_raft(message);
    sends_.push_back(Outgoing{to, std::move(envelope)});
  }
  if (effects.restore) {
    // A snapshot from the leader replaces everything applied so far.
    if (auto restored = machine_->restore(effects.restore->last_index, effects.restore->data);
        !restored.ok()) {
      spdlog::critical("raft: the leader's snapshot at index {} does not restore: {}",
                       effects.restore->last_index, restored.error().message);
      std::abort();  // the leader's committed state is unreadable: a broken invariant
    }
    spdlog::info("raft: state restored from the leader's snapshot at index {}",
                 effects.restore->last_index);
  }
  for (const consensus::Entry& entry : effects.apply) {
    std::string result;
    if (entry.type == consensus::EntryType::kCommand)
      result = machine_->apply(entry.index, entry.data);
    const auto waiting = pending_.find(entry.index);
    if (waiting == pending_.end()) continue;
    auto [term, done] = std::move(waiting->second);
    pending_.erase(waiting);
    if (term == entry.term) {
      done(std::move(result));
    } else {
      done(Error{"The leader changed before the request committed; retry."});
    }
  }
  if (!effects.apply.empty() &&
      raft_->last_applied() - raft_->snapshot_index() >= snapshot_every_) {
    consensus::Effects compaction;
    const Status compacted =
        raft_->compact(raft_->last_applied(), machine_->snapshot(), compaction);
    if (compacted.ok() && !compaction.persist.empty()) {
      if (const Status written = store_->persist(compaction.persist); !written.ok()) {
        spdlog::critical("raft: {}; this voter stops", written.error().message);
        failed_ = true;
        fail_all_waiting();
        return;
      }
      spdlog::info("raft: compacted the log into a snapshot at index {}", raft_->snapshot_index());
    } else if (!compacted.ok()) {
      spdlog::warn("raft: no snapshot: {}", compacted.error().message);
    }
  }
  if (effects.leader_change) {
    const std::string leader = name_of(effects.leader_change->leader);
    spdlog::info("raft: term {} leader {}", effects.leader_change->term,
                 leader.empty() ? "unknown" : leader);
    if (effects.leader_change->leader != self_id_) {
      // Entries of a deposed leader may still commit under the next one, or be overwritten;
      // the proposer finds out by retrying (deduplicated by the state machine).
      for (auto& [index, waiting] : pending_) {
        waiting.second(Error{"Leadership moved before the request committed; retry."});
      }
      pending_.clear();
    }
  }
  for (const consensus::ReadState& ready : effects.reads_ready) {
    const auto waiting = unconfirmed_reads_.find(ready.id);
    if (waiting == unconfirmed_reads_.end()) continue;
    confirmed_reads_.emplace(ready.index, std::move(waiting->second));
    unconfirmed_reads_.erase(waiting);
  }
  for (const consensus::ReadId id : effects.reads_failed) {
    const auto waiting = unconfirmed_reads_.find(id);
    if (waiting == unconfirmed_reads_.end()) continue;
    ReadDone done = std::move(waiting->second);
    unconfirmed_reads_.erase(waiting);
    done(Error{"Leadership was lost before the read was confirmed; retry."});
  }
  answer_applied_reads();
}

}  // namespace elastic::node
