// elastic-trainer end to end: real ranks, real Gloo over loopback, real checkpoints on disk.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "daemon/worker_channel/messages.h"
#include "tests/support/process.h"

namespace elastic::testing {
namespace {

using nlohmann::json;

const std::string kTrainer = ELASTIC_TRAINER_PATH;
constexpr auto kRunTimeout = std::chrono::minutes(4);

std::vector<json> events(const std::string& out, const std::string& kind) {
  std::vector<json> found;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    auto parsed = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object() && parsed.value("event", "") == kind) found.push_back(parsed);
  }
  return found;
}

json only_event(const RunResult& r, const std::string& kind) {
  auto found = events(r.out, kind);
  EXPECT_FALSE(found.empty()) << "no '" << kind << "' line in:\n" << r.out << "\n" << r.err;
  return found.empty() ? json::object() : found.back();
}

// Common flags of the quick runs: a slice of Fashion-MNIST, one intra-op thread per rank.
std::vector<std::string> quick(std::vector<std::string> extra) {
  std::vector<std::string> argv = {kTrainer,       "--model", "fmnist",         "--threads", "1",
                                   "--test-limit", "1000",    "--log-interval", "5"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::string latest(const std::string& dir) {
  std::string text = read_file(dir + "/LATEST");
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

TEST(Trainer, TwoGlooRanksReachEightyPercentOnFashionMnistInOneEpoch) {
  auto r = run({kTrainer, "--standalone", "2", "--model", "fmnist", "--epochs", "1", "--batch-size",
                "64", "--threads", "1", "--log-interval", "100"},
               {}, kRunTimeout);
  ASSERT_FALSE(r.timed_out);
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  auto epoch = only_event(r, "epoch");
  EXPECT_EQ(epoch["epoch"], 0);
  EXPECT_GE(epoch["test_accuracy"].get<double>(), 0.80) << r.out;
  auto summary = only_event(r, "summary");
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_EQ(summary["result"], "finished");
  // 60000 samples, global batch 128: 468 full steps and one of 96.
  EXPECT_EQ(summary["step"], 469);
  // Every rank ends with the same parameters.
  auto summaries = events(r.out, "summary");
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0]["param_checksum"], summaries[1]["param_checksum"]);
  std::printf("fmnist: test accuracy %.4f, epoch %.1f s\n", epoch["test_accuracy"].get<double>(),
              epoch["seconds"].get<double>());
}

TEST(Trainer, ResumeAfterKillNineIsBitExact) {
  TempDir dir;
  const std::string uninterrupted = dir / "a", interrupted = dir / "b";
  auto base = [](const std::string& ckpt) {
    return quick({"--standalone", "2", "--train-limit", "4096", "--batch-size", "32", "--max-steps",
                  "40", "--checkpoint-interval", "20", "--checkpoint-dir", ckpt});
  };
  auto full = run(base(uninterrupted), {}, kRunTimeout);
  ASSERT_TRUE(full.status.exited_with(0)) << full.err;
  const std::string expected = only_event(full, "summary")["param_checksum"];

  // Rank 0 SIGKILLs itself at step 30, between the checkpoints of steps 20 and 40. A slow disk
  // (the write delay) must not matter: the kill waits for the write it started at step 20.
  auto args = base(interrupted);
  args.insert(args.end(), {"--crash-at-step", "30", "--crash-rank", "0",
                           "--checkpoint-write-delay-ms", "300"});
  auto crashed = run(args, {}, kRunTimeout);
  ASSERT_FALSE(crashed.timed_out);
  EXPECT_FALSE(crashed.status.exited_with(0));
  EXPECT_EQ(latest(interrupted), "step-000000020");
  EXPECT_TRUE(events(crashed.out, "summary").empty()) << "a killed run must not finish";

  auto resumed = run(base(interrupted), {}, kRunTimeout);
  ASSERT_TRUE(resumed.status.exited_with(0)) << resumed.err;
  EXPECT_EQ(only_event(resumed, "resume")["step"], 20);
  auto summary = only_event(resumed, "summary");
  EXPECT_EQ(summary["step"], 40);
  EXPECT_EQ(summary["steps_this_run"], 20);
  EXPECT_EQ(summary["param_checksum"], expected) << "resumed parameters differ";
}

TEST(Trainer, ExternalKillNineLeavesACompleteCheckpointThatResumes) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  // Checkpoint every step so the kill very likely lands in the middle of a write.
  Process p(quick({"--standalone", "2", "--train-limit", "20000", "--batch-size", "32",
                   "--checkpoint-interval", "1", "--checkpoint-dir", ckpt}),
            {}, dir.path(), "trainer");
  ASSERT_TRUE(wait_until([&] { return latest(ckpt) >= "step-000000005"; }, std::chrono::minutes(2)))
      << p.err();
  p.signal(SIGKILL);  // the launcher; its ranks die with it (PR_SET_PDEATHSIG)
  ASSERT_TRUE(p.wait(std::chrono::seconds(30)).has_value());
  const std::string named = latest(ckpt);
  ASSERT_TRUE(std::filesystem::is_directory(ckpt + "/" + named)) << named;
  auto resumed = run(quick({"--standalone", "2", "--train-limit", "20000", "--batch-size", "32",
                            "--checkpoint-dir", ckpt, "--max-steps",
                            std::to_string(std::stoi(named.substr(5)) + 3)}),
                     {}, kRunTimeout);
  ASSERT_TRUE(resumed.status.exited_with(0)) << resumed.err;
  EXPECT_EQ(only_event(resumed, "resume")["step"], std::stoi(named.substr(5)));
  for (const auto& entry : std::filesystem::directory_iterator(ckpt)) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp", 0), 0u) << "leftover " << entry.path();
  }
}

// The tmp dirs of checkpoints being written (or left by a killed writer).
std::vector<std::string> tmp_dirs(const std::string& ckpt) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(ckpt)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".tmp-", 0) == 0) found.push_back(name);
  }
  return found;
}

