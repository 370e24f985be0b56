#include "trainer/reformer.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <future>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "trainer/torch_compat.h"

namespace elastic::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string exception_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

// Waits until something listens at host:port (true) or `deadline` passes (false). The c10d
// store client of LibTorch 1.13 retries a refused connection only after a whole second (a new
// group took 1.0 s on loopback without this probe, 0.01-0.04 s with it), and the ranks of a
// new round start at nearly the same moment, so a client usually comes before rank 0's new
// store listens.
bool wait_until_listening(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return false;
  }
  bool listening = false;
  while (!listening && Clock::now() < deadline) {
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
      listening = true;
    } else if (errno == EINPROGRESS) {
      pollfd item{fd, POLLOUT, 0};
      int error = 0;
      socklen_t length = sizeof error;
      listening = ::poll(&item, 1, 100) == 1 &&
                  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
    ::close(fd);
    if (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::freeaddrinfo(found);
  return listening;
}

// The optimizer's per-parameter state, seen the same way for every optimizer we train with:
// whether a parameter has state, its integer step (Adam), and its tensors in a fixed order.
class OptimizerState {
 public:
  explicit OptimizerState(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {
    for (auto& group : optimizer_.param_groups()) {
      for (auto& p : group.params()) {
        params_.push_back(p);
        groups_.push_back(&group);
      }
    }
    adam_ = dynamic_cast<torch::optim::Adam*>(&optimizer_) != nullptr;
    sgd_ = dynamic_cast<torch::optim::SGD*>(&optimizer_) != nullptr;
  }

  bool supported() const { return adam_ || sgd_; }
  std::size_t size() const { return params_.size(); }

  torch::optim::OptimizerParamState* find(std::size_t i) {
    auto& map = optimizer_.state();
    auto it = map.find(optimizer_state_key(params_[i]));
    return it == map.end() ? nullptr : it->second.get();
  }

  std::int64_t step(std::size_t i) {
    auto* s = find(i);
    if (s == nullptr || !adam_) return 0;
    return static_cast<torch::optim::AdamParamState*>(s)->step();
  }

  // Makes the state of parameter i exist (zeros, to be overwritten) or not, as the source's.
  void shape_like_source(std::size_t i, bool has, std::int64_t step) {
    auto& map = optimizer_.state();
    const auto key = optimizer_state_key(params_[i]);
    if (!has) {
      map.erase(key);
      return;
    }
    const auto& p = params_[i];
    if (adam_) {
      auto* s = static_cast<torch::optim::AdamParamState*>(find(i));
      if (s == nullptr) {
        auto made = std::make_unique<torch::optim::AdamParamState>();
        s = made.get();
        map[key] = std::move(made);
      }
      s->step(step);
      if (!s->exp_avg().defined()) s->exp_avg(torch::zeros_like(p));
      if (!s->exp_avg_sq().defined()) s->exp_avg_sq(torch::zeros_like(p));
      if (amsgrad(i) && !s->max_exp_avg_sq().defined()) s->max_exp_avg_sq(torch::zeros_like(p));
    } else {
      auto* s = static_cast<torch::optim::SGDParamState*>(find(i));
      if (s == nullptr) {
        auto made = std::make_unique<torch::optim::SGDParamState>();
        s = made.get();
        map[key] = std::move(made);
      }
      if (!s->momentum_buffer().defined()) s->momentum_buffer(torch::zeros_like(p));
    }
  }

  // The tensors of parameter i's state, in a fixed order (empty when it has none).
  std::vector<torch::Tensor> tensors(std::size_t i) {
    auto* s = find(i);
    if (s == nullptr) return {};
    if (adam_) {
      auto* a = static_cast<torch::optim::AdamParamState*>(s);
      std::vector<torch::Tensor> out{a->exp_avg(), a->exp_avg_sq()};
      if (amsgrad(i)) out.push_back(a->max_exp_avg_sq());
      return out;
    }
    auto* m = static_cast<torch::optim::SGDParamState*>(s);
    if (!m->momentum_buffer().defined()) return {};
    return {m->momentum_buffer()};
  }

 private:
  bool amsgrad(std::size_t i) const {
    return adam_ && static_cast<torch::optim::AdamOptions&>(groups_[i]->options()).amsgrad();
  }

  torch::optim::Optimizer& optimizer_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::optim::OptimizerParamGroup*> groups_;
  bool adam_ = false;
  bool sgd_ = false;
};

// Broadcasts every tensor from `root`, all launched before any is waited for.
void broadcast_all(Backend& backend, const std::vector<torch::Tensor>& tensors, int root) {
  c10d::BroadcastOptions options;
  options.rootRank = root;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  works.reserve(tensors.size());
  for (const auto& t : tensors) {
    std::vector<at::Tensor> one{t};
    works.push_back(backend.broadcast(one, options));
  }
  for (auto& work : works) work->wait();
}

// Moves the state from plan.source to every rank of the group (see the header).
Status transfer_state(Backend& backend, const TransferPlan& plan, LiveModel& live,
                      torch::Device device) {
  const int rank = backend.getRank();
  const bool source = rank == plan.source;
  OptimizerState optimizer(live.optimizer);
  if (!optimizer.supported()) {
    return Error{"live state transfer supports the Adam and SGD optimizers only"};
  }
  // 1. Step, sampler position and the shape of the optimizer state.
  std::vector<std::int64_t> header = {live.state.step, live.state.position.epoch,
                                      live.state.position.position,
                                      static_cast<std::int64_t>(optimizer.size())};
  for (std::size_t i = 0; i < optimizer.size(); ++i) {
    // "Has state" means has tensors: an SGD entry without a momentum buffer is no state at all.
    header.push_back(optimizer.tensors(i).empty() ? 0 : 1);
    header.push_back(optimizer.step(i));
  }
  auto meta = torch::tensor(header, torch::kLong).to(device);
  broadcast_all(backend, {meta}, plan.source);
  const auto values = meta.cpu();
  const auto* v = values.data_ptr<std::int64_t>();
  if (v[0] != plan.step || v[3] != static_cast<std::int64_t>(optimizer.size())) {
    return Error{"the source (rank " + std::to_string(plan.source) + ") sent step " +
                 std::to_string(v[0]) + " with " + std::to_string(v[3]) +
                 " optimizer parameters; expected step " + std::to_string(plan.step) + " with " +
                 std::to_string(optimizer.size())};
  }
  if (!source) {
    live.state.step = v[0];
    live.state.position = data::SamplerPosition{v[1], v[2]};
    for (std::size_t i = 0; i < optimizer.size(); ++i)
      optimizer.shape_like_source(i, v[4 + 2 * i] == 1, v[5 + 2 * i]);
  }
  // 2. Parameters, buffers and optimizer state, in place.
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors;
  for (const auto& p : live.module.parameters()) tensors.push_back(p.detach());
  for (const auto& b : live.module.buffers()) tensors.push_back(b.detach());
  for (std::size_t i = 0; i < optimizer.size(); ++i) {
    for (auto& t : optimizer.tensors(i)) tensors.push_back(t);
  }
  broadcast_all(backend, tensors, plan.source);
  // 3. The CPU RNG (as a checkpoint keeps it).
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  torch::Tensor rng;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    rng = generator.get_state();
  }
  auto rng_on_device = rng.to(device);
  broadcast_all(backend, {rng_on_device}, plan.source);
  if (!source) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng_on_device.cpu());
  }
  return ok_status();
}

}  // namespace

