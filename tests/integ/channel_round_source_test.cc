// ChannelRoundSource (trainer/worker_channel.h): the trainer's view of elasticd's worker channel,
// with the daemon's end played by the test over a socket pair. Its reader thread must deliver a
// round while the training thread is busy elsewhere (the on_round callback runs on that thread),
// hand out only newer rounds, answer joined with the round's term, and end cleanly on a stop, a
// closed channel or its own destruction. Run under the sanitizer builds for the thread handover.
#include "trainer/worker_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <optional>

#include "daemon/worker_channel/messages.h"

namespace elastic::trainer {
namespace {

using namespace std::chrono_literals;
namespace wc = worker_channel;

struct Pair {
  int daemon = -1;
  UniqueFd worker;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    daemon = fds[0];
    worker = UniqueFd(fds[1]);
  }
  ~Pair() {
    if (daemon >= 0) ::close(daemon);
  }
  void send(const wc::DaemonMessage& message) const {
    const std::string bytes = wc::frame(wc::encode(message));
    ASSERT_EQ(::send(daemon, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // The worker's messages that have arrived within `wait`, its "alive" set aside into `alives`
  // (its reader thread sends them every kAlivePeriod, whatever else happens).
  std::vector<wc::WorkerMessage> received(std::chrono::milliseconds wait) {
    const auto end = std::chrono::steady_clock::now() + wait;
    std::vector<wc::WorkerMessage> out;
    char chunk[4096];
    while (std::chrono::steady_clock::now() < end) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      pollfd readable{daemon, POLLIN, 0};
      if (::poll(&readable, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0))) <= 0) {
        break;
      }
      const ssize_t n = ::recv(daemon, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n > 0) frames.append(chunk, static_cast<std::size_t>(n));
      for (;;) {
        auto frame = frames.next();
        if (!frame.ok() || !frame->has_value()) break;
        auto message = wc::decode_worker_message(**frame);
        if (!message.ok()) continue;
        if (const auto* alive = std::get_if<wc::Alive>(&*message)) {
          alives.push_back(*alive);
        } else {
          out.push_back(*message);
        }
      }
      if (!out.empty()) break;
    }
    return out;
  }
  // The next "alive" after those already seen, within `wait`.
  std::optional<wc::Alive> next_alive(std::chrono::milliseconds wait) {
    const std::size_t seen = alives.size();
    const auto end = std::chrono::steady_clock::now() + wait;
    while (alives.size() == seen && std::chrono::steady_clock::now() < end) {
      EXPECT_TRUE(received(50ms).empty()) << "only alive was expected";
    }
    if (alives.size() == seen) return std::nullopt;
    return alives.back();
  }
  wc::FrameReader frames;
  std::vector<wc::Alive> alives;
};

wc::RoundOffer offer(std::uint64_t round, std::uint64_t term, std::uint32_t rank,
                     std::uint32_t world) {
  return wc::RoundOffer{.job = "j",
                        .round = round,
                        .term = term,
                        .rank = rank,
                        .local_rank = rank,
                        .world_size = world,
                        .local_world_size = world,
                        .master_addr = "10.0.0.1",
                        .master_port = 29600};
}

WorkerEnv base_env() {
  WorkerEnv env;
  env.job_id = "j";
  env.round = 1;
  env.world_size = 3;
  env.run_id = "run";
  return env;
}

// The callback runs on the reader thread just after the round is handed over: wait for it.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(ChannelRoundSource, SaysHelloLiveAndDeliversANewerRoundFromItsThread) {
  Pair pair;
  std::atomic<std::int64_t> announced{-1};
  std::atomic<int> intact_calls{0};
  ChannelRoundSource source(WorkerChannel(std::move(pair.worker)), base_env(),
                            [&](std::int64_t round, bool intact) {
                              if (intact) intact_calls.fetch_add(1);
                              announced.store(round);
                            });
  const auto hello = pair.received(2s);
  ASSERT_EQ(hello.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<wc::Hello>(hello[0]));
  EXPECT_TRUE(std::get<wc::Hello>(hello[0]).live);
  EXPECT_FALSE(source.poll(1).has_value());

  pair.send(wc::DaemonMessage(offer(2, 5, 1, 2)));
  auto next = source.wait(1, std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->round, 2);
  EXPECT_EQ(next->rank, 1);
  EXPECT_EQ(next->world_size, 2);
  EXPECT_EQ(next->master_addr, "10.0.0.1");
  EXPECT_EQ(next->run_id, "run") << "what a round does not carry stays the base's";
  EXPECT_TRUE(eventually([&] { return announced.load() == 2; })) << "the callback got the round";
  EXPECT_TRUE(source.poll(1).has_value());
  EXPECT_FALSE(source.poll(2).has_value()) << "not newer than the current round";
  EXPECT_FALSE(source.intact(2)) << "the offer did not say intact";

