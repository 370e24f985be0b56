#include "trainer/background_writer.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

namespace elastic::trainer {

// Everything the thread touches lives here, shared with the owner, so a detached thread never
// reads freed memory.
struct BackgroundWriter::Shared {
  static constexpr int kNiceIncrement = 10;

  std::mutex mutex;
  std::condition_variable changed;
  std::optional<std::pair<std::int64_t, Job>> pending;  // handed over, not yet picked up
  bool running = false;                                 // the thread is inside a job
  bool quit = false;
  std::optional<Outcome> outcome;
  std::thread thread;

  bool idle() const { return !pending && !running; }

  void loop() {
    // Training threads come first: the write fills the CPU time they leave (on Linux a thread
    // has its own nice value). Best effort; a failure leaves the thread at the process's.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)),
                        ::getpriority(PRIO_PROCESS, 0) + kNiceIncrement);
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return quit || pending.has_value(); });
      if (!pending) return;  // quit, nothing left to write
      auto [step, job] = std::move(*pending);
      pending.reset();
      running = true;
      lock.unlock();
      const auto start = std::chrono::steady_clock::now();
      Outcome done{step, Error{"not run"}, 0};
      try {
        done.dir = job();
      } catch (const std::exception& e) {
        // A job reports its errors; an exception (say, std::bad_alloc while serialising) must
        // still not take the process down from a thread nobody joins.
        done.dir = Error{"the checkpoint of step " + std::to_string(step) + " failed: " + e.what()};
      }
      done.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      job = nullptr;  // release what the job held before reporting idle
      lock.lock();
      running = false;
      outcome = std::move(done);
      changed.notify_all();
    }
  }
};

BackgroundWriter::BackgroundWriter() : shared_(std::make_shared<Shared>()) {
  shared_->thread = std::thread([shared = shared_] { shared->loop(); });
}

BackgroundWriter::~BackgroundWriter() {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  shared_->quit = true;
  const bool idle = shared_->idle();
  shared_->changed.notify_all();
  lock.unlock();
  // An idle thread ends at once. A busy one is a write the owner already waited for as long as
  // it would (wait_idle()): joining could hang the exit on a stuck filesystem.
  if (idle) {
    shared_->thread.join();
  } else {
    shared_->thread.detach();
  }
}

bool BackgroundWriter::busy() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return !shared_->idle();
}

bool BackgroundWriter::try_start(std::int64_t step, Job job) {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (!shared_->idle()) return false;
  shared_->pending.emplace(step, std::move(job));
  shared_->changed.notify_all();
  return true;
}

std::optional<BackgroundWriter::Outcome> BackgroundWriter::take_outcome() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return std::exchange(shared_->outcome, std::nullopt);
}

bool BackgroundWriter::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  return shared_->changed.wait_for(lock, timeout, [&] { return shared_->idle(); });
}

}  // namespace elastic::trainer
