// leader_bench: the Raft leader's own work in a large cluster (issue 18's leader CPU number).
//
// One leader, as elasticd runs it: the production RoundLeader (node/round_leader.h) on a
// single-voter ConsensusHost whose state machine is the production JobService (job table), with
// the shipped configuration. Around it a synthetic cluster of --nodes daemons that send the
// leader what real members send (node_info at start and on return, round_ack for every
// RoundStart: live at once for a member that was in the job's previous round, after
// --joiner-ready for a joiner; peer_lost from three ring watchers --detect after a silent
// crash; a lease request every lease/4 from every member of an active round; rank 0's progress
// report once a second per job) and a membership view that changes as SWIM would make it
// (suspect --suspect-after the crash, dead --dead-after, back with a new generation
// --return-after). The member list is built as NodeCore::leader_members() builds it (a copy,
// sorted by name, after a change or once a second), and that is counted.
//
// Phases: --jobs jobs of --job-nodes nodes (min --min-nodes) are submitted and run; then for
// --seconds simulated seconds one plain host of a running job is lost every
// --loss-every seconds (a job has at most one loss open). Measured over that window, on the
// process's CPU clock (the bench runs on one thread): every call into the leader (lead, reports,
// lease requests, ticks, Raft ticks and the proposals they apply) -- "leader CPU" is that time over
// the window's simulated time. Also per loss: peer_lost -> the shrink round committed, and commit
// -> every member acknowledged (simulated ms; the bench's members answer in 1 ms); and per return:
// the node in a committed round again (of whichever job the scheduler lets grow). A loss whose
// shrink never commits ends the run with "verdict: FAILED". Not a test (STYLE.md 12).
//
// Usage: leader_bench [--nodes 10000] [--jobs 100] [--job-nodes 100] [--min-nodes 90]
//                     [--seconds 60] [--loss-every 1] [--return-after 20] [--seed 1]
//                     [--no-leases] [--verify-skips]
// --verify-skips plans the jobs a pass finds settled anyway and counts those whose plan was
// not "nothing to do" (RoundLeader::set_verify_skips); the CPU figures then include them.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "bench/stats.h"
#include "daemon/config/config.h"
#include "daemon/core/clock.h"
#include "daemon/node/consensus_host.h"
#include "daemon/node/job_service.h"
#include "daemon/node/round_codec.h"
#include "daemon/node/round_leader.h"
#include "daemon/node/round_report.h"
#include "daemon/rendezvous/job_codec.h"
#include "daemon/rendezvous/job_table.h"
#include "daemon/rendezvous/lease.h"