// Rank 0 writes checkpoints on a thread of its own: a SIGKILL while one is being written (the
// writer is held up after its first file) leaves LATEST on the last complete checkpoint, from
// which the job resumes; training went on meanwhile, and the checkpoints that came due while the
// write was in flight were skipped (logged once).
TEST(Trainer, KillDuringABackgroundWriteLeavesLatestOnTheLastCompleteCheckpoint) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  auto args = [&](std::vector<std::string> extra) {
    auto argv = quick(
        {"--train-limit", "4096", "--batch-size", "32", "--no-eval", "--checkpoint-dir", ckpt});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  auto first = run(args({"--max-steps", "10"}), {}, kRunTimeout);
  ASSERT_TRUE(first.status.exited_with(0)) << first.err;
  ASSERT_EQ(latest(ckpt), "step-000000010");

  Process p(args({"--epochs", "100", "--checkpoint-interval", "2", "--checkpoint-write-delay-ms",
                  "600000"}),
            {}, dir.path(), "trainer");
  // The write of step 12 is under way (its first file is in the tmp dir) and training has gone
  // past the next checkpoint, which was skipped.
  ASSERT_TRUE(wait_until(
      [&] {
        const auto tmp = tmp_dirs(ckpt);
        return tmp.size() == 1 && std::filesystem::exists(ckpt + "/" + tmp[0] + "/model.pt") &&
               events(p.out(), "checkpoint_skipped").size() == 1 &&
               p.out().find("\"step\":20,") != std::string::npos;
      },
      std::chrono::minutes(2)))
      << p.out() << p.err();
  p.signal(SIGKILL);
  ASSERT_TRUE(p.wait(std::chrono::seconds(30)).has_value());
  const std::string out = p.out();
  EXPECT_EQ(tmp_dirs(ckpt), std::vector<std::string>{".tmp-000000012-r0"});
  EXPECT_EQ(latest(ckpt), "step-000000010");
  EXPECT_FALSE(std::filesystem::exists(ckpt + "/step-000000012"));
  EXPECT_TRUE(events(out, "checkpoint").empty()) << out;
  auto skipped = events(out, "checkpoint_skipped");
  ASSERT_EQ(skipped.size(), 1u) << "a skip is logged once:\n" << out;
  EXPECT_EQ(skipped[0]["step"], 14);
  EXPECT_EQ(skipped[0]["writing"], 12);

  auto resumed = run(args({"--max-steps", "13"}), {}, kRunTimeout);
  ASSERT_TRUE(resumed.status.exited_with(0)) << resumed.err;
  EXPECT_EQ(only_event(resumed, "resume")["step"], 10);
  EXPECT_EQ(latest(ckpt), "step-000000013");
  EXPECT_TRUE(tmp_dirs(ckpt).empty());
}

// Checkpoints due while one is written are skipped; at exit the trainer waits for the write in
// flight and then writes the final state, so the last checkpoint is complete.
TEST(Trainer, ACheckpointDueDuringAWriteIsSkippedAndTheFinalOneIsWaitedFor) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  auto r = run(quick({"--train-limit", "4096", "--batch-size", "32", "--no-eval", "--max-steps",
                      "6", "--checkpoint-interval", "1", "--checkpoint-write-delay-ms", "1000",
                      "--checkpoint-dir", ckpt}),
               {}, kRunTimeout);
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  EXPECT_EQ(latest(ckpt), "step-000000006");
  auto written = events(r.out, "checkpoint");
  ASSERT_EQ(written.size(), 2u) << r.out;
  EXPECT_EQ(written[0]["step"], 1);
  EXPECT_EQ(written[1]["step"], 6);
  EXPECT_EQ(written[1]["skipped"], 5) << "steps 2 to 6 came due while step 1 was written";
  EXPECT_EQ(events(r.out, "checkpoint_skipped").size(), 1u) << r.out;
  EXPECT_EQ(only_event(r, "summary")["step"], 6);
  EXPECT_TRUE(tmp_dirs(ckpt).empty());
}

// At exit the wait for a write is bounded: a write that never ends is reported (exit 74) and
// LATEST stays where it was.
TEST(Trainer, AWriteThatOutlastsTheExitWaitIsReported) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  auto r = run(quick({"--train-limit", "4096", "--batch-size", "32", "--no-eval", "--max-steps",
                      "3", "--checkpoint-write-delay-ms", "600000", "--checkpoint-exit-wait", "1",
                      "--checkpoint-dir", ckpt}),
               {}, kRunTimeout);
  EXPECT_TRUE(r.status.exited_with(74)) << r.err;
  EXPECT_NE(r.err.find("the checkpoint of step 3 is still being written after 1000 ms"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(ckpt + "/LATEST"));
}

// A stale round's rank 0 (a newer round of the job has published) cannot move LATEST: its
// writes are refused and reported, training goes on, and its final checkpoint fails (exit 74).
// A newer round publishes again.
TEST(Trainer, AStaleRoundCannotMoveLatestPastANewerRounds) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  auto args = [&](const std::string& max_steps) {
    return quick({"--train-limit", "4096", "--batch-size", "32", "--no-eval",
                  "--checkpoint-interval", "2", "--max-steps", max_steps, "--checkpoint-dir",
                  ckpt});
  };
  auto round = [](const char* n) {
    return std::map<std::string, std::string>{{"ELASTIC_JOB_ID", "fenced-job"},
                                              {"ELASTIC_ROUND", n}};
  };
  auto newer = run(args("10"), round("2"), kRunTimeout);
  ASSERT_TRUE(newer.status.exited_with(0)) << newer.err;
  ASSERT_EQ(latest(ckpt), "step-000000010");

  auto stale = run(args("16"), round("1"), kRunTimeout);
  EXPECT_TRUE(stale.status.exited_with(74)) << stale.err;
  EXPECT_EQ(latest(ckpt), "step-000000010");
  EXPECT_TRUE(events(stale.out, "checkpoint").empty()) << stale.out;
  auto failed = events(stale.out, "checkpoint_failed");
  ASSERT_FALSE(failed.empty()) << stale.out;
  EXPECT_EQ(failed[0]["step"], 12);
  EXPECT_NE(failed[0]["error"].get<std::string>().find(
                "Round 1 of job fenced-job is stale: round 2 has claimed"),
            std::string::npos)
      << failed[0];
  EXPECT_NE(stale.out.find("\"step\":15,"), std::string::npos) << "training went on:\n"
                                                               << stale.out;
  EXPECT_TRUE(tmp_dirs(ckpt).empty());

  auto newest = run(args("12"), round("3"), kRunTimeout);
  ASSERT_TRUE(newest.status.exited_with(0)) << newest.err;
  EXPECT_EQ(only_event(newest, "resume")["step"], 10);
  EXPECT_EQ(latest(ckpt), "step-000000012");
}