namespace {

// Aborts `dist` and destroys it on a thread of its own (`dist` is left empty), so that neither
// costs the caller more than it chooses to wait (NCCL: ~0.5 s for both). The destructors wait for
// the group's worker threads (Gloo) and for the store's server; after the abort they end at once,
// unless a peer is wedged.
std::pair<std::thread, std::future<void>> start_release(Dist& dist) {
  std::promise<void> done;
  auto finished = done.get_future();
  std::thread release([group = std::move(dist), done = std::move(done)]() mutable {
    abort_backend(group);
    group.backend.reset();
    group.store.reset();
    done.set_value();
  });
  dist = Dist{};
  return {std::move(release), std::move(finished)};
}

// Joins `release` once it finished within `bound`, else leaves it to end on its own (logged), so
// a wedged group cannot hold the rank hostage.
void finish_release(std::thread& release, std::future<void>& done,
                    std::chrono::milliseconds bound) {
  if (done.wait_for(bound) == std::future_status::ready) {
    release.join();
    return;
  }
  std::fprintf(stderr,
               "elastic-trainer: the old process group did not end within %.1f s; it is left "
               "to end on its own\n",
               std::chrono::duration<double>(bound).count());
  release.detach();
}

}  // namespace

double abandon_group(Dist& dist, std::chrono::milliseconds bound) {
  const auto start = Clock::now();
  auto [release, done] = start_release(dist);
  finish_release(release, done, bound);
  return seconds_since(start);
}

