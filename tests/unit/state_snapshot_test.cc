// StateSnapshot: the checkpoint written from the host copy is the one the live objects would
// have written at the moment of the copy (the optimizer's byte for byte), training may go on
// meanwhile, the buffers are allocated once, and the fence is asked before publishing. In-memory
// filesystem.
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "daemon/checkpoint/checkpoint_store.h"
#include "tests/support/result_assertions.h"
#include "tests/unit/fault_fs.h"
#include "trainer/checkpointing.h"

namespace elastic::trainer {
namespace {

using checkpoint::CheckpointRef;
using checkpoint::CheckpointStore;
using checkpoint::testing::FaultFs;
using ::testing::HasSubstr;

constexpr char kJob[] = "/ckpt/job";

// Nested modules, parameters and buffers (BatchNorm's running stats), as the trainer's models.
torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16),
                               torch::nn::ReLU(), torch::nn::Linear(16, 4));
}

void train_steps(torch::nn::Sequential& model, torch::optim::Optimizer& optimizer, int steps) {
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({32, 8})).pow(2).mean();
    loss.backward();
    optimizer.step();
  }
}

std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return std::move(out).str();
}

// What the trainer's synchronous save wrote from the live objects (model + CPU RNG state, and
// the optimizer).
std::pair<std::string, std::string> live_files(torch::nn::Module& model,
                                               torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    model_archive.write("rng_cpu", generator.get_state());
  }
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  return {archive_bytes(model_archive), archive_bytes(optimizer_archive)};
}

// The two model archives hold equal tensors under equal names (the bytes may differ in the
// pickler's memo numbering only).
void expect_same_model(const std::string& written, const std::string& reference) {
  auto load = [](const std::string& bytes, torch::nn::Sequential& model, torch::Tensor* rng) {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    model->load(archive);
    archive.read("rng_cpu", *rng);
  };
  auto a = make_model(), b = make_model();
  torch::Tensor rng_a, rng_b;
  load(written, a, &rng_a);
  load(reference, b, &rng_b);
  EXPECT_TRUE(torch::equal(rng_a, rng_b)) << "the RNG state differs";
  const auto tensors_a = a->named_parameters(), tensors_b = b->named_parameters();
  const auto buffers_a = a->named_buffers(), buffers_b = b->named_buffers();
  ASSERT_EQ(tensors_a.size(), tensors_b.size());
  ASSERT_EQ(buffers_a.size(), buffers_b.size());
  for (std::size_t i = 0; i < tensors_a.size(); ++i) {
    EXPECT_TRUE(torch::equal(tensors_a[i].value(), tensors_b[i].value())) << tensors_a[i].key();
  }
  for (std::size_t i = 0; i < buffers_a.size(); ++i) {
    EXPECT_TRUE(torch::equal(buffers_a[i].value(), buffers_b[i].value())) << buffers_a[i].key();
  }
}

TrainState state_at(std::int64_t step) {
  TrainState state;
  state.step = step;
  state.position = {0, step * 32};
  state.seed = 7;
  state.dataset_size = 1 << 20;
  state.workload = "test";
  state.world_size = 2;
  state.round = 3;
  return state;
}

class StateSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(1);
    ASSERT_OK(store_.recover());
  }

  void expect_copy_of_the_moment(torch::optim::Optimizer& optimizer) {
    train_steps(model_, optimizer, 3);
    const auto expected = live_files(*model_, optimizer);
    StateSnapshot snapshot;
    ASSERT_OK(snapshot.capture(state_at(3), *model_, optimizer));
    const std::int64_t allocations = snapshot.allocations();
    EXPECT_GT(allocations, 0);
    EXPECT_GT(snapshot.bytes(), 0);

    train_steps(model_, optimizer, 2);  // training goes on while the copy is written
    Result<CheckpointRef> ref = snapshot.write(store_, {});
    ASSERT_OK(ref);
    EXPECT_EQ(ref->step, 3);
    Result<std::string> model_file = store_.read(*ref, "model.pt");
    Result<std::string> optimizer_file = store_.read(*ref, "optimizer.pt");
    ASSERT_OK(model_file);
    ASSERT_OK(optimizer_file);
    expect_same_model(*model_file, expected.first);

    EXPECT_TRUE(*optimizer_file == expected.second) << "optimizer.pt differs from save()'s";

    // Later captures reuse every buffer.
    ASSERT_OK(snapshot.capture(state_at(5), *model_, optimizer));
    EXPECT_EQ(snapshot.allocations(), allocations);
    const auto later = live_files(*model_, optimizer);
    Result<CheckpointRef> second = snapshot.write(store_, {});
    ASSERT_OK(second);
    EXPECT_TRUE(*store_.read(*second, "optimizer.pt") == later.second);
    expect_same_model(*store_.read(*second, "model.pt"), later.first);
  }

  FaultFs fs_;
  CheckpointStore store_{fs_, kJob, 3};
  torch::nn::Sequential model_ = make_model();
};

TEST_F(StateSnapshotTest, AdamCheckpointIsTheLiveStateAtTheCopy) {
  torch::optim::Adam adam(model_->parameters(), torch::optim::AdamOptions(1e-2));
  expect_copy_of_the_moment(adam);
}

TEST_F(StateSnapshotTest, SgdCheckpointIsTheLiveStateAtTheCopy) {
  torch::optim::SGD sgd(model_->parameters(), torch::optim::SGDOptions(1e-2).momentum(0.9));
  expect_copy_of_the_moment(sgd);
}

TEST_F(StateSnapshotTest, OtherOptimizersAreSerialisedAtTheCopy) {
  torch::optim::RMSprop rmsprop(model_->parameters(), torch::optim::RMSpropOptions(1e-3));
  expect_copy_of_the_moment(rmsprop);
}

TEST_F(StateSnapshotTest, ItLoadsBackIntoFreshObjects) {
  torch::optim::Adam adam(model_->parameters(), torch::optim::AdamOptions(1e-2));
  train_steps(model_, adam, 2);
  StateSnapshot snapshot;
  ASSERT_OK(snapshot.capture(state_at(2), *model_, adam));
  ASSERT_OK(snapshot.write(store_, {}));
  auto fresh = make_model();
  torch::optim::Adam fresh_adam(fresh->parameters(), torch::optim::AdamOptions(1e-2));
  Result<TrainState> loaded = load_checkpoint(store_, 2, *fresh, fresh_adam, torch::kCPU);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->position.position, 64);
  EXPECT_EQ(loaded->round, 3);
  // One more identical step on both gives identical parameters.
  torch::manual_seed(9);
  train_steps(model_, adam, 1);
  torch::manual_seed(9);
  train_steps(fresh, fresh_adam, 1);
  const auto a = model_->parameters(), b = fresh->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
}

TEST_F(StateSnapshotTest, AFenceThatRefusesLeavesLatestAlone) {
  torch::optim::Adam adam(model_->parameters(), torch::optim::AdamOptions(1e-2));
  StateSnapshot snapshot;
  ASSERT_OK(snapshot.capture(state_at(0), *model_, adam));
  ASSERT_OK(snapshot.write(store_, {}));
  train_steps(model_, adam, 1);
  ASSERT_OK(snapshot.capture(state_at(1), *model_, adam));
  int asked = 0;
  Result<CheckpointRef> refused = snapshot.write(store_, [&]() -> Status {
    ++asked;
    return Error{"Round 3 of job j is stale: round 4 has claimed the checkpoints in /ckpt/job."};
  });
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message, HasSubstr("stale"));
  EXPECT_EQ(asked, 1);
  Result<std::optional<CheckpointRef>> latest = store_.latest();
  ASSERT_OK(latest);
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->step, 0);
}

}  // namespace
}  // namespace elastic::trainer