namespace {

using namespace std::chrono_literals;
using elastic::Duration;
using elastic::TimePoint;
using elastic::bench::percentile;
namespace node = elastic::node;
namespace rdv = elastic::rendezvous;
namespace membership = elastic::membership;

struct Options {
  std::size_t nodes = 10000;
  std::uint32_t jobs = 100;
  std::uint32_t job_nodes = 100;
  std::uint32_t min_nodes = 90;
  double seconds = 60;
  double loss_every = 1;
  double return_after = 20;
  std::uint64_t seed = 1;
  bool leases = true;
  bool verify_skips = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "leader_bench: %s\nusage: leader_bench [--nodes N] [--jobs J] [--job-nodes K] "
               "[--min-nodes M] [--seconds S] [--loss-every S] [--return-after S] [--seed S] "
               "[--no-leases] [--verify-skips]\n",
               why.c_str());
  std::exit(64);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-leases") {
      o.leases = false;
      continue;
    }
    if (flag == "--verify-skips") {
      o.verify_skips = true;
      continue;
    }
    if (i + 1 >= argc) usage("missing value after " + flag);
    const char* value = argv[++i];
    if (flag == "--nodes") {
      o.nodes = std::strtoull(value, nullptr, 10);
    } else if (flag == "--jobs") {
      o.jobs = static_cast<std::uint32_t>(std::strtoul(value, nullptr, 10));
    } else if (flag == "--job-nodes") {
      o.job_nodes = static_cast<std::uint32_t>(std::strtoul(value, nullptr, 10));
    } else if (flag == "--min-nodes") {
      o.min_nodes = static_cast<std::uint32_t>(std::strtoul(value, nullptr, 10));
    } else if (flag == "--seconds") {
      o.seconds = std::strtod(value, nullptr);
    } else if (flag == "--loss-every") {
      o.loss_every = std::strtod(value, nullptr);
    } else if (flag == "--return-after") {
      o.return_after = std::strtod(value, nullptr);
    } else if (flag == "--seed") {
      o.seed = std::strtoull(value, nullptr, 10);
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (o.jobs < 1 || o.job_nodes < 4) usage("--jobs must be >= 1 and --job-nodes >= 4");
  if (static_cast<std::size_t>(o.jobs) * o.job_nodes > o.nodes) {
    usage("--jobs x --job-nodes must fit in --nodes");
  }
  if (o.min_nodes < 1 || o.min_nodes > o.job_nodes) usage("--min-nodes must be 1..--job-nodes");
  if (o.seconds <= 0 || o.loss_every <= 0 || o.return_after <= 0) {
    usage("--seconds, --loss-every and --return-after must be > 0");
  }
  return o;
}

Duration seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

// Raft's durable state nowhere (the bench measures the leader's CPU, not a disk); it keeps a
// digest (FNV-1a) of every entry appended, so two builds can be shown to decide the same.
class NoStore final : public elastic::consensus::RaftStore {
 public:
  explicit NoStore(std::uint64_t* digest) : digest_(digest) {}
  elastic::Status persist(const elastic::consensus::Persist& persist) override {
    for (const auto& entry : persist.append) {
      for (const char c : entry.data) {
        *digest_ = (*digest_ ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
      }
    }
    return elastic::ok_status();
  }

 private:
  std::uint64_t* digest_;
};

// Where the leader's CPU goes, in seconds, while `measuring`.
struct Cpu {
  bool measuring = false;
  double lead = 0, reports = 0, leases = 0, ticks = 0, members = 0;
  std::uint64_t lead_passes = 0, report_count = 0, lease_count = 0;
  double total() const { return lead + reports + leases + ticks + members; }
};

class Cluster {
 public:
  explicit Cluster(const Options& o)
      : o_(o),
        clock_(TimePoint(1h), 1'790'000'000'000, o.seed),
        config_(shipped()),
        jobs_(clock_),
        leader_("leader", 1, config_, clock_),
        rng_(o.seed) {
    elastic::node::OpenFailure failure;
    elastic::consensus::RaftConfig raft;
    raft.election_timeout = config_.get().consensus.election_timeout;
    raft.heartbeat_interval = config_.get().consensus.heartbeat_interval;
    consensus_ = node::ConsensusHost::start(
        "leader", {"leader"}, raft,
        static_cast<std::uint64_t>(std::max(1, config_.get().consensus.snapshot_every_entries)),
        elastic::consensus::Recovered{}, std::make_unique<NoStore>(&digest_), jobs_, o.seed, now(),
        failure);
    if (!consensus_) usage("the consensus host did not start: " + failure.message);
    leader_.set_verify_skips(o.verify_skips);
    members_.push_back(view("leader", 1));
    for (std::size_t i = 0; i < o.nodes; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "n%05zu", i);
      names_.push_back(name);
      index_[name] = i;
      members_.push_back(view(name, 1));
      generation_.push_back(1);
    }
  }

  TimePoint now() const { return clock_.now(); }
  Cpu& cpu() { return cpu_; }
  const node::RoundLeader& leader() const { return leader_; }
  std::uint64_t digest() const { return digest_; }
  const node::JobService& jobs() const { return jobs_; }