TEST(Trainer, WorldSizeChangeContinuesFromTheSameGlobalPosition) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt", trace = dir / "trace";
  constexpr int kSamples = 3000;
  auto common = [&](int ranks, std::vector<std::string> extra) {
    auto argv = quick({"--standalone", std::to_string(ranks), "--train-limit",
                       std::to_string(kSamples), "--batch-size", "32", "--checkpoint-dir", ckpt,
                       "--trace-samples", trace, "--no-eval"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  // 2 ranks: 20 steps of 64 samples = position 1280.
  auto first = run(common(2, {"--max-steps", "20"}), {}, kRunTimeout);
  ASSERT_TRUE(first.status.exited_with(0)) << first.err;
  EXPECT_EQ(only_event(first, "summary")["position"], 1280);
  // 3 ranks (ELASTIC_ROUND 1): 10 steps of 96 samples, from 1280 to 2240.
  auto second = run(common(3, {"--max-steps", "30"}), {{"ELASTIC_ROUND", "1"}}, kRunTimeout);
  ASSERT_TRUE(second.status.exited_with(0)) << second.err;
  auto resume = only_event(second, "resume");
  EXPECT_EQ(resume["position"], 1280);
  EXPECT_EQ(resume["from_world_size"], 2);
  EXPECT_EQ(only_event(second, "summary")["position"], 2240);
  // 5 ranks to the end of the epoch (760 samples: 4 steps of 160 and one of 120).
  auto third = run(common(5, {"--epochs", "1"}), {{"ELASTIC_ROUND", "2"}}, kRunTimeout);
  ASSERT_TRUE(third.status.exited_with(0)) << third.err;
  EXPECT_EQ(only_event(third, "resume")["position"], 2240);
  auto summary = only_event(third, "summary");
  EXPECT_EQ(summary["epoch"], 1);
  EXPECT_EQ(summary["position"], 0);
  EXPECT_EQ(summary["step"], 35);

  // Every sample of epoch 0 was trained on exactly once across the three world sizes.
  std::map<long, int> seen;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().filename().string().rfind("trace.", 0) != 0) continue;
    ++files;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      long epoch = -1, index = 0;
      fields >> epoch;
      ASSERT_EQ(epoch, 0);
      while (fields >> index) ++seen[index];
    }
  }
  EXPECT_EQ(files, 2 + 3 + 5);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kSamples));
  for (const auto& [index, count] : seen) {
    ASSERT_EQ(count, 1) << "sample " << index;
    ASSERT_LT(index, kSamples);
  }
}

TEST(Trainer, SigtermFinishesTheStepCheckpointsAndExits75) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  Process p(quick({"--standalone", "2", "--batch-size", "32", "--checkpoint-dir", ckpt, "--epochs",
                   "50"}),
            {}, dir.path(), "trainer");
  ASSERT_TRUE(wait_until([&] { return p.out().find("\"event\":\"step\"") != std::string::npos; },
                         std::chrono::minutes(2)))
      << p.err();
  p.signal(SIGTERM);
  auto status = p.wait(std::chrono::minutes(1));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->exited_with(75)) << p.err();
  auto out = p.out();
  auto summaries = events(out, "summary");
  ASSERT_EQ(summaries.size(), 2u) << out;
  EXPECT_EQ(summaries[0]["result"], "stopped");
  EXPECT_EQ(summaries[0]["step"], summaries[1]["step"]) << "ranks must stop after the same step";
  const int step = summaries[0]["step"];
  EXPECT_EQ(latest(ckpt),
            "step-" + std::string(9 - std::to_string(step).size(), '0') + std::to_string(step));
  EXPECT_FALSE(events(out, "checkpoint").empty());
}

TEST(Trainer, OverlapOnAndOffGiveIdenticalParameters) {
  auto args = quick({"--standalone", "2", "--train-limit", "2048", "--batch-size", "32",
                     "--max-steps", "15", "--no-eval", "--bucket-mb", "0.05"});
  auto on = run(args, {}, kRunTimeout);
  args.push_back("--no-overlap");
  auto off = run(args, {}, kRunTimeout);
  ASSERT_TRUE(on.status.exited_with(0)) << on.err;
  ASSERT_TRUE(off.status.exited_with(0)) << off.err;
  EXPECT_GT(only_event(on, "start")["buckets"].get<int>(), 2) << "small buckets expected";
  EXPECT_EQ(only_event(on, "summary")["param_checksum"],
            only_event(off, "summary")["param_checksum"]);
}

TEST(Trainer, TwoRanksAverageLikeOneRankWithTheSameGlobalBatch) {
  auto two = run(quick({"--standalone", "2", "--train-limit", "2048", "--batch-size", "32",
                        "--max-steps", "10", "--no-eval", "--optimizer", "sgd", "--lr", "0.01"}),
                 {}, kRunTimeout);
  auto one = run(quick({"--train-limit", "2048", "--batch-size", "64", "--max-steps", "10",
                        "--no-eval", "--optimizer", "sgd", "--lr", "0.01"}),
                 {}, kRunTimeout);
  ASSERT_TRUE(two.status.exited_with(0)) << two.err;
  ASSERT_TRUE(one.status.exited_with(0)) << one.err;
  const double a = only_event(two, "summary")["param_abs_sum"];
  const double b = only_event(one, "summary")["param_abs_sum"];
  EXPECT_NEAR(a, b, 1e-4 * b) << "the all-reduce must average, not sum";
  EXPECT_NEAR(only_event(two, "summary")["loss"].get<double>(),
              only_event(one, "summary")["loss"].get<double>(), 1e-3);
}

TEST(Trainer, GptShapedModelLearnsSyntheticSequences) {
  auto r = run({kTrainer, "--standalone", "2",   "--model",       "gpt",  "--threads",
                "1",      "--gpt-layers", "2",   "--gpt-width",   "64",   "--gpt-heads",
                "4",      "--gpt-vocab",  "128", "--gpt-context", "32",   "--batch-size",
                "8",      "--max-steps",  "60",  "--lr",          "3e-3", "--log-interval",
                "1"},
               {}, kRunTimeout);
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  auto steps = events(r.out, "step");
  ASSERT_EQ(steps.size(), 60u);
  EXPECT_LT(steps.back()["loss"].get<double>(), 0.5 * steps.front()["loss"].get<double>()) << r.out;
  EXPECT_EQ(only_event(r, "start")["model"], "gpt");
}

// Two Gloo ranks of the GPT model, run twice with the same seed, end with the same parameters.
// They did not while the batch's token tensor aliased a vector freed before backward (autograd
// reads the embedding's indices and the loss's targets there): a use after free on CPU.
TEST(Trainer, TwoRanksOfTheGptModelAreReproducible) {
  const std::vector<std::string> args = {
      kTrainer, "--standalone", "2",  "--model",     "gpt", "--threads",   "1",    "--gpt-layers",
      "2",      "--gpt-width",  "64", "--gpt-heads", "2",   "--gpt-vocab", "256",  "--gpt-context",
      "32",     "--batch-size", "4",  "--max-steps", "8",   "--bucket-mb", "0.05", "--no-eval"};
  std::set<std::string> checksums;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto r = run(args, {}, kRunTimeout);
    ASSERT_TRUE(r.status.exited_with(0)) << r.err;
    EXPECT_GT(only_event(r, "start")["buckets"].get<int>(), 1) << "overlapped buckets expected";
    for (const json& summary : events(r.out, "summary")) {
      checksums.insert(summary["param_checksum"].get<std::string>());
    }
  }
  EXPECT_EQ(checksums.size(), 1u) << "the same seed gave different parameters";
}

