// WorkerChannel: the worker's end of elasticd's worker channel (daemon/worker_channel/
// messages.h). Under elasticd a worker started with a channel finds the descriptor's number in
// ELASTIC_WORKER_FD; it says hello (live: it can re-form in place), then, instead of being
// killed at the next incident, receives the next round as a WorkerEnv plus its Raft term,
// re-forms, and says joined. Outside elasticd (no variable: torchrun, a shell) there is no
// channel and the worker runs as a plain command.
//
// The descriptor is made close-on-exec when adopted, so processes the worker starts do not
// hold the channel open: end of file on it tells the daemon that this worker is gone.
//
// Dependencies: POSIX, the standard library and the channel's codec (messages.h, whose JSON is
// nlohmann_json, which elastic-trainer links anyway), not the daemon's libraries: the trainer
// is also built on GPU hosts without them. One decoder of the daemon's bytes serves both ends.
//
// Errors: Result sentences ("the worker channel (fd 4) is closed by elasticd"); nothing throws.
// Thread safety: none; one thread uses it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "daemon/core/result.h"
#include "daemon/core/unique_fd.h"
#include "daemon/worker_channel/messages.h"
#include "trainer/round_source.h"
#include "trainer/worker_env.h"

namespace elastic::trainer {

// The next round, as the trainer runs it.
struct NextRound {
  WorkerEnv env;
  std::uint64_t term = 0;
  bool intact = false;  // the current group goes on whole (RoundOffer::intact)
};

// The daemon asks the worker to end.
struct StopRequest {
  std::string reason;
};

using ChannelInstruction = std::variant<NextRound, StopRequest>;

// The WorkerEnv of `round`: the round's rank, world, store and counts; the run id and
// checkpoint directory stay those of `current` (a job keeps them across rounds).
WorkerEnv to_worker_env(const worker_channel::RoundOffer& round, const WorkerEnv& current);

class WorkerChannel {
 public:
  // The channel named by ELASTIC_WORKER_FD in `env`; nullopt without the variable. An Error
  // when it is set but not the number of an open socket.
  static Result<std::optional<WorkerChannel>> from_env(const EnvMap& env);

  explicit WorkerChannel(UniqueFd fd);

  // The descriptor, for a caller that polls it next to its own work (readable: receive() has
  // something, or the daemon is gone).
  int fd() const { return fd_.get(); }

  // {"type":"hello","version":1,"live":live}.
  Status hello(bool live);
  // {"type":"joined","round":round,"term":term}.
  Status joined(std::int64_t round, std::uint64_t term);
  // {"type":"alive",...}: see messages.h.
  Status alive(const worker_channel::Alive& alive);
  // The daemon's next instruction, waiting up to `timeout` (zero: only what has arrived);
  // nullopt when none came. Messages of a newer protocol are skipped. An Error when the daemon
  // closed the channel or sent bytes that are not of the protocol. `current` supplies what a
  // round does not carry (to_worker_env).
  Result<std::optional<ChannelInstruction>> receive(std::chrono::milliseconds timeout,
                                                    const WorkerEnv& current);

 private:
  Status send(const worker_channel::WorkerMessage& message);
  std::string where() const;

  UniqueFd fd_;
  worker_channel::FrameReader frames_;
};

// The worker channel as elastic-trainer's RoundSource. A thread of its own reads the channel, so
// a round arrives even while the training thread is stuck in a collective with a peer that will
// never answer (a cut link, a stopped process: no connection closes): `on_round` (set before the
// first round can come) is then called on that thread with the round's number and whether it
// is intact, and the trainer aborts its current group there, so the stuck collective fails at
// once instead of after its timeout (for an intact round it first gives the group a bounded
// time to switch at a step boundary). poll() and wait() hand the newest announced round to the
// training thread, intact() says whether it is intact; joined()
// answers the daemon with the round's term. A stop request or a closed or garbled channel ends
// the announcements (stopped() says why): the daemon ends such a worker itself.
// The reader thread also sends "alive" every kAlivePeriod with what progress() and waiting()
// recorded, so the daemon tells a stopped or stuck rank from one that waits for it (liveness.h).
// Thread safety: poll/wait/joined/stopped/progress from one training thread, waiting() from
// any; on_round runs on the reader. Sends to the channel are serialised.
class ChannelRoundSource final : public RoundSource {
 public:
  // `base` supplies what a round does not carry (to_worker_env). Says hello(live = true) and
  // starts reading now, or with `hello_now` false at ready(): the daemon counts a worker as
  // live (offers it rounds, and lets a grow's running ranks wait for it) from its hello, so a
  // trainer says it once its model and data are loaded.
  ChannelRoundSource(WorkerChannel channel, WorkerEnv base,
                     std::function<void(std::int64_t round, bool intact)> on_round,
                     bool hello_now = true);
  ~ChannelRoundSource() override;
  ChannelRoundSource(const ChannelRoundSource&) = delete;
  ChannelRoundSource& operator=(const ChannelRoundSource&) = delete;

  std::optional<WorkerEnv> poll(std::int64_t current_round) override;
  std::optional<WorkerEnv> wait(std::int64_t current_round,
                                std::chrono::steady_clock::time_point deadline) override;
  bool intact(std::int64_t round) const override;
  void joined(const WorkerEnv& env) override;
  // Says hello(live = true) and starts the reader, once.
  void ready() override;
  void progress(std::int64_t step) override;
  void working() override;
  void waiting(bool on) override;
  // Why no round will come any more ("" while they may).
  std::string stopped() const;

 private:
  void read_loop();
  // The "alive" of now, from what progress() and waiting() recorded.
  worker_channel::Alive alive_now() const;

  WorkerChannel channel_;
  WorkerEnv base_;
  std::function<void(std::int64_t, bool)> on_round_;
  static constexpr std::chrono::milliseconds kReadSlice{100};  // how soon the reader sees `ending_`
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<NextRound> newest_;  // guarded by mutex_
  std::string stopped_;              // guarded by mutex_
  bool ending_ = false;              // guarded by mutex_
  std::thread reader_;
  bool started_ = false;  // the training thread's: ready() ran
  std::mutex send_mutex_;  // joined() on the training thread, alive on the reader
  // What the training thread does, for "alive": steps done, when the count last changed
  // (steady clock, ns) and how many waits for the peers are open.
  std::atomic<std::int64_t> step_{0};
  std::atomic<std::int64_t> step_at_ns_;
  std::atomic<int> waiting_{0};
};

}  // namespace elastic::trainer