  source.joined(*next);
  const auto joined = pair.received(2s);
  ASSERT_EQ(joined.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<wc::Joined>(joined[0]));
  EXPECT_EQ(std::get<wc::Joined>(joined[0]).round, 2u);
  EXPECT_EQ(std::get<wc::Joined>(joined[0]).term, 5u);

  // An intact offer (a grow of a healthy group) says so to the callback and to intact().
  wc::RoundOffer grow = offer(3, 5, 1, 3);
  grow.intact = true;
  pair.send(wc::DaemonMessage(grow));
  ASSERT_TRUE(source.wait(2, std::chrono::steady_clock::now() + 5s).has_value());
  EXPECT_TRUE(source.intact(3));
  EXPECT_FALSE(source.intact(2)) << "only the newest round is known";
  EXPECT_TRUE(eventually([&] { return announced.load() == 3; }));
  EXPECT_EQ(intact_calls.load(), 1);
}

// Twice a second the reader thread says what the training thread recorded: the steps, how long
// since the last one, and whether it waits for its peers (nested waits count once each).
TEST(ChannelRoundSource, SaysAliveWithTheStepAndWhetherItWaits) {
  Pair pair;
  ChannelRoundSource source(WorkerChannel(std::move(pair.worker)), base_env(), nullptr);
  ASSERT_EQ(pair.received(2s).size(), 1u);  // hello
  auto first = pair.next_alive(2s);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->step, 0u);
  EXPECT_FALSE(first->waiting);

  source.progress(41);
  source.waiting(true);
  source.waiting(true);
  source.waiting(false);  // one wait still open
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<wc::Alive> busy;
  while (!busy || busy->step != 41) busy = pair.next_alive(2s);
  ASSERT_TRUE(busy.has_value());
  EXPECT_TRUE(busy->waiting);
  EXPECT_LE(busy->idle_ms, static_cast<std::uint64_t>(
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count()) + 1);
  source.waiting(false);
  // The same step again keeps its time: the idle time grows.
  source.progress(41);
  auto later = pair.next_alive(2s);
  ASSERT_TRUE(later.has_value());
  EXPECT_FALSE(later->waiting);
  EXPECT_EQ(later->step, 41u);
  EXPECT_GE(later->idle_ms, busy->idle_ms + 100) << "an alive period passed in between";
}

TEST(ChannelRoundSource, AnOlderOrEqualOfferReplacesNothing) {
  Pair pair;
  std::atomic<int> calls{0};
  ChannelRoundSource source(WorkerChannel(std::move(pair.worker)), base_env(),
                            [&](std::int64_t, bool) { calls.fetch_add(1); });
  pair.send(wc::DaemonMessage(offer(4, 2, 0, 2)));
  ASSERT_TRUE(source.wait(1, std::chrono::steady_clock::now() + 5s).has_value());
  pair.send(wc::DaemonMessage(offer(3, 2, 0, 2)));  // a late, older offer
  pair.send(wc::DaemonMessage(offer(4, 2, 1, 2)));  // the same round again
  pair.send(wc::DaemonMessage(offer(5, 2, 0, 1)));  // a marker: newer
  auto newest = source.wait(4, std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->round, 5);
  EXPECT_TRUE(eventually([&] { return calls.load() >= 2; }));
  EXPECT_EQ(calls.load(), 2) << "only rounds 4 and 5 were announced";
}

TEST(ChannelRoundSource, AStopOrAClosedChannelEndsTheWaitAndSaysWhy) {
  {
    Pair pair;
    ChannelRoundSource source(WorkerChannel(std::move(pair.worker)), base_env(), nullptr);
    pair.send(wc::DaemonMessage(wc::Stop{"job cancelled"}));
    const auto begin = std::chrono::steady_clock::now();
    EXPECT_FALSE(source.wait(1, begin + 30s).has_value());
    EXPECT_LT(std::chrono::steady_clock::now() - begin, 10s) << "the stop ends the wait";
    EXPECT_NE(source.stopped().find("job cancelled"), std::string::npos) << source.stopped();
  }
  {
    Pair pair;
    ChannelRoundSource source(WorkerChannel(std::move(pair.worker)), base_env(), nullptr);
    ::close(pair.daemon);
    pair.daemon = -1;
    const auto begin = std::chrono::steady_clock::now();
    EXPECT_FALSE(source.wait(1, begin + 30s).has_value());
    EXPECT_LT(std::chrono::steady_clock::now() - begin, 10s) << "end of file ends the wait";
    // End of file, or a reset (the hello it sent was never read): either names the channel.
    EXPECT_NE(source.stopped().find("worker channel"), std::string::npos) << source.stopped();
  }
}

TEST(ChannelRoundSource, DestroyingItWhileItsThreadWaitsReturnsPromptly) {
  Pair pair;
  const auto begin = std::chrono::steady_clock::now();
  {
    ChannelRoundSource source(WorkerChannel(std::move(pair.worker)), base_env(), nullptr);
    EXPECT_FALSE(source.poll(1).has_value());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 5s);
}

}  // namespace
}  // namespace elastic::trainer
