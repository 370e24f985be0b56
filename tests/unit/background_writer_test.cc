// BackgroundWriter: one write at a time, outcomes collected once, bounded waits, and a writer
// destroyed with a job still running does not block its owner. Jobs block on a gate the test
// opens, so nothing depends on timing.
#include "trainer/background_writer.h"

#include <atomic>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace elastic::trainer {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// A job that runs until the test opens its gate.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  BackgroundWriter::Job job(std::string dir) {
    return [opened = opened, dir]() -> Result<std::string> {
      opened.wait();
      return dir;
    };
  }
};

TEST(BackgroundWriterTest, ASecondWriteIsRefusedWhileOneIsInFlight) {
  BackgroundWriter writer;
  Gate gate;
  ASSERT_TRUE(writer.try_start(10, gate.job("/ckpt/step-10")));
  EXPECT_TRUE(writer.busy());
  std::atomic<bool> second_ran{false};
  EXPECT_FALSE(writer.try_start(20, [&]() -> Result<std::string> {
    second_ran = true;
    return std::string("/ckpt/step-20");
  }));
  EXPECT_FALSE(writer.wait_idle(0ms));
  EXPECT_FALSE(writer.take_outcome().has_value());

  gate.open.set_value();
  ASSERT_TRUE(writer.wait_idle(1min));
  EXPECT_FALSE(writer.busy());
  auto outcome = writer.take_outcome();
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->step, 10);
  ASSERT_TRUE(outcome->dir.ok());
  EXPECT_EQ(*outcome->dir, "/ckpt/step-10");
  EXPECT_GE(outcome->seconds, 0);
  EXPECT_FALSE(writer.take_outcome().has_value()) << "an outcome is reported once";
  EXPECT_FALSE(second_ran.load()) << "a refused job must never run";

  // Idle again: the next write starts.
  ASSERT_TRUE(writer.try_start(30, [] { return Result<std::string>(std::string("/ckpt/30")); }));
  ASSERT_TRUE(writer.wait_idle(1min));
  EXPECT_EQ(writer.take_outcome()->step, 30);
}

TEST(BackgroundWriterTest, AFailedOrThrowingJobIsAnErrorOutcome) {
  BackgroundWriter writer;
  ASSERT_TRUE(writer.try_start(
      5, [] { return Result<std::string>(Error{"/ckpt: No space left on device."}); }));
  ASSERT_TRUE(writer.wait_idle(1min));
  auto failed = writer.take_outcome();
  ASSERT_TRUE(failed.has_value());
  ASSERT_FALSE(failed->dir.ok());
  EXPECT_EQ(failed->dir.error().message, "/ckpt: No space left on device.");

  ASSERT_TRUE(writer.try_start(6, []() -> Result<std::string> {
    throw std::runtime_error("std::bad_alloc while serialising");
  }));
  ASSERT_TRUE(writer.wait_idle(1min));
  auto thrown = writer.take_outcome();
  ASSERT_TRUE(thrown.has_value());
  ASSERT_FALSE(thrown->dir.ok());
  EXPECT_THAT(thrown->dir.error().message, HasSubstr("step 6"));
  EXPECT_THAT(thrown->dir.error().message, HasSubstr("bad_alloc"));
  // The thread survived: it still writes.
  ASSERT_TRUE(writer.try_start(7, [] { return Result<std::string>(std::string("/ckpt/7")); }));
  ASSERT_TRUE(writer.wait_idle(1min));
  EXPECT_TRUE(writer.take_outcome()->dir.ok());
}

TEST(BackgroundWriterTest, DestroyingABusyWriterDoesNotWaitForItsJob) {
  auto gate = std::make_shared<Gate>();
  auto held = std::make_shared<int>(42);  // what the job shares, released when it ends
  std::weak_ptr<int> watch = held;
  {
    BackgroundWriter writer;
    ASSERT_TRUE(writer.try_start(1, [opened = gate->opened, held]() -> Result<std::string> {
      opened.wait();
      return std::to_string(*held);
    }));
    held.reset();
    EXPECT_FALSE(writer.wait_idle(0ms));
  }  // returns although the job is still blocked
  EXPECT_FALSE(watch.expired()) << "the job still runs and holds its state";
  gate->open.set_value();
  // The detached thread finishes the job and lets go of what it held.
  const auto deadline = std::chrono::steady_clock::now() + 1min;
  while (!watch.expired() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace elastic::trainer