GroupReleaser::~GroupReleaser() {
  for (Release& r : running_) finish_release(r.thread, r.done, bound_);
}

void GroupReleaser::release(Dist& dist) {
  std::erase_if(running_, [](Release& r) {
    if (r.done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    r.thread.join();
    return true;
  });
  auto [thread, done] = start_release(dist);
  running_.push_back(Release{std::move(thread), std::move(done)});
}

Result<Reformed> reform_group(const WorkerEnv& next, const DistOptions& options, LiveModel& live,
                              const RankFacts& mine) {
  const std::string round = "round " + std::to_string(next.round) + " (rank " +
                            std::to_string(next.rank) + " of " + std::to_string(next.world_size) +
                            ")";
  Reformed out;
  auto start = Clock::now();
  // Not listening by the deadline: init_dist() below fails with the store's own error.
  if (next.rank != 0)
    wait_until_listening(next.master_addr, next.master_port, start + options.timeout);
  auto dist = init_dist(next, options);
  if (!dist) return Error{"cannot form the group of " + round + ": " + dist.error().message};
  out.dist = std::move(dist).value();
  out.form_seconds = seconds_since(start);
  try {
    Backend& backend = *out.dist.backend;
    start = Clock::now();
    const auto words = encode_facts(mine);
    auto input = torch::tensor(words, torch::kLong).to(options.device);
    std::vector<std::vector<at::Tensor>> gathered(1);
    for (int r = 0; r < next.world_size; ++r) gathered[0].push_back(torch::empty_like(input));
    std::vector<at::Tensor> inputs{input};
    backend.allgather(gathered, inputs)->wait();
    std::vector<std::int64_t> all;
    for (const auto& t : gathered[0]) {
      auto cpu = t.cpu().contiguous();
      all.insert(all.end(), cpu.data_ptr<std::int64_t>(),
                 cpu.data_ptr<std::int64_t>() + cpu.numel());
    }
    auto facts = decode_facts(all, next.world_size);
    if (!facts) {
      abandon_group(out.dist, options.timeout);
      return Error{"the step agreement of " + round + " failed: " + facts.error().message};
    }
    auto plan = plan_state_transfer(*facts);
    out.agree_seconds = seconds_since(start);
    if (!plan) {
      out.no_plan_reason = plan.error().message;
      return out;
    }
    out.plan = *plan;
    if (!plan->rollbacks.empty()) {
      // This trainer never reports a rollback copy (see the header), so no plan can use one.
      abandon_group(out.dist, options.timeout);
      return Error{"the plan of " + round + " restores rollback copies, which no rank keeps"};
    }
    if (!plan->receivers.empty()) {
      start = Clock::now();
      if (auto s = transfer_state(backend, *plan, live, options.device); !s) {
        abandon_group(out.dist, options.timeout);
        return Error{"the state transfer of " + round + " failed: " + s.error().message};
      }
      out.transfer_seconds = seconds_since(start);
    }
  } catch (const std::exception& e) {
    abandon_group(out.dist, options.timeout);
    return Error{"re-forming " + round + " failed: " + exception_text(e)};
  }
  return out;
}

}  // namespace elastic::trainer
