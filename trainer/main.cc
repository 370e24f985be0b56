// elastic-trainer: a data-parallel LibTorch worker (Gloo on CPU, NCCL on GPUs) that can be
// stopped at any moment and resumes exactly from the last checkpoint, at any world size. With a
// round source (--round-file) it re-forms its group in place when a peer is lost or a new round
// is announced, keeping its state in memory (trainer/reformer.h).
//
// Exit codes (also in README.md):
//   0   training finished
//   64  bad command line or worker environment
//   66  the data set cannot be read
//   69  the store, a peer or a collective failed (a lost peer shows up here); with
//       --round-file only when it joined no next round within --reform-timeout
//   74  a checkpoint could not be written or read
//   75  stopped by SIGTERM/SIGINT; a checkpoint was written first when a directory is set
//   1   anything else
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <torch/torch.h>
#ifdef ELASTIC_HAVE_GLOO
#include <gloo/common/error.h>
#endif
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "daemon/checkpoint/checkpoint_store.h"
#include "elastic/version.h"
#include "trainer/async_checkpointer.h"
#include "trainer/checkpointing.h"
#include "trainer/data/sampler.h"
#include "trainer/dist.h"
#include "trainer/fused_adam.h"
#include "trainer/launcher.h"
#include "trainer/peer_loss.h"
#include "trainer/profiling.h"
#include "trainer/progress.h"
#include "trainer/reducer.h"
#include "trainer/reformer.h"
#include "trainer/round_source.h"
#include "trainer/worker_channel.h"
#include "trainer/worker_env.h"
#include "trainer/workload.h"

