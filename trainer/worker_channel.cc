#include "trainer/worker_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace elastic::trainer {

namespace wc = worker_channel;

WorkerEnv to_worker_env(const wc::RoundOffer& round, const WorkerEnv& current) {
  WorkerEnv env = current;
  env.rank = static_cast<int>(round.rank);
  env.local_rank = static_cast<int>(round.local_rank);
  env.world_size = static_cast<int>(round.world_size);
  env.local_world_size = static_cast<int>(round.local_world_size);
  env.group_rank = static_cast<int>(round.group_rank);
  env.master_addr = round.master_addr;
  env.master_port = static_cast<int>(round.master_port);
  env.restart_count = static_cast<int>(round.restart_count);
  env.job_id = round.job;
  env.round = static_cast<std::int64_t>(round.round);
  return env;
}

Result<std::optional<WorkerChannel>> WorkerChannel::from_env(const EnvMap& env) {
  const auto it = env.find(wc::kWorkerFdVariable);
  if (it == env.end()) return std::optional<WorkerChannel>();
  const std::string& text = it->second;
  int fd = -1;
  const auto [end, parsed] = std::from_chars(text.data(), text.data() + text.size(), fd);
  const std::string variable = std::string(wc::kWorkerFdVariable) + "=\"" + text + "\"";
  if (parsed != std::errc() || end != text.data() + text.size() || fd < 0) {
    return Error{variable + " is not a descriptor number."};
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    return Error{variable + " names no open descriptor: " + std::strerror(errno) + "."};
  }
  if (!S_ISSOCK(info.st_mode)) return Error{variable + " names a descriptor that is no socket."};
  // Processes this worker starts must not hold the channel open (see the header).
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return std::optional<WorkerChannel>(WorkerChannel(UniqueFd(fd)));
}

WorkerChannel::WorkerChannel(UniqueFd fd) : fd_(std::move(fd)) {}

std::string WorkerChannel::where() const {
  return "the worker channel (fd " + std::to_string(fd_.get()) + ")";
}

Status WorkerChannel::send(const wc::WorkerMessage& message) {
  if (!fd_.valid()) return Error{"the worker channel is closed."};
  const std::string bytes = wc::frame(wc::encode(message));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd_.get(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{"writing to " + where() + " failed: " + std::strerror(errno) + "."};
    done += static_cast<std::size_t>(n);
  }
  return ok_status();
}

Status WorkerChannel::hello(bool live) { return send(wc::Hello{wc::kProtocolVersion, live}); }

Status WorkerChannel::joined(std::int64_t round, std::uint64_t term) {
  return send(wc::Joined{static_cast<std::uint64_t>(round), term});
}

Status WorkerChannel::alive(const wc::Alive& alive) { return send(alive); }