  // Runs events and the leader until `until`.
  void run_until(TimePoint until) {
    while (true) {
      TimePoint next = std::min(consensus_->next_deadline(), leader_.next_deadline());
      if (!events_.empty()) next = std::min(next, events_.top().at);
      next = std::max(next, now());
      if (next > until) break;
      clock_.set(next);
      while (!events_.empty() && events_.top().at <= now()) {
        auto action = events_.top().action;
        events_.pop();
        action();
      }
      step();
    }
    clock_.set(until);
  }

  void submit_jobs() {
    for (std::uint32_t j = 0; j < o_.jobs; ++j) {
      rdv::SubmitJob submit;
      submit.client_id = "bench";
      submit.client_seq = j + 1;
      submit.spec.name = "job" + std::to_string(j);
      submit.spec.command = {"/bin/true"};
      submit.spec.min_nodes = o_.min_nodes;
      submit.spec.max_nodes = o_.job_nodes;
      submit.spec.workers_per_node = 1;
      submit.spec.user = "root";
      submit.submitted_at = rdv::WallTime(std::chrono::milliseconds(clock_.wall_ms()));
      timed(cpu_.ticks, [&] {
        consensus_->propose(now(), rdv::encode_command(submit), [](auto) {});
      });
    }
  }

  void start_nodes() {
    for (std::size_t i = 0; i < o_.nodes; ++i) {
      at(now() + 1ms, [this, i] { node_info(i); });
    }
  }

  // Every node of every job's round holds workers: the leader's table says so.
  bool all_running() const {
    std::size_t running = 0;
    for (const auto& [id, job] : jobs_.table().jobs()) {
      if (job.state == rdv::JobState::kRunning && job.ranks.size() == o_.job_nodes) ++running;
    }
    return running == o_.jobs;
  }

  // A silent crash of a plain host of a running job that has no loss open, or false.
  bool lose_one() {
    std::vector<const rdv::JobRecord*> candidates;
    for (const auto& [id, job] : jobs_.table().jobs()) {
      if (job.state == rdv::JobState::kRunning && job.ranks.size() == o_.job_nodes &&
          !open_loss_.contains(id)) {
        candidates.push_back(&job);
      }
    }
    if (candidates.empty()) return false;
    const rdv::JobRecord& job = *candidates[rng_() % candidates.size()];
    const auto& victim = job.ranks[rng_() % job.ranks.size()];
    const std::size_t i = index_.at(victim.node);
    const std::uint64_t generation = generation_[i];
    dead_.insert(i);
    open_loss_[job.id] = Loss{.node = i, .round = job.round, .killed = now()};
    // The job tier: the victim's three ring watchers declare it and report (first hand).
    std::vector<std::size_t> watchers;
    for (const auto& member : job.ranks) {
      if (member.node != victim.node && watchers.size() < 3) watchers.push_back(index_.at(member.node));
    }
    const std::string job_id = job.id;
    const std::uint64_t round = job.round;
    at(now() + 850ms, [this, watchers, job_id, round, i, generation] {
      open_loss_[job_id].reported = now();
      for (const std::size_t w : watchers) {
        node::RoundReport report = node::round_report(node::ReportKind::kPeerLost, job_id, round);
        report.peer = names_[i];
        report.peer_generation = generation;
        report.reason = "silent";
        report.live = true;
        report.last_heard_ms = clock_.wall_ms() - 850;
        send_report(w, report);
      }
    });
    // Membership, as SWIM would change it: suspect, dead, and later back as a new instance.
    at(now() + 1500ms, [this, i, generation] { set_state(i, generation, membership::MemberState::kSuspect); });
    at(now() + 6s, [this, i, generation] { set_state(i, generation, membership::MemberState::kDead); });
    at(now() + seconds(o_.return_after), [this, i] {
      ++generation_[i];
      dead_.erase(i);
      members_[i + 1] = view(names_[i], generation_[i]);
      members_changed_ = true;
      returned_at_[names_[i]] = now();
      node_info(i);
    });
    ++losses_;
    return true;
  }