namespace elastic::trainer {
namespace {

enum ExitCode : int {
  kExitOk = 0,
  kExitOther = 1,
  kExitUsage = 64,
  kExitNoInput = 66,
  kExitUnavailable = 69,
  kExitIo = 74,
  kExitStopped = 75,
};

std::atomic<bool> stop_requested{false};
void on_stop_signal(int) { stop_requested.store(true); }

struct Flags {
  std::string model = "fmnist";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::int64_t train_limit = 0;
  std::int64_t test_limit = 0;
  std::int64_t batch_size = 64;
  double lr = 1e-3;
  std::string optimizer = "adam";
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;
  std::string checkpoint_dir;
  std::int64_t checkpoint_interval = 0;
  int keep = 3;
  bool checkpoint_on_stop = true;
  double checkpoint_exit_wait_s = 600;
  std::int64_t checkpoint_write_delay_ms = 0;
  std::int64_t log_interval = 20;
  std::uint64_t seed = 42;
  bool no_overlap = false;
  bool fused_adam = true;
  bool sync_every_step = false;
  bool comm_timing = false;
  std::string profile;
  std::int64_t profile_steps = 3;
  double bucket_mb = 25;
  int threads = 0;
  double timeout_s = 60;
  std::string device = "auto";
  std::string dtype = "fp32";
  bool no_eval = false;
  std::int64_t warmup_steps = 5;
  int standalone = 0;
  std::int64_t crash_at_step = -1;
  int crash_rank = 0;
  std::int64_t stall_at_step = -1;
  int stall_rank = 0;
  double pace_ms = 0;
  std::int64_t pace_ranks = 0;
  std::string trace_samples;
  GptShape gpt;
  std::int64_t gpt_sequence = 0;
  std::int64_t gpt_train_size = 1 << 20;
  std::string round_file;
  double reform_timeout_s = 60;
  bool live = true;  // under elasticd: re-form in place when its worker channel says so
  bool reform_checksums = false;
  bool backend_warm_up = true;
};

// At most this long for an abandoned group's collectives to return after its abort (they fail
// at once unless a peer is wedged; the group is then left to end on its own).
constexpr std::chrono::milliseconds kAbandonBound{2000};

void emit(const nlohmann::json& line) {
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

void fail(const std::string& message) {
  std::fprintf(stderr, "elastic-trainer: %s\n", message.c_str());
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// FNV-1a over the raw bytes of every parameter, in order: equal iff bit-identical.
std::string parameter_checksum(torch::nn::Module& module, double* abs_sum) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  double sum = 0;
  for (const auto& p : module.parameters()) {
    auto cpu = p.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(cpu.data_ptr());
    const auto n = static_cast<std::size_t>(cpu.numel()) * cpu.element_size();
    for (std::size_t i = 0; i < n; ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
    sum += cpu.to(torch::kDouble).abs().sum().item<double>();
  }
  *abs_sum = sum;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--model", f.model,
                 "Workload: fmnist (CNN on Fashion-MNIST) or gpt (GPT-2-shaped, synthetic data)")
      ->check(CLI::IsMember({"fmnist", "gpt"}));
  app.add_option("--data-dir", f.data_dir,
                 "Directory with the Fashion-MNIST IDX files (.gz or plain)");
  app.add_option("--train-limit", f.train_limit, "Use only the first N training samples (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--test-limit", f.test_limit, "Evaluate on the first N test samples only (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", f.batch_size, "Samples per rank per step")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", f.lr, "Learning rate")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", f.optimizer, "adam or sgd (momentum 0.9)")
      ->check(CLI::IsMember({"adam", "sgd"}));
  app.add_option("--epochs", f.epochs, "Train until this many epochs are complete")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-steps", f.max_steps,
                 "Stop after this many global steps in total (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option(
      "--checkpoint-dir", f.checkpoint_dir,
      "Job checkpoint directory (default: $ELASTIC_CHECKPOINT_DIR; none: no checkpoints)");
  app.add_option("--checkpoint-interval", f.checkpoint_interval,
                 "Checkpoint every N steps (0: only at the end and on SIGTERM)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--keep", f.keep, "Complete checkpoints to keep")->check(CLI::PositiveNumber);
  app.add_flag("!--no-checkpoint-on-stop", f.checkpoint_on_stop,
               "Do not write a checkpoint when stopped by SIGTERM/SIGINT");
  app.add_option(
         "--checkpoint-exit-wait", f.checkpoint_exit_wait_s,
         "At exit, seconds to wait for the checkpoint being written, then for the final one")
      ->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-write-delay-ms", f.checkpoint_write_delay_ms,
                 "Fault injection: the checkpoint writer pauses N ms after each file it writes")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-interval", f.log_interval, "Print a step line every N steps")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", f.seed, "Seed of the model initialisation and the data order");
  app.add_flag("--no-overlap", f.no_overlap, "All-reduce the gradient buckets only after backward");
  app.add_option("--bucket-mb", f.bucket_mb, "Gradient bucket size in MiB")
      ->check(CLI::PositiveNumber);
  app.add_flag("!--no-fused-adam", f.fused_adam,
               "Adam: LibTorch's per-parameter loop even where the fused CUDA kernel applies");
  app.add_flag("--sync-every-step", f.sync_every_step,
               "Wait for each step's control values before the optimizer step (a host sync per "
               "step, the old behaviour; for comparison)");
  app.add_flag("--comm-timing", f.comm_timing,
               "Time every all-reduce with CUDA events (NCCL, LibTorch 2.x); the summary gets the "
               "all-reduce GPU time per step and bus bandwidth");
  app.add_option("--profile", f.profile,
                 "Write a Kineto (Chrome-trace JSON) profile of the steps after the warm-up to "
                 "PATH.rank<N>.json");
  app.add_option("--profile-steps", f.profile_steps, "Steps --profile records")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", f.threads, "Intra-op threads (0: $OMP_NUM_THREADS, else 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--timeout", f.timeout_s, "Seconds a store wait or collective may take")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", f.device, "auto (CUDA with NCCL if present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--dtype", f.dtype, "Parameter type: fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_flag("--no-eval", f.no_eval, "Skip the test-set evaluation");
  app.add_option("--warmup-steps", f.warmup_steps, "Steps left out of the summary's samples/s")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--standalone", f.standalone,
                 "Start N local ranks of this command (like torchrun --standalone)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--crash-at-step", f.crash_at_step,
                 "Fault injection: SIGKILL this process at the start of step N, once the checkpoint "
                 "being written (if any) is published")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--crash-rank", f.crash_rank,
                 "Fault injection: the rank that --crash-at-step kills")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stall-at-step", f.stall_at_step,
                 "Fault injection: stop at the start of step N for ever, outside any collective "
                 "(a stuck data loader), in the job's first round only (so its replacement "
                 "does not stall again); its peers wait for it in their next collective")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stall-rank", f.stall_rank, "Fault injection: the rank that --stall-at-step stops")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pace-ms", f.pace_ms,
                 "Testing: every step takes at least this long (ms), so the job's samples/s "
                 "grow with its world size alone, not with the machine's load (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pace-ranks", f.pace_ranks,
                 "Testing, with --pace-ms: beyond this many ranks a step takes longer in "
                 "proportion (pace x world / N), so added ranks add no samples/s (0: no cap)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--trace-samples", f.trace_samples,
                 "Append the sample indices each rank trains on to PREFIX.round<R>.rank<N>");
  app.add_option("--gpt-layers", f.gpt.layers, "gpt: transformer blocks")
      ->check(CLI::PositiveNumber);
  app.add_option("--gpt-heads", f.gpt.heads, "gpt: attention heads")->check(CLI::PositiveNumber);
  app.add_option("--gpt-width", f.gpt.width, "gpt: model width")->check(CLI::PositiveNumber);
  app.add_option("--gpt-vocab", f.gpt.vocab, "gpt: vocabulary size")->check(CLI::PositiveNumber);
  app.add_option("--gpt-context", f.gpt.context, "gpt: context length")->check(CLI::PositiveNumber);
  app.add_option("--gpt-sequence", f.gpt_sequence, "gpt: tokens per sample (0: the context length)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gpt-train-size", f.gpt_train_size, "gpt: samples per epoch")
      ->check(CLI::PositiveNumber);
  app.add_option("--round-file", f.round_file,
                 "Live re-formation: read the next round (the worker variables, KEY=VALUE lines) "
                 "from PATH; a lost peer or a newer round there re-forms the group in place, "
                 "keeping the state in memory, instead of ending the process");
  app.add_flag("!--no-live", f.live,
               "Under elasticd, be stopped and restarted at every incident instead of "
               "re-forming in place (the plain-command path)");
  app.add_option("--reform-timeout", f.reform_timeout_s,
                 "Seconds to wait for the next round after a collective failed (--round-file)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--backend-warm-up,!--no-backend-warm-up", f.backend_warm_up,
               "Live, on CUDA, in a round after the first (a joiner): initialise NCCL in a group "
               "of this process alone before saying it is ready, so the running ranks do not "
               "wait for NCCL's first-use costs when it joins (default on; measured on 2x H200: "
               "the running rank's pause when the job grows 0.73 s instead of 0.98 s)");
  app.add_flag("--reform-checksums", f.reform_checksums,
               "Print each rank's parameter checksum after every re-formation (a test aid: one "
               "pass over the parameters)");
}

// Whether a failure says a peer or the store is gone (exit 69, or a re-formation), whichever
// library raised it (trainer/peer_loss.h): c10d raises c10::Error (the store, NCCL,
// ProcessGroupGloo's checks); Gloo's transport raises gloo::IoException ("Connection closed by
// peer", "Read error ...: Connection reset by peer"), which ProcessGroupGloo's wait() rethrows as
// it is: the survivor of a SIGKILLed peer exited 1 for it (trainer_integ's
// TheSurvivorOfAKilledPeerExits69EveryTime). `what` gets the message without a backtrace.
bool is_lost_peer(const std::exception& e, std::string* what) {
  bool lost_peer = false;
  *what = e.what();
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e); c10_error != nullptr) {
    lost_peer = true;
    *what = c10_error->what_without_backtrace();
  }