// Control values (stop flag, loss) are read one step late so the host never waits for the GPU;
// that must not change the arithmetic: the same parameters as reading them every step.
TEST(Trainer, ReadingControlValuesLateChangesNoParameter) {
  auto args = quick({"--standalone", "2", "--train-limit", "2048", "--batch-size", "32",
                     "--max-steps", "10", "--no-eval"});  // step lines at 5 and 10
  auto late = run(args, {}, kRunTimeout);
  args.push_back("--sync-every-step");
  auto synced = run(args, {}, kRunTimeout);
  ASSERT_TRUE(late.status.exited_with(0)) << late.err;
  ASSERT_TRUE(synced.status.exited_with(0)) << synced.err;
  EXPECT_EQ(only_event(late, "summary")["param_checksum"],
            only_event(synced, "summary")["param_checksum"]);
  EXPECT_EQ(only_event(late, "summary")["loss"], only_event(synced, "summary")["loss"]);
  // The step lines show that step's own loss, read when it is logged.
  const auto late_steps = events(late.out, "step"), synced_steps = events(synced.out, "step");
  ASSERT_EQ(late_steps.size(), 2u) << late.out;
  ASSERT_EQ(synced_steps.size(), 2u) << synced.out;
  for (std::size_t i = 0; i < late_steps.size(); ++i)
    EXPECT_EQ(late_steps[i]["loss"], synced_steps[i]["loss"]);
}

TEST(Trainer, ProfileWritesAChromeTraceOrSaysWhyNot) {
  TempDir dir;
  const std::string prefix = dir / "trace";
  auto r = run({kTrainer, "--model",        "gpt", "--threads",    "1",    "--gpt-layers",
                "1",      "--gpt-width",    "32",  "--gpt-heads",  "2",    "--gpt-vocab",
                "64",     "--gpt-context",  "16",  "--batch-size", "4",    "--max-steps",
                "6",      "--warmup-steps", "2",   "--profile",    prefix, "--profile-steps",
                "2"},
               {}, kRunTimeout);
  ASSERT_TRUE(r.status.exited_with(0)) << r.err;
  if (r.err.find("cannot start the profiler") != std::string::npos ||
      r.err.find("USE_KINETO") != std::string::npos) {
    EXPECT_EQ(r.err.find("Exception raised from"), std::string::npos) << "one line, no backtrace";
    GTEST_SKIP() << "this LibTorch cannot write traces: " << r.err;
  }
  const std::string text = read_file(prefix + ".rank0.json");
  auto trace = json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(trace.is_object()) << text.substr(0, 300);
  EXPECT_FALSE(trace["traceEvents"].empty());
  EXPECT_NE(r.err.find("profile of steps 3..4 written"), std::string::npos) << r.err;
}

// A loopback port that is free now. Rank 0's store binds it a moment later (the trainer's own
// launcher does the same); another process taking it in between fails the run loudly.
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

// The survivor of a peer that is SIGKILLed mid-training exits 69 ("store, peer or collective
// failure") every time, never 1. Where the kill lands decides what the survivor sees: an EOF, a
// reset or a broken pipe from Gloo's transport (gloo::IoException), or a store error
// (c10::Error); small buckets overlap many collectives with the backward pass, so the kill lands
// at different points of them. Both ranks run without the launcher, which would SIGTERM the
// survivor (exit 75) as soon as the victim died.
TEST(Trainer, TheSurvivorOfAKilledPeerExits69EveryTime) {
  constexpr int kRuns = 6;
  std::set<std::string> errors_seen;
  for (int attempt = 0; attempt < kRuns; ++attempt) {
    TempDir dir;
    const int victim = attempt % 2, survivor = 1 - victim;
    const int port = free_loopback_port();
    ASSERT_GT(port, 0);
    std::vector<std::unique_ptr<Process>> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      ranks.push_back(std::make_unique<Process>(
          quick({"--train-limit", "4096", "--batch-size", "32", "--max-steps", "1000", "--no-eval",
                 "--bucket-mb", "0.05", "--timeout", "60", "--crash-at-step",
                 std::to_string(2 + attempt), "--crash-rank", std::to_string(victim)}),
          std::map<std::string, std::string>{{"RANK", std::to_string(rank)},
                                             {"LOCAL_RANK", std::to_string(rank)},
                                             {"WORLD_SIZE", "2"},
                                             {"LOCAL_WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "127.0.0.1"},
                                             {"MASTER_PORT", std::to_string(port)}},
          dir.path(), "rank" + std::to_string(rank)));
    }
    const auto killed = ranks[victim]->wait(std::chrono::minutes(2));
    ASSERT_TRUE(killed.has_value()) << "attempt " << attempt << ": the victim never crashed";
    EXPECT_EQ(killed->signal, SIGKILL) << ranks[victim]->err();
    const auto status = ranks[survivor]->wait(std::chrono::minutes(2));
    ASSERT_TRUE(status.has_value())
        << "attempt " << attempt << ": rank " << survivor << " still runs after its peer died";
    const std::string err = ranks[survivor]->err();
    EXPECT_TRUE(status->exited_with(69))
        << "attempt " << attempt << ": rank " << survivor << " ended with code " << status->code
        << ", signal " << status->signal << " after rank " << victim << " was killed:\n"
        << err;
    const auto line = err.find("elastic-trainer: training failed");
    if (line != std::string::npos)
      errors_seen.insert(err.substr(line, err.find('\n', line) - line));
  }
  for (const std::string& error : errors_seen) std::printf("survivor: %s\n", error.c_str());
}

TEST(Trainer, BadInputGetsOneClearErrorAndAUsageCode) {
  auto bad_flag = run({kTrainer, "--batch-size", "zero"}, {}, std::chrono::seconds(60));
  EXPECT_TRUE(bad_flag.status.exited_with(64));
  EXPECT_NE(bad_flag.err.find("--batch-size"), std::string::npos) << bad_flag.err;

  auto bad_env = run({kTrainer}, {{"RANK", "5"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}},
                     std::chrono::seconds(60));
  EXPECT_TRUE(bad_env.status.exited_with(64));
  EXPECT_NE(bad_env.err.find("RANK=5 must be smaller than WORLD_SIZE=2"), std::string::npos)
      << bad_env.err;

  TempDir empty;
  auto no_data = run({kTrainer, "--data-dir", empty.path()}, {}, std::chrono::seconds(60));
  EXPECT_TRUE(no_data.status.exited_with(66));
  EXPECT_NE(no_data.err.find(empty.path() + "/train-images-idx3-ubyte"), std::string::npos)
      << no_data.err;
}

// ---- live re-formation (--round-file): the survivors keep their processes and their state.