Result<std::optional<ChannelInstruction>> WorkerChannel::receive(std::chrono::milliseconds timeout,
                                                                 const WorkerEnv& current) {
  using Clock = std::chrono::steady_clock;
  if (!fd_.valid()) return Error{"the worker channel is closed."};
  const Clock::time_point deadline = Clock::now() + timeout;
  std::array<char, 16 * 1024> chunk;
  while (true) {
    // Whole frames already read first: the daemon may have sent several at once.
    Result<std::optional<std::string>> frame = frames_.next();
    if (!frame.ok()) return Error{where() + ": " + frame.error().message};
    if (frame->has_value()) {
      Result<wc::DaemonMessage> message = wc::decode_daemon_message(**frame);
      if (!message.ok()) return Error{where() + ": " + message.error().message};
      if (const auto* round = std::get_if<wc::RoundOffer>(&*message)) {
        return std::optional<ChannelInstruction>(
            NextRound{to_worker_env(*round, current), round->term, round->intact});
      }
      if (const auto* stop = std::get_if<wc::Stop>(&*message)) {
        return std::optional<ChannelInstruction>(StopRequest{stop->reason});
      }
      continue;  // a message of a newer protocol
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd wait{fd_.get(), POLLIN, 0};
    const int ready = ::poll(&wait, 1, static_cast<int>(std::max<std::int64_t>(left, 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return Error{"waiting on " + where() + " failed: " + std::strerror(errno) + "."};
    if (ready == 0) return std::optional<ChannelInstruction>();
    const ssize_t n = ::recv(fd_.get(), chunk.data(), chunk.size(), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) return Error{"reading " + where() + " failed: " + std::strerror(errno) + "."};
    if (n == 0) return Error{where() + " was closed by elasticd."};
    frames_.append(chunk.data(), static_cast<std::size_t>(n));
  }
}

ChannelRoundSource::ChannelRoundSource(WorkerChannel channel, WorkerEnv base,
                                       std::function<void(std::int64_t, bool)> on_round,
                                       bool hello_now)
    : channel_(std::move(channel)),
      base_(std::move(base)),
      on_round_(std::move(on_round)),
      step_at_ns_(std::chrono::steady_clock::now().time_since_epoch().count()) {
  if (hello_now) ready();
}

void ChannelRoundSource::progress(std::int64_t step) {
  if (step_.exchange(step, std::memory_order_relaxed) != step) {
    step_at_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                      std::memory_order_relaxed);
  }
}

void ChannelRoundSource::working() {
  step_at_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                    std::memory_order_relaxed);
}

void ChannelRoundSource::waiting(bool on) {
  waiting_.fetch_add(on ? 1 : -1, std::memory_order_relaxed);
}

wc::Alive ChannelRoundSource::alive_now() const {
  const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  const std::int64_t idle_ns = std::max<std::int64_t>(0, now - step_at_ns_.load(std::memory_order_relaxed));
  return wc::Alive{.step = static_cast<std::uint64_t>(std::max<std::int64_t>(0, step_.load(std::memory_order_relaxed))),
                   .idle_ms = static_cast<std::uint64_t>(idle_ns / 1'000'000),
                   .waiting = waiting_.load(std::memory_order_relaxed) > 0};
}

void ChannelRoundSource::ready() {
  if (started_) return;
  started_ = true;
  Status said = ok_status();
  {
    std::lock_guard lock(send_mutex_);
    said = channel_.hello(true);
  }
  if (!said.ok()) {
    std::lock_guard lock(mutex_);
    stopped_ = said.error().message;
    return;
  }
  reader_ = std::thread([this] { read_loop(); });
}

ChannelRoundSource::~ChannelRoundSource() {
  {
    std::lock_guard lock(mutex_);
    ending_ = true;
  }
  if (reader_.joinable()) reader_.join();
}

void ChannelRoundSource::read_loop() {
  auto next_alive = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (ending_) return;
    }
    if (const auto now = std::chrono::steady_clock::now(); now >= next_alive) {
      next_alive = now + wc::kAlivePeriod;
      Status said = ok_status();
      {
        std::lock_guard lock(send_mutex_);
        said = channel_.alive(alive_now());
      }
      // A closed channel shows in receive() below, which says why.
      (void)said;
    }
    auto got = channel_.receive(kReadSlice, base_);
    std::unique_lock lock(mutex_);
    if (!got.ok()) {
      stopped_ = got.error().message;
      changed_.notify_all();
      return;
    }
    if (!got->has_value()) continue;
    if (const auto* stop = std::get_if<StopRequest>(&**got)) {
      stopped_ = "elasticd asked this worker to stop: " + stop->reason;
      changed_.notify_all();
      return;
    }
    NextRound round = std::get<NextRound>(std::move(**got));
    if (newest_ && newest_->env.round >= round.env.round) continue;  // not newer
    const std::int64_t number = round.env.round;
    const bool intact = round.intact;
    newest_ = std::move(round);
    changed_.notify_all();
    lock.unlock();
    if (on_round_) on_round_(number, intact);
  }
}

std::optional<WorkerEnv> ChannelRoundSource::poll(std::int64_t current_round) {
  std::lock_guard lock(mutex_);
  if (newest_ && newest_->env.round > current_round) return newest_->env;
  return std::nullopt;
}

std::optional<WorkerEnv> ChannelRoundSource::wait(std::int64_t current_round,
                                                  std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, deadline, [&] {
    return !stopped_.empty() || (newest_ && newest_->env.round > current_round);
  });
  if (newest_ && newest_->env.round > current_round) return newest_->env;
  return std::nullopt;
}

bool ChannelRoundSource::intact(std::int64_t round) const {
  std::lock_guard lock(mutex_);
  return newest_ && newest_->env.round == round && newest_->intact;
}

void ChannelRoundSource::joined(const WorkerEnv& env) {
  std::uint64_t term = 0;
  {
    std::lock_guard lock(mutex_);
    if (newest_ && newest_->env.round == env.round) term = newest_->term;
  }
  Status said = ok_status();
  {
    std::lock_guard lock(send_mutex_);
    said = channel_.joined(env.round, term);
  }
  if (!said.ok()) {
    std::fprintf(stderr, "elastic-trainer: %s\n", said.error().message.c_str());
  }
}

std::string ChannelRoundSource::stopped() const {
  std::lock_guard lock(mutex_);
  return stopped_;
}

}  // namespace elastic::trainer