#ifdef ELASTIC_HAVE_GLOO
  lost_peer = lost_peer || dynamic_cast<const gloo::IoException*>(&e) != nullptr;
#endif
  return lost_peer || says_a_peer_was_lost(*what);
}

// The line a rank prints once it has re-formed (or joined live): the round, the agreed step and
// where the state came from, the time each phase took, and with `checksummed` its parameters'
// checksum.
nlohmann::json reform_event(const WorkerEnv& env, const Reformed& formed, const TrainState& state,
                            torch::nn::Module* checksummed) {
  nlohmann::json line = {{"event", "reform"},
                         {"rank", env.rank},
                         {"round", env.round},
                         {"world_size", env.world_size},
                         {"step", formed.plan->step},
                         {"epoch", state.position.epoch},
                         {"position", state.position.position},
                         {"source", formed.plan->source},
                         {"receivers", formed.plan->receivers},
                         {"form_s", formed.form_seconds},
                         {"agree_s", formed.agree_seconds},
                         {"transfer_s", formed.transfer_seconds}};
  if (checksummed != nullptr) {
    double abs_sum = 0;
    line["param_checksum"] = parameter_checksum(*checksummed, &abs_sum);
  }
  return line;
}

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The control slots of the reducer (trainer/reducer.h) each step sums over the ranks.
enum ControlSlot : int {
  kControlStop = 0,    // a rank was asked to stop (SIGTERM)
  kControlLoss = 1,    // the step's global loss
  kControlSwitch = 2,  // a rank was announced an intact round: leave this group for it
};

// The group a round source's thread may abort (ChannelRoundSource::on_round): a round newer
// than the group's ends its collectives at once, so a rank stuck on a peer that will never
// answer re-forms now instead of after the collective's timeout. An intact round (every rank of
// the group goes on into it) is not a failure: the ranks leave the group after a step they agree
// on (kControlSwitch), and the abort is only the safety net for a failure the daemon did not see
// yet (a peer lost at the same moment): a watchdog thread aborts the group if this rank is still
// in it `switch_bound()` after the round came. The training thread holds `mutex` while it
// replaces, leaves or destroys the group.
class AbortableGroup {
 public:
  // At least this long for a healthy group to reach its switch, however short its steps.
  static constexpr std::chrono::milliseconds kMinSwitchBound{2000};
  // ... and at least this many of its steps (each switch waits about two: the control values
  // are read one step late).
  static constexpr int kSwitchBoundSteps = 4;

  ~AbortableGroup() {
    {
      std::lock_guard lock(mutex);
      ending_ = true;
    }
    changed_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }

  std::mutex mutex;
  Dist* dist = nullptr;     // null: no group to abort; guarded by `mutex`
  std::int64_t round = -1;  // the round `dist` belongs to; guarded by `mutex`

  // On the round source's thread: round `newer` was announced.
  void on_round(std::int64_t newer, bool intact) {
    std::lock_guard lock(mutex);
    if (dist == nullptr || round >= newer) return;
    if (!intact) {
      abort_backend(*dist);
      round = newer;  // aborted once is enough
      return;
    }
    if (switch_round_ < 0) switch_by_ = std::chrono::steady_clock::now() + switch_bound();
    switch_round_ = std::max(switch_round_, newer);
    if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watch(); });
    changed_.notify_all();
  }

  // The training thread's last step took `seconds` (it sets the safety net's bound).
  void step_took(double seconds) { step_seconds_.store(seconds, std::memory_order_relaxed); }

  // Whether the safety net aborted the group since the last call.
  bool take_safety_abort() {
    std::lock_guard lock(mutex);
    return std::exchange(safety_aborted_, false);
  }

 private:
  std::chrono::milliseconds switch_bound() const {
    const auto steps = std::chrono::milliseconds(static_cast<std::int64_t>(
        kSwitchBoundSteps * 1000 * step_seconds_.load(std::memory_order_relaxed)));
    return std::max(kMinSwitchBound, steps);
  }

  // Aborts the group if it is still this rank's when the switch is overdue. A group already
  // left (moved out: no backend) or replaced by the round's (round >= switch_round_) is not.
  void watch() {
    std::unique_lock lock(mutex);
    while (!ending_) {
      if (switch_round_ < 0) {
        changed_.wait(lock);
        continue;
      }
      const bool still_in_old =
          dist != nullptr && dist->backend && round >= 0 && round < switch_round_;
      if (!still_in_old) {
        switch_round_ = -1;
        continue;
      }
      if (std::chrono::steady_clock::now() < switch_by_) {
        changed_.wait_until(lock, switch_by_);
        continue;
      }
      std::fprintf(stderr,
                   "elastic-trainer: round %lld was announced as intact, but this rank did not "
                   "leave round %lld at an agreed step within %.1f s; aborting the group\n",
                   static_cast<long long>(switch_round_), static_cast<long long>(round),
                   std::chrono::duration<double>(switch_bound()).count());
      abort_backend(*dist);
      round = switch_round_;
      switch_round_ = -1;
      safety_aborted_ = true;
    }
  }

  std::condition_variable changed_;
  std::int64_t switch_round_ = -1;  // the intact round announced, not yet switched to
  std::chrono::steady_clock::time_point switch_by_;
  bool safety_aborted_ = false;
  bool ending_ = false;
  std::atomic<double> step_seconds_{0};
  std::thread watchdog_;
};