  struct Loss {
    std::size_t node = 0;
    std::uint64_t round = 0;
    TimePoint killed{}, reported{};
  };

  // Per loss: peer_lost reported -> shrink committed; commit -> every member acknowledged. Per
  // return: the node back -> in a round committed.
  std::vector<double> report_to_commit_ms, commit_to_acked_ms, return_to_grow_ms;
  std::uint64_t losses_ = 0;
  std::uint64_t rounds_committed_ = 0;
  std::size_t round_starts_ = 0;
  std::size_t round_start_bytes_ = 0;

  // Called after every step: finds committed rounds of jobs with an open loss.
  void track_rounds() {
    for (auto it = open_loss_.begin(); it != open_loss_.end();) {
      const rdv::JobRecord* job = jobs_.table().job(it->first);
      if (job == nullptr) {
        it = open_loss_.erase(it);
        continue;
      }
      Loss& loss = it->second;
      if (job->round > loss.round && loss.reported != TimePoint{}) {
        if (!committed_at_.contains(it->first)) {
          committed_at_[it->first] = {job->round, now()};
          report_to_commit_ms.push_back(elastic::to_ms(now() - loss.reported));
        }
        if (job->state == rdv::JobState::kRunning) {
          commit_to_acked_ms.push_back(elastic::to_ms(now() - committed_at_[it->first].second));
          committed_at_.erase(it->first);
          it = open_loss_.erase(it);
          continue;
        }
      }
      ++it;
    }
    // A returned node in some job's round again (the scheduler gives it to whichever job it
    // lets grow first): looked for whenever the table's jobs change.
    if (!returned_at_.empty() && jobs_.table().non_history_index() != scanned_index_) {
      scanned_index_ = jobs_.table().non_history_index();
      std::set<std::pair<std::string, std::uint64_t>> placed;
      for (const auto& [id, job] : jobs_.table().jobs()) {
        for (const auto& r : job.ranks) placed.emplace(r.node, r.generation);
      }
      for (auto it = returned_at_.begin(); it != returned_at_.end();) {
        if (placed.contains({it->first, generation_[index_.at(it->first)]})) {
          return_to_grow_ms.push_back(elastic::to_ms(now() - it->second));
          it = returned_at_.erase(it);
          continue;
        }
        ++it;
      }
    }
  }
  std::size_t open_losses() const { return open_loss_.size(); }
  const rdv::JobTable& table() const { return jobs_.table(); }

 private:
  struct Event {
    TimePoint at;
    std::uint64_t order;
    std::function<void()> action;
    bool operator>(const Event& other) const {
      return at != other.at ? at > other.at : order > other.order;
    }
  };

  static elastic::config::DaemonConfig shipped() {
    elastic::config::DaemonConfig config;
    config.node.name = "leader";
    return config;
  }

  membership::MemberView view(const std::string& name, std::uint64_t generation) const {
    membership::MemberView v;
    v.name = name;
    v.generation = generation;
    v.state = membership::MemberState::kAlive;
    v.address = "tcp://" + name + ":7946";
    v.last_heard = now();
    v.state_since = now();
    return v;
  }

  void at(TimePoint when, std::function<void()> action) {
    events_.push(Event{when, next_order_++, std::move(action)});
  }

  template <typename F>
  void timed(double& bucket, F&& f) {
    if (!cpu_.measuring) {
      f();
      return;
    }
    const double start = elastic::bench::cpu_seconds();
    f();
    bucket += elastic::bench::cpu_seconds() - start;
  }

  void set_state(std::size_t i, std::uint64_t generation, membership::MemberState state) {
    if (generation_[i] != generation) return;  // it came back meanwhile
    members_[i + 1].state = state;
    members_[i + 1].state_since = now();
    members_changed_ = true;
  }