// Announces the next round to the worker reading `file`, atomically (write, then rename).
void announce(const std::string& file, int rank, int world, int port, int round) {
  {
    std::ofstream out(file + ".tmp");
    out << "# round " << round << "\nRANK=" << rank << "\nLOCAL_RANK=" << rank
        << "\nWORLD_SIZE=" << world << "\nLOCAL_WORLD_SIZE=" << world
        << "\nMASTER_ADDR=127.0.0.1\nMASTER_PORT=" << port << "\nELASTIC_ROUND=" << round << "\n";
  }
  ASSERT_EQ(std::rename((file + ".tmp").c_str(), file.c_str()), 0) << file;
}

// The flags of a live worker `name` that traces its samples to dir/trace-<name>.*.
std::vector<std::string> live_flags(const TempDir& dir, const std::string& name,
                                    std::vector<std::string> extra) {
  std::vector<std::string> flags = {"--train-limit",
                                    "4096",
                                    "--batch-size",
                                    "16",
                                    "--max-steps",
                                    "100000",
                                    "--no-eval",
                                    "--timeout",
                                    "30",
                                    "--reform-timeout",
                                    "60",
                                    "--reform-checksums",
                                    "--trace-samples",
                                    dir / ("trace-" + name)};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return quick(flags);
}

// The environment of `rank` of `world` in `round`; no checkpoint directory at all, whatever the
// test's environment says.
std::map<std::string, std::string> live_env(int rank, int world, int port, int round) {
  return {{"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"ELASTIC_ROUND", std::to_string(round)},
          {"ELASTIC_CHECKPOINT_DIR", ""},
          {"ELASTIC_CONTROL_SOCKET", ""}};
}

// One live worker: its round file and its process, started as `rank` of `world` in `round`.
struct LiveWorker {
  std::string round_file;
  std::unique_ptr<Process> process;

  LiveWorker(const TempDir& dir, const std::string& name, int rank, int world, int port, int round)
      : round_file(dir / (name + ".round")) {
    process = std::make_unique<Process>(live_flags(dir, name, {"--round-file", round_file}),
                                        live_env(rank, world, port, round), dir.path(), name);
  }

  // The worker's `kind` event of `round`, if it printed one.
  std::optional<json> event_of_round(const std::string& kind, int round) const {
    for (const json& e : events(process->out(), kind)) {
      if (e.value("round", -1) == round) return e;
    }
    return std::nullopt;
  }
};

double monotonic_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Three ranks train; rank 0 (the store's host) is SIGKILLed; the two survivors are told round 2
// and re-form in place: no checkpoint exists anywhere, they agree on the step and go on with
// identical parameters. Then a new process joins (round 3) with no state and receives it live
// from the running ranks; all three have identical parameters and training continues. Every
// sample the job trained on was trained on once: the sampler went on from the same global
// position in each new world. Prints the time from the kill to the survivors' first step.
TEST(TrainerLive, SurvivorsReformInPlaceAndAJoinerReceivesTheStateLive) {
  TempDir dir;
  const int port1 = free_loopback_port(), port2 = free_loopback_port(),
            port3 = free_loopback_port();
  ASSERT_GT(port1, 0);
  std::vector<std::unique_ptr<LiveWorker>> workers;
  for (int rank = 0; rank < 3; ++rank) {
    workers.push_back(
        std::make_unique<LiveWorker>(dir, "w" + std::to_string(rank), rank, 3, port1, 1));
  }
  LiveWorker &victim = *workers[0], &b = *workers[1], &c = *workers[2];
  ASSERT_TRUE(wait_until(
      [&] {
        auto steps = events(victim.process->out(), "step");
        return !steps.empty() && steps.back()["step"].get<int>() >= 5;
      },
      std::chrono::minutes(2)))
      << victim.process->err();

  // ---- shrink: the kill, then the next round for the survivors (what their daemons would say)
  victim.process->signal(SIGKILL);
  const double killed_at = monotonic_now();
  ASSERT_TRUE(victim.process->wait(std::chrono::seconds(30)).has_value());
  announce(b.round_file, 0, 2, port2, 2);
  announce(c.round_file, 1, 2, port2, 2);
  const double announced_at = monotonic_now();
  ASSERT_TRUE(wait_until(
      [&] { return b.event_of_round("reformed_step", 2) && c.event_of_round("reformed_step", 2); },
      std::chrono::minutes(1)))
      << "b:\n"
      << b.process->err() << "\nc:\n"
      << c.process->err();
  const json b2 = *b.event_of_round("reform", 2), c2 = *c.event_of_round("reform", 2);
  EXPECT_EQ(b2["step"], c2["step"]) << "the survivors must agree on the step";
  EXPECT_EQ(b2["position"], c2["position"]);
  EXPECT_EQ(b2["param_checksum"], c2["param_checksum"]) << "survivors' parameters differ";
  EXPECT_EQ(b2["world_size"], 2);
  // The abort ends the old group's collectives at once: none is left to wait out its timeout.
  for (const auto* w : {&b, &c}) {
    EXPECT_EQ(w->process->err().find("left to end on its own"), std::string::npos)
        << w->process->err();
  }
  const json first = *b.event_of_round("reformed_step", 2);
  const double first_step = first["monotonic_s"];
  const double reformed = first_step - first["since_reform_s"].get<double>();
  std::printf(
      "live re-formation: kill -> survivors' first step %.3f s (round announced %.3f s "
      "after the kill; re-formed %.3f s after that: abandon %.3f s, group %.3f s, "
      "agreement %.3f s; the first step %.3f s)\n",
      first_step - killed_at, announced_at - killed_at, reformed - announced_at,
      b2["abandon_s"].get<double>(), b2["form_s"].get<double>(), b2["agree_s"].get<double>(),
      first_step - reformed);
  const int agreed_step = b2["step"];
  // The victim completed at least the agreed step (it counts only steps every survivor did).
  EXPECT_GE(agreed_step, 5);

  // ---- grow: a new process with no state joins round 3 and receives the state live
  const int resumed_at = (*b.event_of_round("reformed_step", 2))["step"];
  ASSERT_TRUE(wait_until(
      [&] {
        auto steps = events(b.process->out(), "step");
        return !steps.empty() && steps.back()["step"].get<int>() >= resumed_at + 3;
      },
      std::chrono::minutes(1)));
  LiveWorker joiner(dir, "w3", 2, 3, port3, 3);
  announce(b.round_file, 0, 3, port3, 3);
  announce(c.round_file, 1, 3, port3, 3);
  ASSERT_TRUE(wait_until(
      [&] {
        return joiner.event_of_round("reform", 3) && b.event_of_round("reformed_step", 3) &&
               c.event_of_round("reformed_step", 3);
      },
      std::chrono::minutes(1)))
      << "joiner:\n"
      << joiner.process->err() << "\nb:\n"
      << b.process->err();
  const json b3 = *b.event_of_round("reform", 3), c3 = *c.event_of_round("reform", 3),
             j3 = *joiner.event_of_round("reform", 3);
  EXPECT_EQ(j3["joined"], true);
  EXPECT_EQ(j3["receivers"], json::array({2})) << j3;
  EXPECT_EQ(j3["step"], b3["step"]);
  EXPECT_EQ(j3["position"], b3["position"]);
  EXPECT_EQ(j3["param_checksum"], b3["param_checksum"]) << "the joiner did not get the state";
  EXPECT_EQ(c3["param_checksum"], b3["param_checksum"]);
  const int grown_at = b3["step"];
  // The running ranks' pause includes waiting in the new group for the joiner to start up: a
  // daemon announces the round once the joiner is up, the test does at once.
  const double b3_step = (*b.event_of_round("reformed_step", 3))["since_reform_s"];
  std::printf(
      "live grow: running ranks' pause %.3f s (abandon %.3f s, group %.3f s, agreement "
      "%.3f s, state transfer %.3f s, first step %.3f s)\n",
      b3["abandon_s"].get<double>() + b3["form_s"].get<double>() + b3["agree_s"].get<double>() +
          b3["transfer_s"].get<double>() + b3_step,
      b3["abandon_s"].get<double>(), b3["form_s"].get<double>(), b3["agree_s"].get<double>(),
      b3["transfer_s"].get<double>(), b3_step);
  ASSERT_TRUE(wait_until(
      [&] {
        auto steps = events(b.process->out(), "step");
        return !steps.empty() && steps.back()["step"].get<int>() >= grown_at + 3;
      },
      std::chrono::minutes(1)))
      << "training did not continue in round 3";

  // ---- stop: all three stop after the same step with identical parameters
  for (auto* w : {&b, &c, &joiner}) w->process->signal(SIGTERM);
  std::set<std::string> checksums;
  std::set<int> last_steps;
  long final_position = -1;
  for (auto* w : {&b, &c, &joiner}) {
    auto status = w->process->wait(std::chrono::minutes(1));
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(status->exited_with(75)) << w->process->err();
    const auto summaries = events(w->process->out(), "summary");
    ASSERT_EQ(summaries.size(), 1u) << w->process->out();
    EXPECT_EQ(summaries[0]["round"], 3);
    EXPECT_EQ(summaries[0]["world_size"], 3);
    checksums.insert(summaries[0]["param_checksum"].get<std::string>());
    last_steps.insert(summaries[0]["step"].get<int>());
    final_position = summaries[0]["position"].get<long>();
    EXPECT_TRUE(events(w->process->out(), "resume").empty()) << "nothing may resume from disk";
    EXPECT_TRUE(events(w->process->out(), "checkpoint").empty());
  }
  EXPECT_EQ(checksums.size(), 1u) << "ranks ended with different parameters";
  EXPECT_EQ(last_steps.size(), 1u);
  // No checkpoint anywhere: nothing but logs, round files and sample traces in the test's dir.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name.rfind("w", 0) == 0 || name.rfind("trace-", 0) == 0) << entry.path();
    EXPECT_FALSE(entry.is_directory()) << entry.path();
  }

  // Every sample trained on (epoch 0 throughout) was trained on once, and they are exactly the
  // first `final_position` of the epoch: nothing repeated or skipped across the three worlds.
  // Steps of a round past the step the next round agreed on (a rank whose collective completed
  // where a peer's failed) do not count: they were rolled back and trained again.
  const std::map<std::string, int> steps_that_count = {{".round1.", agreed_step},
                                                       {".round2.", grown_at - agreed_step}};
  std::map<long, int> seen;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("trace-", 0) != 0) continue;
    int limit = -1;
    for (const auto& [round, steps] : steps_that_count) {
      if (name.find(round) != std::string::npos) limit = steps;
    }
    std::ifstream in(entry.path());
    int line_number = 0;
    for (std::string line; std::getline(in, line);) {
      if (limit >= 0 && ++line_number > limit) break;
      std::istringstream fields(line);
      long epoch = -1, index = 0;
      fields >> epoch;
      ASSERT_EQ(epoch, 0) << name;
      while (fields >> index) ++seen[index];
    }
  }
  EXPECT_EQ(static_cast<long>(seen.size()), final_position);
  for (const auto& [index, count] : seen) ASSERT_EQ(count, 1) << "sample " << index;
}