int train(const Flags& flags, const WorkerEnv& first_env, RoundSource* rounds,
          AbortableGroup& abortable) {
  WorkerEnv env = first_env;  // the current round's; a re-formation moves it on
  const auto started = std::chrono::steady_clock::now();
  int threads = flags.threads;
  if (threads == 0) {
    const char* omp = std::getenv("OMP_NUM_THREADS");
    threads = omp != nullptr && std::atoi(omp) > 0 ? std::atoi(omp) : 1;
  }
  torch::set_num_threads(threads);

  torch::Device device = torch::kCPU;
  const bool cuda_ok = torch::cuda::is_available() && nccl_compiled_in();
  if (flags.device == "cuda" && !cuda_ok) {
    fail("--device cuda: no CUDA device, or this build has no NCCL");
    return kExitUsage;
  }
  if (flags.device == "cuda" || (flags.device == "auto" && cuda_ok)) {
    device = torch::Device(
        torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank % torch::cuda::device_count()));
  }
  const torch::Dtype dtype = flags.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat;
  if (flags.model == "fmnist" && dtype != torch::kFloat) {
    fail("--dtype bf16 is only supported with --model gpt");
    return kExitUsage;
  }

  // The model is built from the same seed on every rank; rank 0's copy is broadcast anyway.
  torch::manual_seed(static_cast<std::uint64_t>(flags.seed));
  std::unique_ptr<Workload> workload;
  if (flags.model == "fmnist") {
    auto made = make_fmnist_workload({flags.data_dir, flags.train_limit, flags.test_limit}, device);
    if (!made) {
      fail(made.error().message);
      return kExitNoInput;
    }
    workload = std::move(made).value();
  } else {
    GptOptions options{flags.gpt, flags.gpt_sequence, flags.gpt_train_size, flags.seed};
    workload = make_gpt_workload(options, device, dtype);
  }
  torch::nn::Module& module = workload->module();

  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (flags.optimizer == "adam") {
    optimizer = std::make_unique<FusedAdam>(module.parameters(),
                                            torch::optim::AdamOptions(flags.lr), flags.fused_adam);
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(
        module.parameters(), torch::optim::SGDOptions(flags.lr).momentum(0.9));
  }
  data::ElasticSampler sampler(workload->train_size(), flags.seed);
  TrainState state;
  state.seed = flags.seed;
  state.dataset_size = workload->train_size();
  state.workload = workload->name();
  LiveModel live{module, *optimizer, state};

  // ProcessGroupNCCL reads this when it is created; the reducer then reads each work's duration.
  if (flags.comm_timing) ::setenv("TORCH_NCCL_ENABLE_TIMING", "1", 1);
  const DistOptions dist_options{
      device, std::chrono::milliseconds(static_cast<std::int64_t>(flags.timeout_s * 1000))};
  Dist dist;
  // Healthy groups this rank left (an intact round) are destroyed off the pause.
  GroupReleaser releaser(kAbandonBound);
  // Declared after `dist`, so destroyed before it: the source's thread never aborts a group that
  // is gone.
  struct Unregister {
    AbortableGroup& group;
    ~Unregister() {
      std::lock_guard lock(group.mutex);
      group.dist = nullptr;
    }
  } unregister{abortable};
  // With a round source this process may be joining a group that is already training: the step
  // agreement then hands it the live state, and no checkpoint is read.
  std::optional<TransferPlan> joined_live;
  if (rounds == nullptr) {
    auto dist_result = init_dist(env, dist_options);
    if (!dist_result) {
      fail(dist_result.error().message);
      return kExitUnavailable;
    }
    dist = std::move(dist_result).value();
  } else {
    // A joiner of a running job pays the backend's first-use costs before it says it is ready
    // (the running ranks train on until then), not in their pause.
    double warm_up_s = -1;
    if (flags.backend_warm_up && env.round > 1 && device.is_cuda()) {
      auto warmed = warm_up_backend(dist_options);
      if (warmed) {
        warm_up_s = *warmed;
      } else {
        fail(warmed.error().message);
      }
    }
    rounds->ready();
    auto formed = reform_group(env, dist_options, live, RankFacts{});
    if (!formed) {
      fail(formed.error().message);
      return kExitUnavailable;
    }
    dist = std::move(formed->dist);
    {
      std::lock_guard lock(abortable.mutex);
      abortable.dist = &dist;
      abortable.round = env.round;
    }
    joined_live = formed->plan;
    if (joined_live) {
      auto line = reform_event(env, *formed, state, flags.reform_checksums ? &module : nullptr);
      line["joined"] = true;
      if (warm_up_s >= 0) line["warm_up_s"] = warm_up_s;
      emit(line);
    }
  }

  // ---- resume: rank 0 decides which checkpoint (so every rank loads the same one)
  const std::string checkpoint_dir =
      !flags.checkpoint_dir.empty() ? flags.checkpoint_dir : env.checkpoint_dir;
  auto fs = checkpoint::make_posix_fs();
  std::optional<checkpoint::CheckpointStore> store;
  std::int64_t resume_step = -1;
  if (!checkpoint_dir.empty()) {
    store.emplace(*fs, checkpoint_dir, flags.keep);
    if (env.rank == 0 && !joined_live) {
      if (auto s = store->recover(); !s) {
        fail(s.error().message);
        return kExitIo;
      }
      auto latest = store->latest();
      if (!latest) {
        fail(latest.error().message);
        return kExitIo;
      }
      if (latest->has_value()) resume_step = (*latest)->step;
    }
  }
  c10d::BroadcastOptions from_rank0;
  from_rank0.rootRank = 0;
  if (!joined_live) {
    std::vector<at::Tensor> decision{
        torch::tensor({static_cast<double>(resume_step)}, torch::kDouble).to(device)};
    dist.backend->broadcast(decision, from_rank0)->wait();
    resume_step = static_cast<std::int64_t>(decision[0].cpu().item<double>());
  }

  if (resume_step >= 0) {
    if (!store) {
      fail("rank 0 resumes from step " + std::to_string(resume_step) +
           " but this rank has no checkpoint directory");
      return kExitUsage;
    }
    auto loaded = load_checkpoint(*store, resume_step, module, *optimizer, device);
    if (!loaded) {
      fail(loaded.error().message);
      return kExitIo;
    }
    if (loaded->workload != state.workload || loaded->dataset_size != state.dataset_size) {
      fail("checkpoint step " + std::to_string(resume_step) + " in " + checkpoint_dir +
           " is of workload '" + loaded->workload + "' with " +
           std::to_string(loaded->dataset_size) + " samples, not '" + state.workload + "' with " +
           std::to_string(state.dataset_size));
      return kExitUsage;
    }
    if (env.rank == 0) {
      emit({{"event", "resume"},
            {"step", loaded->step},
            {"epoch", loaded->position.epoch},
            {"position", loaded->position.position},
            {"from_world_size", loaded->world_size},
            {"world_size", env.world_size},
            {"round", env.round},
            {"checkpoint",
             store->job_dir() + "/" + checkpoint::CheckpointStore::step_dir_name(resume_step)}});
    }
    state.step = loaded->step;
    state.position = loaded->position;
  } else if (!joined_live) {
    torch::NoGradGuard no_grad;
    for (auto& p : module.parameters()) {
      std::vector<at::Tensor> one{p.detach()};
      dist.backend->broadcast(one, from_rank0)->wait();
    }
  }

  ReducerOptions reducer_options;
  reducer_options.bucket_bytes = static_cast<std::int64_t>(flags.bucket_mb * (1 << 20));
  reducer_options.overlap = !flags.no_overlap;
  reducer_options.time_collectives = flags.comm_timing;
  if (rounds != nullptr) reducer_options.waiting = [rounds](bool on) { rounds->waiting(on); };
  // A long evaluation keeps telling hang detection that this rank works.
  std::function<void()> working;
  if (rounds != nullptr) working = [rounds] { rounds->working(); };
  std::optional<BucketReducer> reducer;  // of the current group; a re-formation replaces it
  reducer.emplace(module.parameters(), *dist.backend, reducer_options);

  std::int64_t parameter_count = 0;
  for (const auto& p : module.parameters()) parameter_count += p.numel();
  if (env.rank == 0) {
    emit({{"event", "start"},
          {"version", kVersion},
          {"torch", TORCH_VERSION},
          {"model", workload->name()},
          {"parameters", parameter_count},
          {"backend", dist.backend_name},
          {"device", device.str()},
          {"world_size", env.world_size},
          {"round", env.round},
          {"restart_count", env.restart_count},
          {"job", env.job_id},
          {"batch_size", flags.batch_size},
          {"buckets", reducer->stats().buckets},
          {"overlap", reducer_options.overlap},
          {"threads", threads},
          {"step", state.step},
          {"epoch", state.position.epoch},
          {"position", state.position.position}});
  }

  std::ofstream trace;
  auto open_trace = [&] {
    if (flags.trace_samples.empty()) return;
    if (trace.is_open()) trace.close();
    trace.open(flags.trace_samples + ".round" + std::to_string(env.round) + ".rank" +
                   std::to_string(env.rank),
               std::ios::app);
  };
  open_trace();

  // Progress to the daemon (trainer/progress.h): global rank 0 only, which knows every step
  // and publishes every checkpoint; one report per second at most, never blocking for long.
  auto progress_env = [&] {
    if (env.rank != 0) return EnvMap{};
    EnvMap map = current_environment();
    map["RANK"] = std::to_string(env.rank);  // after a re-formation: the current round's
    map["ELASTIC_ROUND"] = std::to_string(env.round);
    return map;
  };
  ProgressReporter progress(progress_env());

  // Rank 0 checkpoints off the training thread (trainer/async_checkpointer.h). After a live
  // re-formation another process may be rank 0: the new one starts a checkpointer, the old one
  // finishes the write it has in flight and stops checkpointing.
  std::optional<AsyncCheckpointer> checkpointer;
  auto follow_rank_zero = [&]() -> bool {
    if (store && env.rank == 0 && !checkpointer) {
      checkpointer.emplace(
          AsyncCheckpointOptions{checkpoint_dir, flags.keep, env.job_id,
                                 std::chrono::milliseconds(static_cast<std::int64_t>(
                                     flags.checkpoint_exit_wait_s * 1e3)),
                                 std::chrono::milliseconds(flags.checkpoint_write_delay_ms)},
          emit, progress);
    } else if (env.rank != 0 && checkpointer) {
      const bool finished = checkpointer->finish(nullptr, module, *optimizer);
      checkpointer.reset();
      return finished;
    }
    return true;
  };
  follow_rank_zero();

  // ---- live re-formation (with a round source): leave the current group, join the next
  // round's (`next`, or the next one the source announces before the deadline), agree on the
  // step and take the state from a rank that has it (trainer/reformer.h). Not kExitOk: give up.
  std::int64_t state_round = env.round;  // the round of the group this rank's state is from
  std::optional<double> reformed_at;     // monotonic seconds of the last re-formation
  // An intact round (RoundSource::intact) this rank was announced and has not switched to yet:
  // when it noticed it (monotonic seconds).
  std::optional<double> switch_pending_since;
  // `intact`: every rank of the current group leaves it after this same completed step (they
  // agreed through kControlSwitch), so it is healthy: it is kept until the next group is formed
  // and then released in the background, instead of being aborted and destroyed on the pause.
  auto reform = [&](std::optional<WorkerEnv> next, bool intact) -> int {
    // The re-formation waits for the next round and for the peers, not for this rank's work
    // (reform runs only with a round source, so the reducer's waiting hook is set).
    const WaitingMark waiting(reducer_options.waiting);
    double abandon_s = 0;
    Dist leaving;  // the healthy group left, released once the next one formed
    if (intact) {
      const auto start = std::chrono::steady_clock::now();
      reducer->control(0);  // its last step's collectives are complete on the device
      reducer.reset();      // its buckets and gradient hooks belong to the old group
      {
        std::lock_guard lock(abortable.mutex);
        leaving = std::move(dist);
        dist = Dist{};
      }
      abandon_s = seconds_since(start);
    } else {
      reducer.reset();
      std::lock_guard lock(abortable.mutex);
      abandon_s = abandon_group(
          dist, std::min<std::chrono::milliseconds>(dist_options.timeout, kAbandonBound));
    }
    const bool safety_abort = abortable.take_safety_abort();
    // How long this rank went on training after it noticed an intact round (-1: none).
    const double pending_s =
        switch_pending_since ? monotonic_seconds() - *switch_pending_since : -1.0;
    switch_pending_since.reset();
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(static_cast<std::int64_t>(flags.reform_timeout_s * 1000));
    std::int64_t newer_than = env.round;
    double wait_s = 0;
    for (;;) {
      if (!next) {
        // After an intact switch: a peer's round came first, this rank's daemon is behind.
        if (intact && wait_s == 0)
          emit({{"event", "left_group"}, {"round", env.round}, {"step", state.step}});
        const auto waited = std::chrono::steady_clock::now();
        next = rounds->wait(newer_than, deadline);
        wait_s += seconds_since(waited);
      }
      if (!next) {
        if (leaving.backend) releaser.release(leaving);
        fail("no round after round " + std::to_string(newer_than) + " was announced within " +
             std::to_string(flags.reform_timeout_s) + " s");
        return kExitUnavailable;
      }
      auto formed =
          reform_group(*next, dist_options, live, RankFacts{true, state.step, state_round, -1});
      // Every rank of the old group has left it once the new one is formed (or, on failure,
      // gave up on it): nothing needs the old group any more.
      if (leaving.backend) releaser.release(leaving);
      if (formed && formed->plan) {
        {
          std::lock_guard lock(abortable.mutex);
          dist = std::move(formed->dist);
          abortable.round = next->round;
        }
        env = *next;
        rounds->joined(env);
        rounds->progress(state.step);  // the agreed step: the clock of hang detection restarts
        state_round = env.round;
        reducer.emplace(module.parameters(), *dist.backend, reducer_options);
        progress = ProgressReporter(progress_env());
        open_trace();
        reformed_at = monotonic_seconds();
        if (!follow_rank_zero()) return kExitIo;
        auto line = reform_event(env, *formed, state, flags.reform_checksums ? &module : nullptr);
        // The pause's phases before the new group's: leaving the old group (abandon_s: its abort
        // and teardown, or for an intact switch only the wait for its last step and the hand-off
        // to the background release) and waiting for this rank's own round (switch_wait_s).
        // pending_s: how long it trained on after it noticed an intact round (no pause).
        line["abandon_s"] = abandon_s;
        line["intact"] = intact;
        line["switch_wait_s"] = wait_s;
        if (pending_s >= 0) line["pending_s"] = pending_s;
        if (safety_abort) line["safety_abort"] = true;
        emit(line);
        return kExitOk;
      }
      // A rank of that round failed too, or (impossible: this rank holds state) none had state.
      fail(formed ? formed->no_plan_reason : formed.error().message);
      if (formed) abandon_group(formed->dist, kAbandonBound);
      newer_than = next->round;
      next.reset();
    }
  };

  // ---- train
  module.train();
  StepProfiler profiler(
      flags.profile.empty() ? "" : flags.profile + ".rank" + std::to_string(env.rank) + ".json",
      flags.warmup_steps + 1, flags.profile_steps, device.is_cuda());
  double last_loss = std::nan("");
  std::optional<double> accuracy;
  std::int64_t steps_this_run = 0, samples_measured = 0, interval_samples = 0;
  double measured_seconds = 0;
  auto interval_start = std::chrono::steady_clock::now();
  auto epoch_start = interval_start;
  bool stopped = false;
  const bool eval = !flags.no_eval;
  // Samples the whole job trained on since this process started (progress reports: throughput
  // scaling's samples/s); it goes on across re-formations with each round's world size.
  std::int64_t samples_seen = 0;
  while (state.position.epoch < flags.epochs &&
         (flags.max_steps == 0 || state.step < flags.max_steps)) {
    const auto step_started = std::chrono::steady_clock::now();
    if (state.step == flags.crash_at_step && env.rank == flags.crash_rank) {
      // Checkpoints started before this step are published first, so what the kill leaves does
      // not depend on the disk's speed (a kill mid-write: an external SIGKILL, with
      // --checkpoint-write-delay-ms).
      if (checkpointer) (void)checkpointer->settle();
      ::kill(::getpid(), SIGKILL);
    }
    if (state.step == flags.stall_at_step && env.rank == flags.stall_rank &&
        env.restart_count == 0) {
      emit({{"event", "stall"}, {"rank", env.rank}, {"round", env.round}, {"step", state.step}});
      for (;;) ::pause();  // a signal's handler returns here; SIGABRT and SIGKILL end it
    }
    // A round announced while this group is healthy is joined at a step boundary. An intact
    // one (a grow) at the step every rank agrees on (kControlSwitch, below); any other at once:
    // a peer still in the old group fails its next collective and re-forms too.
    if (rounds != nullptr) {
      if (auto next = rounds->poll(env.round)) {
        if (!rounds->intact(next->round)) {
          if (int rc = reform(std::move(next), false); rc != kExitOk) return rc;
          continue;
        }
        if (!switch_pending_since) switch_pending_since = monotonic_seconds();
      }
    }
    profiler.begin_step(steps_this_run + 1);
    const auto step_start = std::chrono::steady_clock::now();
    const auto indices =
        sampler.indices(state.position, env.world_size, env.rank, flags.batch_size);
    const auto global_batch =
        sampler.global_batch(state.position, env.world_size, flags.batch_size);
    try {
      optimizer->zero_grad();
      reducer->prepare();
      reducer->set_control(kControlStop, stop_requested.load() ? 1.0f : 0.0f);
      reducer->set_control(kControlSwitch, switch_pending_since ? 1.0f : 0.0f);
      if (!indices.empty()) {
        auto loss = workload->scaled_loss(indices, global_batch);
        reducer->set_control(kControlLoss, loss.detach().to(torch::kFloat));
        loss.backward();
      }
      reducer->finish();
      if (flags.sync_every_step) reducer->control(0);
    } catch (const std::exception& e) {
      // The step's collectives failed before the optimizer step: the state is still the last
      // completed step's, which is what the step agreement needs. Without a round source this
      // ends the process, as it always did.
      std::string what;
      if (rounds == nullptr || !is_lost_peer(e, &what)) throw;
      fail("step " + std::to_string(state.step + 1) + " failed in round " +
           std::to_string(env.round) + "; re-forming: " + what);
      if (int rc = reform(std::nullopt, false); rc != kExitOk) return rc;
      continue;
    }
    optimizer->step();
    // Written once the step is certain to count, so a step redone after a re-formation is not
    // traced twice.
    if (trace.is_open()) {
      trace << state.position.epoch;
      for (auto i : indices) trace << ' ' << i;
      trace << '\n' << std::flush;
    }
    // The previous step's control values are on the host by now: acting on them (one step
    // late) lets the host run ahead of the GPU; every rank reads the same sums, so all still
    // stop after the same step.
    const auto control = reducer->control(flags.sync_every_step ? 0 : 1);
    state.position = sampler.advance(state.position, env.world_size, flags.batch_size);
    ++state.step;
    ++steps_this_run;
    samples_seen += global_batch;
    if (flags.pace_ms > 0) {
      const double slower = flags.pace_ranks > 0 && env.world_size > flags.pace_ranks
                                ? static_cast<double>(env.world_size) /
                                      static_cast<double>(flags.pace_ranks)
                                : 1.0;
      std::this_thread::sleep_until(
          step_started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double, std::milli>(flags.pace_ms * slower)));
    }
    // The loss of the step before (the control values arrive one step late, at no host sync;
    // none yet after this process's first step).
    progress.step(state.step, resume_step, samples_seen,
                  steps_this_run > 1 || flags.sync_every_step
                      ? std::optional<double>(static_cast<double>(control[kControlLoss]))
                      : std::nullopt);
    if (rounds != nullptr) rounds->progress(state.step);
    if (reformed_at) {
      // The first step after a re-formation: what an incident costs ends here.
      emit({{"event", "reformed_step"},
            {"rank", env.rank},
            {"round", env.round},
            {"step", state.step},
            {"monotonic_s", monotonic_seconds()},
            {"since_reform_s", monotonic_seconds() - *reformed_at}});
      reformed_at.reset();
    }
    if (checkpointer) checkpointer->poll();
    // This step's loss: a host sync, only when shown.
    if ((env.rank == 0 && state.step % flags.log_interval == 0) || state.position.position == 0)
      last_loss = reducer->control(0)[kControlLoss];
    interval_samples += global_batch;
    if (steps_this_run > flags.warmup_steps) {
      samples_measured += global_batch;
      measured_seconds += seconds_since(step_start);
    } else if (steps_this_run == flags.warmup_steps) {
      reducer->control(0);  // the measured steps start with the GPU idle, as DDP's timing does
      reducer->reset_timing();
    }
    profiler.end_step(steps_this_run);
    if (env.rank == 0 && state.step % flags.log_interval == 0) {
      const double elapsed = seconds_since(interval_start);
      emit({{"event", "step"},
            {"step", state.step},
            {"epoch", state.position.epoch},
            {"position", state.position.position},
            {"loss", last_loss},
            {"samples_per_s", elapsed > 0 ? interval_samples / elapsed : 0.0},
            {"world_size", env.world_size},
            {"round", env.round}});
      interval_start = std::chrono::steady_clock::now();
      interval_samples = 0;
    }
    const bool epoch_done = state.position.position == 0;
    if (epoch_done) {
      const double epoch_seconds = seconds_since(epoch_start);
      if (eval) accuracy = workload->evaluate(env.rank, env.world_size, *dist.backend, working);
      if (env.rank == 0) {
        nlohmann::json line = {{"event", "epoch"},
                               {"epoch", state.position.epoch - 1},
                               {"step", state.step},
                               {"seconds", epoch_seconds},
                               {"loss", last_loss}};
        if (accuracy) line["test_accuracy"] = *accuracy;
        emit(line);
      }
      epoch_start = std::chrono::steady_clock::now();
    }
    if (control[kControlStop] > 0) {
      stopped = true;
      break;
    }
    if (checkpointer && flags.checkpoint_interval > 0 &&
        state.step % flags.checkpoint_interval == 0) {
      state.world_size = env.world_size;
      state.round = env.round;
      checkpointer->checkpoint(state, module, *optimizer);
    }
    abortable.step_took(seconds_since(step_start));
    // Some rank has an intact round: every rank read the same sum, so all leave the group after
    // this step. One whose own announcement has not come yet waits for it in reform().
    if (rounds != nullptr && control[kControlSwitch] > 0) {
      auto next = rounds->poll(env.round);
      if (int rc = reform(std::move(next), true); rc != kExitOk) return rc;
    }
  }

  if (steps_this_run > 0) {
    const auto drain_start = std::chrono::steady_clock::now();
    last_loss = reducer->control(0)[kControlLoss];  // waits for the last step on the device
    if (samples_measured > 0) measured_seconds += seconds_since(drain_start);
  }

  // The final state is saved unless it already is (or the user opted out for a stop); a resumed
  // run that had nothing left to do writes nothing. The write in flight is waited for either way.
  const bool final_checkpoint = steps_this_run > 0 && (!stopped || flags.checkpoint_on_stop);
  state.world_size = env.world_size;
  state.round = env.round;
  if (checkpointer &&
      !checkpointer->finish(final_checkpoint ? &state : nullptr, module, *optimizer)) {
    return kExitIo;
  }
  if (!stopped && eval && !accuracy)
    accuracy = workload->evaluate(env.rank, env.world_size, *dist.backend, working);

  const auto* fused = dynamic_cast<const FusedAdam*>(optimizer.get());
  const bool fused_adam_used = fused != nullptr && fused->last_step_fused();
  double abs_sum = 0;
  const std::string checksum = parameter_checksum(module, &abs_sum);
  nlohmann::json summary = {
      {"event", "summary"},
      {"rank", env.rank},
      {"world_size", env.world_size},
      {"round", env.round},
      {"result", stopped ? "stopped" : "finished"},
      {"step", state.step},
      {"steps_this_run", steps_this_run},
      {"epoch", state.position.epoch},
      {"position", state.position.position},
      {"loss", last_loss},
      {"seconds", seconds_since(started)},
      {"samples_per_s", measured_seconds > 0 ? samples_measured / measured_seconds : 0.0},
      {"comm_wait_s", reducer->stats().wait_seconds},
      {"control_wait_s", reducer->stats().control_wait_seconds},
      {"fused_adam", fused_adam_used},
      {"overlap", reducer_options.overlap},
      {"param_checksum", checksum},
      {"param_abs_sum", abs_sum}};
  if (accuracy) summary["test_accuracy"] = *accuracy;
  if (const auto& stats = reducer->stats(); stats.timed_steps > 0 && stats.collective_seconds > 0) {
    summary["allreduce_gpu_s_per_step"] = stats.collective_seconds / stats.timed_steps;
    summary["allreduce_busbw_gbs"] = stats.collective_bus_bytes / stats.collective_seconds / 1e9;
  }
  emit(summary);
  dist.backend->barrier()->wait();
  shutdown_backend(*dist.backend);
  return stopped ? kExitStopped : kExitOk;
}