  void node_info(std::size_t i) {
    node::RoundReport report = node::round_report(node::ReportKind::kNodeInfo, "", 0);
    report.slots = 1;
    send_report(i, report);
  }

  void send_report(std::size_t i, const node::RoundReport& report) {
    if (dead_.contains(i)) return;
    elastic::wire::Envelope envelope;
    envelope.type = elastic::wire::MsgType::kRoundReport;
    envelope.body = node::encode_round_report(report);
    envelope.sender = names_[i];
    envelope.sender_address = members_[i + 1].address;
    envelope.generation = generation_[i];
    timed(cpu_.reports, [&] { leader_.on_report(now(), envelope); });
    if (cpu_.measuring) ++cpu_.report_count;
  }

  void lease_request(std::size_t i, std::uint64_t generation) {
    if (generation_[i] != generation || dead_.contains(i)) return;
    if (!leased_.contains(i)) return;
    rdv::LeaseRequest request{.node = names_[i],
                              .generation = generation,
                              .request = ++lease_seq_[i],
                              .known_term = consensus_->term()};
    elastic::wire::Envelope envelope;
    envelope.type = elastic::wire::MsgType::kLeaseRequest;
    envelope.body = rdv::encode_lease(request);
    envelope.sender = names_[i];
    envelope.sender_address = members_[i + 1].address;
    envelope.generation = generation;
    timed(cpu_.leases, [&] { leader_.on_lease_request(now(), envelope); });
    if (cpu_.measuring) ++cpu_.lease_count;
    const Duration every = config_.get().rendezvous.lease_duration / rdv::kRenewalsPerLease;
    at(now() + every, [this, i, generation] { lease_request(i, generation); });
  }

  void step() {
    timed(cpu_.ticks, [&] { consensus_->tick(now()); });
    const bool leading = consensus_->is_leader();
    if (leader_.lead_due(now(), leading)) {
      // As NodeCore::leader_members(): the list again after a change or a second, copied and
      // sorted as Membership::members() builds it.
      if (members_changed_ || now() >= members_built_ + 1s) {
        timed(cpu_.members, [&] {
          list_ = members_;
          std::sort(list_.begin(), list_.end(),
                    [](const auto& a, const auto& b) { return a.name < b.name; });
        });
        members_changed_ = false;
        members_built_ = now();
      }
      timed(cpu_.lead, [&] { leader_.lead(now(), leading, jobs_.table(), list_, consensus_.get()); });
      if (cpu_.measuring) ++cpu_.lead_passes;
    }
    timed(cpu_.ticks, [&] { leader_.tick(now()); });
    (void)consensus_->take_sends();
    for (node::RoundSend& send : leader_.take_sends()) {
      if (send.envelope.type != elastic::wire::MsgType::kRoundStart) continue;
      ++round_starts_;
      round_start_bytes_ += send.envelope.body.size();
      // Either form (a delta resolves against the member's round): the daemons here keep no
      // round, so membership is read from the leader's table, which holds the same round.
      auto start = node::peek_round_start(send.envelope.body);
      if (!start.ok()) continue;
      const auto found = index_.find(send.to);
      if (found == index_.end()) continue;
      const std::size_t i = found->second;
      if (!rdv::is_active_round_state(start->state)) continue;
      const rdv::JobRecord* record = jobs_.table().job(start->job);
      if (record == nullptr || record->round != start->round) continue;
      const bool member = std::any_of(
          record->ranks.begin(), record->ranks.end(),
          [&](const auto& r) { return r.node == send.to && r.generation == generation_[i]; });
      if (!member) continue;
      const std::string job = start->job;
      const std::uint64_t round = start->round;
      // A member answers every start of its round at once (round_member.h).
      send_report(i, node::round_report(node::ReportKind::kRoundReceived, job, round));
      // A member that ran the job's previous round re-forms in place (1 ms); a joiner starts
      // its workers first.
      auto& ran = ran_round_[{job, i}];
      const bool survivor = ran.first == generation_[i] && ran.second + 1 >= round && ran.second > 0;
      const Duration delay = survivor ? Duration(1ms) : Duration(2s);
      const std::uint64_t generation = generation_[i];
      at(now() + delay, [this, i, generation, job, round] {
        if (generation_[i] != generation) return;
        ran_round_[{job, i}] = {generation, round};
        node::RoundReport ack = node::round_report(node::ReportKind::kRoundAck, job, round);
        ack.live = true;
        send_report(i, ack);
        if (o_.leases && leased_.insert(i).second) lease_request(i, generation);
        if (!progress_.contains(job) && start_rank0(job, i)) progress_.insert(job);
      });
    }
    track_rounds();
  }