// The daemon's side of one worker's channel, played by the test: the worker gets one end of a
// socket pair as a descriptor it inherits (ELASTIC_WORKER_FD), the test keeps the other.
class ChannelPeer {
 public:
  ChannelPeer() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    ours_ = fds[0];
    theirs_ = fds[1];
    ::fcntl(ours_, F_SETFD, FD_CLOEXEC);
  }
  ~ChannelPeer() {
    if (ours_ >= 0) ::close(ours_);
    close_theirs();
  }
  ChannelPeer(const ChannelPeer&) = delete;
  ChannelPeer& operator=(const ChannelPeer&) = delete;
  int theirs() const { return theirs_; }
  // After the worker started: only the worker holds its end.
  void close_theirs() {
    if (theirs_ >= 0) ::close(theirs_);
    theirs_ = -1;
  }
  void offer(const worker_channel::RoundOffer& round) {
    const std::string bytes = worker_channel::frame(worker_channel::encode(
        worker_channel::DaemonMessage(round)));
    ASSERT_EQ(::send(ours_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // Every message the worker has sent so far (reads what has arrived, never blocks long).
  const std::vector<worker_channel::WorkerMessage>& received() {
    char chunk[4096];
    pollfd ready{ours_, POLLIN, 0};
    while (::poll(&ready, 1, 0) > 0) {
      const ssize_t n = ::recv(ours_, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n <= 0) break;
      frames_.append(chunk, static_cast<std::size_t>(n));
    }
    for (;;) {
      auto frame = frames_.next();
      EXPECT_TRUE(frame.ok());
      if (!frame.ok() || !frame->has_value()) break;
      auto message = worker_channel::decode_worker_message(**frame);
      EXPECT_TRUE(message.ok()) << **frame;
      if (message.ok()) messages_.push_back(*message);
    }
    return messages_;
  }
  bool said_hello_live() {
    for (const auto& m : received()) {
      if (const auto* hello = std::get_if<worker_channel::Hello>(&m)) return hello->live;
    }
    return false;
  }
  std::optional<worker_channel::Joined> joined(std::uint64_t round) {
    for (const auto& m : received()) {
      const auto* j = std::get_if<worker_channel::Joined>(&m);
      if (j != nullptr && j->round == round) return *j;
    }
    return std::nullopt;
  }

 private:
  int ours_ = -1;
  int theirs_ = -1;
  worker_channel::FrameReader frames_;
  std::vector<worker_channel::WorkerMessage> messages_;
};

// A live trainer under a worker channel (the test plays the daemon through `peer`), started as
// `rank` of `world` in `round`, tracing its samples to dir/trace-<name>.*.
std::unique_ptr<Process> channel_worker(const TempDir& dir, const std::string& name,
                                        ChannelPeer& peer, int rank, int world, int port,
                                        int round) {
  auto env = live_env(rank, world, port, round);
  env["ELASTIC_JOB_ID"] = "live";
  env["ELASTIC_WORKER_FD"] = std::to_string(peer.theirs());
  auto worker = std::make_unique<Process>(live_flags(dir, name, {}), env, dir.path(), name);
  peer.close_theirs();
  return worker;
}

bool reached_step(const Process& worker, int step) {
  auto steps = events(worker.out(), "step");
  return !steps.empty() && steps.back()["step"].get<int>() >= step;
}

// Ranks 0..world-1 of round 1 on `port`, each under a channel of its own, trained past step 5.
void start_channel_job(const TempDir& dir, int world, int port,
                       std::vector<std::unique_ptr<ChannelPeer>>& peers,
                       std::vector<std::unique_ptr<Process>>& workers) {
  for (int rank = 0; rank < world; ++rank) {
    peers.push_back(std::make_unique<ChannelPeer>());
    workers.push_back(
        channel_worker(dir, "w" + std::to_string(rank), *peers.back(), rank, world, port, 1));
  }
  ASSERT_TRUE(wait_until([&] { return reached_step(*workers[0], 5); }, std::chrono::minutes(2)))
      << workers[0]->err();
}

// Whether something accepts connections at 127.0.0.1:port (a round's store is up).
bool listening(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return connected;
}

// What a daemon offers `rank` of `world` in `round` (term 7), on this host.
worker_channel::RoundOffer offer_of(int round, int rank, int world, int port, bool intact) {
  return worker_channel::RoundOffer{.job = "live",
                                    .round = static_cast<std::uint64_t>(round),
                                    .term = 7,
                                    .rank = static_cast<std::uint32_t>(rank),
                                    .local_rank = static_cast<std::uint32_t>(rank),
                                    .world_size = static_cast<std::uint32_t>(world),
                                    .local_world_size = static_cast<std::uint32_t>(world),
                                    .master_addr = "127.0.0.1",
                                    .master_port = static_cast<std::uint32_t>(port),
                                    .intact = intact};
}

// The `kind` event of `round` in a worker's output, if it printed one.
std::optional<json> event_in_round(const Process& worker, const std::string& kind, int round) {
  for (const json& e : events(worker.out(), kind)) {
    if (e.value("round", -1) == round) return e;
  }
  return std::nullopt;
}

// SIGTERM to every worker: each stops after the same step (exit 75) with the same parameters.
// Returns the position they stopped at.
long stop_together(const std::vector<Process*>& workers, int round) {
  for (Process* w : workers) w->signal(SIGTERM);
  std::set<std::string> checksums;
  std::set<int> last_steps;
  long position = -1;
  for (Process* w : workers) {
    auto status = w->wait(std::chrono::minutes(1));
    EXPECT_TRUE(status.has_value());
    if (!status) continue;
    EXPECT_TRUE(status->exited_with(75)) << w->err();
    const auto summaries = events(w->out(), "summary");
    EXPECT_EQ(summaries.size(), 1u) << w->out();
    if (summaries.size() != 1) continue;
    EXPECT_EQ(summaries[0]["round"], round);
    checksums.insert(summaries[0]["param_checksum"].get<std::string>());
    last_steps.insert(summaries[0]["step"].get<int>());
    position = summaries[0]["position"].get<long>();
  }
  EXPECT_EQ(checksums.size(), 1u) << "ranks ended with different parameters";
  EXPECT_EQ(last_steps.size(), 1u);
  return position;
}

// Three ranks under worker channels; rank 2 is stopped (SIGSTOP: nothing closes its
// connections, so the others' collective would wait out its 30 s timeout) and the daemons offer
// round 2 to the other two, `intact` or not. Both must be training in round 2 long before that
// timeout, answer "joined" with the round's term and end with the same parameters.
void a_stuck_rank_is_left_behind(bool intact) {
  TempDir dir;
  const int port1 = free_loopback_port(), port2 = free_loopback_port();
  ASSERT_GT(port1, 0);
  std::vector<std::unique_ptr<ChannelPeer>> peers;
  std::vector<std::unique_ptr<Process>> workers;
  ASSERT_NO_FATAL_FAILURE(start_channel_job(dir, 3, port1, peers, workers));
  for (auto& peer : peers) EXPECT_TRUE(peer->said_hello_live());

  workers[2]->signal(SIGSTOP);
  const double stopped_at = monotonic_now();
  for (int rank = 0; rank < 2; ++rank) peers[rank]->offer(offer_of(2, rank, 2, port2, intact));
  auto reformed = [&](int rank) {
    return event_in_round(*workers[rank], "reformed_step", 2).has_value();
  };
  ASSERT_TRUE(wait_until([&] { return reformed(0) && reformed(1); }, std::chrono::seconds(60)))
      << workers[0]->err() << workers[1]->err();
  const double took = monotonic_now() - stopped_at;
  std::printf("%s round -> both survivors' first step in round 2: %.3f s\n",
              intact ? "intact" : "channel", took);
  // Far below the collective's 30 s timeout: the group was aborted, not waited out.
  EXPECT_LT(took, 15.0);
  for (int rank = 0; rank < 2; ++rank) {
    const auto joined = peers[rank]->joined(2);
    ASSERT_TRUE(joined.has_value()) << "rank " << rank << " did not answer joined";
    EXPECT_EQ(joined->term, 7u);
  }
  if (intact) {
    // No step to switch at could be reached: the safety net aborted the group. The first one
    // (Gloo: it closes the group's connections) fails the other rank's collective at once, so
    // that one may re-form for the failure before its own net fires.
    int safety_aborts = 0;
    for (int rank = 0; rank < 2; ++rank) {
      const json r = *event_in_round(*workers[rank], "reform", 2);
      EXPECT_EQ(r["intact"], false) << r;
      if (r.value("safety_abort", false)) {
        ++safety_aborts;
        EXPECT_NE(workers[rank]->err().find("did not leave round 1 at an agreed step"),
                  std::string::npos)
            << workers[rank]->err();
      }
    }
    EXPECT_GE(safety_aborts, 1) << workers[0]->out() << workers[1]->out();
  }
  workers[2]->signal(SIGKILL);
  stop_together({workers[0].get(), workers[1].get()}, 2);
}

// Under elasticd's worker channel (no --round-file): the workers say hello (live), a stopped
// peer is left behind as soon as the channel announces the next round: the source's thread
// aborts the stuck group, the survivors re-form in place and answer "joined" with the round's
// term.
TEST(TrainerLive, TheChannelsRoundEndsAStuckCollectiveAtOnce) {
  a_stuck_rank_is_left_behind(/*intact=*/false);
}

// The daemons saw no failure and offered an intact round, but a rank of the old group is stuck.
// The others cannot reach a step to switch at; the safety net aborts their group a bounded time
// after the offer, and they re-form as after any failure.
TEST(TrainerLive, AFailureDuringAPendingIntactSwitchIsCaughtByTheSafetyAbort) {
  a_stuck_rank_is_left_behind(/*intact=*/true);
}

// Every sample in the traces of `dir` (epoch 0 throughout), counted: a step lost or applied
// twice shows as a gap or a count of 2.
std::map<long, int> traced_samples(const TempDir& dir) {
  std::map<long, int> seen;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("trace-", 0) != 0) continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      long epoch = -1, index = 0;
      fields >> epoch;
      EXPECT_EQ(epoch, 0) << name;
      while (fields >> index) ++seen[index];
    }
  }
  return seen;
}