// Exit 69 for every failure that says a peer or the store is gone (is_lost_peer()), 1 otherwise.
int report_failure(const std::exception& e) {
  std::string what;
  if (!is_lost_peer(e, &what)) {
    fail("training failed: " + what);
    return kExitOther;
  }
  fail("training failed (a peer lost, or a collective timed out?): " + what);
  return kExitUnavailable;
}

int run(int argc, char** argv) {
  CLI::App app{
      "elastic-trainer: data-parallel LibTorch training that resumes exactly from its checkpoints"};
  Flags flags;
  add_flags(app, flags);
  app.set_version_flag("--version", std::string("elastic-trainer ") + kVersion + " (LibTorch " +
                                        TORCH_VERSION + ")");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (flags.standalone > 0) {
    std::vector<std::string> child_args;
    for (int i = 0; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--standalone") {
        ++i;
        continue;
      }
      if (arg.rfind("--standalone=", 0) == 0) continue;
      child_args.push_back(arg);
    }
    return run_standalone(flags.standalone, child_args);
  }
  auto env = parse_worker_env(current_environment());
  if (!env) {
    fail("bad worker environment: " + env.error().message);
    return kExitUsage;
  }
  if (flags.crash_rank >= env->world_size && flags.crash_at_step >= 0) {
    fail("--crash-rank " + std::to_string(flags.crash_rank) +
         " is not a rank of WORLD_SIZE=" + std::to_string(env->world_size));
    return kExitUsage;
  }
  if (flags.stall_rank >= env->world_size && flags.stall_at_step >= 0) {
    fail("--stall-rank " + std::to_string(flags.stall_rank) +
         " is not a rank of WORLD_SIZE=" + std::to_string(env->world_size));
    return kExitUsage;
  }
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  // Gloo writes to its peers with writev() (no MSG_NOSIGNAL): a write to a peer that was killed
  // would end this rank by SIGPIPE instead of failing the collective with "Broken pipe" (exit 69).
  ::signal(SIGPIPE, SIG_IGN);
  AbortableGroup abortable;
  std::unique_ptr<RoundSource> rounds;
  if (!flags.round_file.empty()) {
    rounds = std::make_unique<FileRoundSource>(flags.round_file, current_environment());
  } else {
    // Under elasticd: its worker channel announces the next rounds (trainer/worker_channel.h).
    auto channel = WorkerChannel::from_env(current_environment());
    if (!channel.ok()) {
      fail(channel.error().message);
      return kExitUsage;
    }
    if (channel->has_value() && flags.live) {
      // hello once the model and data are loaded (train() calls ready()).
      rounds = std::make_unique<ChannelRoundSource>(
          std::move(**channel), *env,
          [&abortable](std::int64_t round, bool intact) { abortable.on_round(round, intact); },
          /*hello_now=*/false);
    } else if (channel->has_value()) {
      // --no-live: the daemon stops and restarts this worker at every incident, as it does a
      // plain command's.
      if (Status said = (*channel)->hello(false); !said.ok()) fail(said.error().message);
    }
  }
  try {
    return train(flags, *env, rounds.get(), abortable);
  } catch (const std::exception& e) {
    return report_failure(e);
  }
}

}  // namespace
}  // namespace elastic::trainer

int main(int argc, char** argv) { return elastic::trainer::run(argc, argv); }