  // Rank 0 of `job` reports progress once a second (the incident log and throughput window).
  bool start_rank0(const std::string& job, std::size_t i) {
    const rdv::JobRecord* record = jobs_.table().job(job);
    if (record == nullptr || record->ranks.empty() || record->ranks.front().node != names_[i]) {
      return false;
    }
    progress(job, 1);
    return true;
  }
  void progress(const std::string& job, std::int64_t step) {
    const rdv::JobRecord* record = jobs_.table().job(job);
    if (record != nullptr && !record->ranks.empty()) {
      const std::size_t i = index_.at(record->ranks.front().node);
      node::RoundReport report = node::round_report(node::ReportKind::kProgress, job, record->round);
      report.event = "step";
      report.step = step;
      report.rank = 0;
      report.samples = step * 1024;
      report.loss = 1.0 / static_cast<double>(step);
      send_report(i, report);
    }
    at(now() + 1s, [this, job, step] { progress(job, step + 10); });
  }

  Options o_;
  elastic::ManualClock clock_;
  elastic::config::Current config_;
  node::JobService jobs_;
  node::RoundLeader leader_;
  std::unique_ptr<node::ConsensusHost> consensus_;
  std::mt19937_64 rng_;
  std::vector<std::string> names_;
  std::map<std::string, std::size_t> index_;
  std::vector<std::uint64_t> generation_;
  std::vector<membership::MemberView> members_;  // [0] is the leader
  std::vector<membership::MemberView> list_;     // what the leader's passes get
  bool members_changed_ = true;
  TimePoint members_built_{};
  std::set<std::size_t> dead_, leased_;
  std::map<std::size_t, std::uint64_t> lease_seq_;
  std::map<std::pair<std::string, std::size_t>, std::pair<std::uint64_t, std::uint64_t>> ran_round_;
  std::set<std::string> progress_;
  std::map<std::string, Loss> open_loss_;
  std::map<std::string, std::pair<std::uint64_t, TimePoint>> committed_at_;
  std::map<std::string, TimePoint> returned_at_;  // returned nodes not in a round yet
  elastic::rendezvous::Index scanned_index_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t next_order_ = 0;
  Cpu cpu_;
  std::uint64_t digest_ = 0xcbf29ce484222325ULL;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  const auto wall_start = std::chrono::steady_clock::now();
  Cluster cluster(o);
  cluster.run_until(cluster.now() + 3s);  // the election
  cluster.submit_jobs();
  cluster.start_nodes();
  const TimePoint setup_deadline = cluster.now() + 300s;
  while (!cluster.all_running()) {
    if (cluster.now() >= setup_deadline) {
      std::printf("verdict: FAILED: the %u jobs were not all running after 300 simulated s\n",
                  o.jobs);
      return 1;
    }
    cluster.run_until(cluster.now() + 100ms);
  }
  cluster.run_until(cluster.now() + 5s);  // settle
  std::printf("setup: %zu nodes, %u jobs of %u nodes running (%.1f s wall)\n", o.nodes, o.jobs,
              o.job_nodes, elastic::bench::ms_since(wall_start) / 1000);