// A grow of a healthy job (the daemon's offer says "intact"): the two running ranks do not abort
// their group; they agree (through the step's control values) on the step after which both
// leave it, the joiner receives the state live, and the old group is released off the pause. No
// step is lost or trained twice, and every rank ends with the same parameters.
TEST(TrainerLive, AnIntactGrowSwitchesAtAnAgreedStepWithoutAnAbort) {
  TempDir dir;
  const int port1 = free_loopback_port(), port2 = free_loopback_port();
  ASSERT_GT(port1, 0);
  std::vector<std::unique_ptr<ChannelPeer>> peers;
  std::vector<std::unique_ptr<Process>> workers;
  ASSERT_NO_FATAL_FAILURE(start_channel_job(dir, 2, port1, peers, workers));
  // The joiner starts cold as rank 2 of round 2 and says hello once loaded; then the daemons
  // offer round 2 to the running ranks. Rank 1's daemon is late: rank 0's offer alone makes
  // both leave the group (rank 0 then hosts round 2's store), and rank 1 waits for its own.
  peers.push_back(std::make_unique<ChannelPeer>());
  workers.push_back(channel_worker(dir, "w2", *peers.back(), 2, 3, port2, 2));
  ASSERT_TRUE(wait_until([&] { return peers[2]->said_hello_live(); }, std::chrono::minutes(2)))
      << workers[2]->err();
  peers[0]->offer(offer_of(2, 0, 3, port2, true));
  ASSERT_TRUE(wait_until([&] { return listening(port2); }, std::chrono::minutes(1)))
      << workers[0]->err();
  // Offered only once rank 1 has left the old group and waits for it (on a loaded machine its
  // last step can end after any fixed moment the test could pick).
  ASSERT_TRUE(wait_until([&] { return event_in_round(*workers[1], "left_group", 1).has_value(); },
                         std::chrono::minutes(1)))
      << workers[1]->err();
  peers[1]->offer(offer_of(2, 1, 3, port2, true));
  ASSERT_TRUE(wait_until(
      [&] {
        return event_in_round(*workers[0], "reformed_step", 2) &&
               event_in_round(*workers[1], "reformed_step", 2) &&
               event_in_round(*workers[2], "reform", 2);
      },
      std::chrono::minutes(1)))
      << workers[0]->err() << workers[1]->err() << workers[2]->err();
  const json r0 = *event_in_round(*workers[0], "reform", 2),
             r1 = *event_in_round(*workers[1], "reform", 2),
             joined = *event_in_round(*workers[2], "reform", 2);
  for (const json* r : {&r0, &r1}) {
    EXPECT_EQ((*r)["intact"], true) << *r;
    EXPECT_FALSE(r->contains("safety_abort")) << *r;
    EXPECT_EQ((*r)["receivers"], json::array({2})) << "only the joiner needed the state: " << *r;
    // Leaving a healthy group costs no abort and no teardown on the pause.
    EXPECT_LT((*r)["abandon_s"].get<double>(), 0.5) << *r;
  }
  EXPECT_EQ(r0["step"], r1["step"]) << "the running ranks left the group after different steps";
  EXPECT_GT(r1["switch_wait_s"].get<double>(), 0) << "rank 1 left before its round came: " << r1;
  EXPECT_EQ(joined["joined"], true);
  EXPECT_EQ(joined["step"], r0["step"]);
  EXPECT_EQ(joined["param_checksum"], r0["param_checksum"]) << "the joiner did not get the state";
  EXPECT_EQ(r1["param_checksum"], r0["param_checksum"]);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string err = workers[rank]->err();
    EXPECT_EQ(err.find("re-forming"), std::string::npos) << "a collective failed:\n" << err;
    EXPECT_EQ(err.find("aborting the group"), std::string::npos) << err;
    EXPECT_EQ(err.find("left to end on its own"), std::string::npos) << err;
    const auto answer = peers[rank]->joined(2);
    ASSERT_TRUE(answer.has_value()) << "rank " << rank << " did not answer joined";
    EXPECT_EQ(answer->term, 7u);
  }
  const double pause =
      r0["abandon_s"].get<double>() + r0["switch_wait_s"].get<double>() +
      r0["form_s"].get<double>() + r0["agree_s"].get<double>() + r0["transfer_s"].get<double>() +
      (*event_in_round(*workers[0], "reformed_step", 2))["since_reform_s"].get<double>();
  std::printf(
      "intact grow: running rank 0's pause %.3f s (leave %.3f s, wait for its round %.3f s, "
      "group %.3f s, agreement %.3f s, state transfer %.3f s; trained %.3f s after the offer)\n",
      pause, r0["abandon_s"].get<double>(), r0["switch_wait_s"].get<double>(),
      r0["form_s"].get<double>(), r0["agree_s"].get<double>(), r0["transfer_s"].get<double>(),
      r0.value("pending_s", -1.0));
  const int grown_at = r0["step"];
  ASSERT_TRUE(
      wait_until([&] { return reached_step(*workers[0], grown_at + 3); }, std::chrono::minutes(1)))
      << "training did not continue in round 2";

  const long final_position =
      stop_together({workers[0].get(), workers[1].get(), workers[2].get()}, 2);
  // Nothing was rolled back: every line of every trace counts, and the samples are exactly the
  // first `final_position` of the epoch, each once.
  const std::map<long, int> seen = traced_samples(dir);
  EXPECT_EQ(static_cast<long>(seen.size()), final_position);
  for (const auto& [index, count] : seen) ASSERT_EQ(count, 1) << "sample " << index;
}

}  // namespace
}  // namespace elastic::testing
