#include "trainer/async_checkpointer.h"

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "daemon/checkpoint/checkpoint_store.h"
#include "daemon/checkpoint/fs.h"

namespace elastic::trainer {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void log_line(const std::string& message) {
  std::fprintf(stderr, "elastic-trainer: %s\n", message.c_str());
}

// --checkpoint-write-delay: the real filesystem, pausing after each file written.
class DelayingFs : public checkpoint::Fs {
 public:
  DelayingFs(std::unique_ptr<checkpoint::Fs> fs, std::chrono::milliseconds delay)
      : fs_(std::move(fs)), delay_(delay) {}
  Status make_dir(const std::string& path) override { return fs_->make_dir(path); }
  Status make_dirs(const std::string& path) override { return fs_->make_dirs(path); }
  Status write_file(const std::string& path, std::string_view bytes) override {
    Status written = fs_->write_file(path, bytes);
    std::this_thread::sleep_for(delay_);
    return written;
  }
  Status sync_file(const std::string& path) override { return fs_->sync_file(path); }
  Status sync_dir(const std::string& path) override { return fs_->sync_dir(path); }
  Status rename(const std::string& from, const std::string& to) override {
    return fs_->rename(from, to);
  }
  Result<std::string> read_file(const std::string& path) override { return fs_->read_file(path); }
  Result<std::vector<std::string>> list_dir(const std::string& path) override {
    return fs_->list_dir(path);
  }
  Status remove_all(const std::string& path) override { return fs_->remove_all(path); }
  bool exists(const std::string& path) override { return fs_->exists(path); }

 private:
  std::unique_ptr<checkpoint::Fs> fs_;
  std::chrono::milliseconds delay_;
};

}  // namespace

struct AsyncCheckpointer::Files {
  std::unique_ptr<checkpoint::Fs> fs;
  checkpoint::CheckpointStore store;

  Files(std::unique_ptr<checkpoint::Fs> filesystem, const std::string& job_dir, int keep)
      : fs(std::move(filesystem)), store(*fs, job_dir, keep) {}
};

AsyncCheckpointer::AsyncCheckpointer(AsyncCheckpointOptions options, Emit emit,
                                     ProgressReporter& progress)
    : options_(std::move(options)),
      emit_(std::move(emit)),
      progress_(progress),
      snapshot_(std::make_shared<StateSnapshot>()) {
  std::unique_ptr<checkpoint::Fs> fs = checkpoint::make_posix_fs();
  if (options_.write_delay.count() > 0) {
    fs = std::make_unique<DelayingFs>(std::move(fs), options_.write_delay);
  }
  files_ = std::make_shared<Files>(std::move(fs), options_.job_dir, options_.keep);
}

AsyncCheckpointer::~AsyncCheckpointer() = default;

bool AsyncCheckpointer::start(const TrainState& state, const torch::nn::Module& module,
                              const torch::optim::Optimizer& optimizer) {
  const auto begin = std::chrono::steady_clock::now();
  if (Status copied = snapshot_->capture(state, module, optimizer); !copied) {
    log_line(copied.error().message);
    emit_(
        {{"event", "checkpoint_failed"}, {"step", state.step}, {"error", copied.error().message}});
    return false;
  }
  writing_step_ = state.step;
  writing_stall_s_ = seconds_since(begin);
  const bool started =
      writer_.try_start(state.step,
                        [files = files_, snapshot = snapshot_, job = options_.job_id,
                         round = state.round]() -> Result<std::string> {
                          std::function<Status()> still_current;
                          if (!job.empty()) {
                            if (Status claimed = files->store.claim_round(job, round); !claimed) {
                              return claimed.error();
                            }
                            still_current = [&] { return files->store.check_round(job, round); };
                          }
                          auto ref = snapshot->write(files->store, still_current);
                          if (!ref) return ref.error();
                          return ref->dir;
                        });
  // Only the owner starts writes, and it checked that none is in flight: a broken invariant.
  if (!started) {
    log_line("fatal: a checkpoint write was started while another one was in flight");
    std::abort();
  }
  return true;
}

void AsyncCheckpointer::checkpoint(const TrainState& state, const torch::nn::Module& module,
                                   const torch::optim::Optimizer& optimizer) {
  poll();
  if (writer_.busy()) {
    if (skipped_++ == 0) {
      log_line("the checkpoint of step " + std::to_string(state.step) +
               " is skipped: the one of step " + std::to_string(writing_step_) +
               " is still being written (logged once; each checkpoint line counts the skips)");
      emit_({{"event", "checkpoint_skipped"}, {"step", state.step}, {"writing", writing_step_}});
    }
    return;
  }
  (void)start(state, module, optimizer);
}

bool AsyncCheckpointer::report(const BackgroundWriter::Outcome& outcome) {
  if (!outcome.dir) {
    const std::string& why = outcome.dir.error().message;
    log_line("the checkpoint of step " + std::to_string(outcome.step) + " failed: " + why +
             " Training goes on; the next checkpoint tries again.");
    emit_({{"event", "checkpoint_failed"}, {"step", outcome.step}, {"error", why}});
    return false;
  }
  published_step_ = outcome.step;
  const TrainState& state = snapshot_->state();
  emit_({{"event", "checkpoint"},
         {"step", outcome.step},
         {"epoch", state.position.epoch},
         {"position", state.position.position},
         {"dir", *outcome.dir},
         {"seconds", outcome.seconds},
         {"stall_seconds", writing_stall_s_},
         {"bytes", snapshot_->bytes()},
         {"skipped", skipped_}});
  progress_.checkpoint(outcome.step);
  return true;
}

void AsyncCheckpointer::poll() {
  if (auto outcome = writer_.take_outcome()) (void)report(*outcome);
}

bool AsyncCheckpointer::settle() {
  if (!writer_.wait_idle(options_.exit_wait)) return false;
  poll();
  return true;
}

bool AsyncCheckpointer::finish(const TrainState* final_state, const torch::nn::Module& module,
                               const torch::optim::Optimizer& optimizer) {
  auto wait = [&]() -> bool {
    if (writer_.wait_idle(options_.exit_wait)) return true;
    log_line("the checkpoint of step " + std::to_string(writing_step_) +
             " is still being written after " + std::to_string(options_.exit_wait.count()) +
             " ms; exiting without it (LATEST names the previous complete checkpoint)");
    return false;
  };
  if (!wait()) return false;
  poll();
  if (final_state == nullptr || final_state->step == published_step_) return true;
  if (!start(*final_state, module, optimizer) || !wait()) return false;
  auto outcome = writer_.take_outcome();
  return outcome.has_value() && report(*outcome);
}

}  // namespace elastic::trainer