  const TimePoint start = cluster.now();
  const TimePoint end = start + seconds(o.seconds);
  cluster.cpu().measuring = true;
  TimePoint next_loss = start;
  while (cluster.now() < end) {
    if (cluster.now() >= next_loss) {
      (void)cluster.lose_one();
      next_loss += seconds(o.loss_every);
    }
    cluster.run_until(std::min(next_loss, end));
  }
  cluster.cpu().measuring = false;
  const Cpu& cpu = cluster.cpu();
  const double window = o.seconds;
  std::printf("window: %.0f simulated s, %llu losses, seed %llu, leases %s\n", window,
              static_cast<unsigned long long>(cluster.losses_),
              static_cast<unsigned long long>(o.seed), o.leases ? "on" : "off");
  std::printf("| leader CPU | %% of one core |\n|---|---|\n");
  auto row = [&](const char* what, double s) {
    std::printf("| %s | %.1f%% |\n", what, 100.0 * s / window);
  };
  row("total", cpu.total());
  row("lead() passes", cpu.lead);
  row("member lists (NodeCore::leader_members)", cpu.members);
  row("reports", cpu.reports);
  row("lease requests", cpu.leases);
  row("Raft and incident ticks", cpu.ticks);
  std::printf("lead() passes: %llu (%.2f ms each); reports: %llu; lease requests: %llu\n",
              static_cast<unsigned long long>(cpu.lead_passes),
              cpu.lead_passes ? 1000.0 * cpu.lead / static_cast<double>(cpu.lead_passes) : 0.0,
              static_cast<unsigned long long>(cpu.report_count),
              static_cast<unsigned long long>(cpu.lease_count));
  auto stats = [](const char* what, const std::vector<double>& v) {
    std::printf("%s: n=%zu p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", what, v.size(),
                percentile(v, 50), percentile(v, 99), v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()));
  };
  stats("peer_lost -> shrink committed", cluster.report_to_commit_ms);
  stats("shrink committed -> every member acknowledged", cluster.commit_to_acked_ms);
  stats("node back -> in a committed round", cluster.return_to_grow_ms);
  std::printf(
      "RoundStarts sent: %zu (%.1f MiB); settled jobs skipped (per pass): %llu; skips "
      "whose plan was not empty: %s\n",
      cluster.round_starts_, static_cast<double>(cluster.round_start_bytes_) / (1024.0 * 1024.0),
      static_cast<unsigned long long>(cluster.leader().jobs_skipped()),
      o.verify_skips ? std::to_string(cluster.leader().skip_mismatches()).c_str()
                     : "(not checked: --verify-skips)");
  std::printf("Raft log digest: %016llx\n", static_cast<unsigned long long>(cluster.digest()));
  // The job table as Raft snapshots it (every consensus.snapshot_every_entries entries, and to
  // a follower too far behind): its bytes, and the CPU to write and to restore it.
  {
    const double snap_start = elastic::bench::cpu_seconds();
    const std::string bytes = cluster.jobs().snapshot();
    const double snap_s = elastic::bench::cpu_seconds() - snap_start;
    const double restore_start = elastic::bench::cpu_seconds();
    const auto restored = elastic::rendezvous::JobTable::restore(bytes);
    const double restore_s = elastic::bench::cpu_seconds() - restore_start;
    std::printf("job table snapshot: %zu bytes, written in %.1f ms, restored in %.1f ms (%s)\n",
                bytes.size(), 1000 * snap_s, 1000 * restore_s, restored.ok() ? "ok" : "FAILED");
  }
  std::printf("wall: %.1f s\n", elastic::bench::ms_since(wall_start) / 1000);
  const bool ok = !cluster.report_to_commit_ms.empty() &&
                  cluster.report_to_commit_ms.size() + cluster.open_losses() >= cluster.losses_ &&
                  cluster.leader().skip_mismatches() == 0;
  std::printf("verdict: %s\n",
              ok ? "ok" : "FAILED: a loss made no new round, or a skipped job had a plan");
  return ok ? 0 : 1;
}
