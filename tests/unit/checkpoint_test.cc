// The checkpoint protocol against the fault-injecting filesystem model: round trips, garbage
// collection, fencing, NFS renames, I/O errors, and the crash matrix: the process dies before
// every mutating call of a publish (or of a recovery), the machine crashes, strictly or with a
// random subset of the unsynced operations surviving, and a new process recovers.
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/checkpoint/checkpoint_store.h"
#include "tests/support/result_assertions.h"
#include "tests/unit/fault_fs.h"

namespace elastic::checkpoint {
namespace {

using testing::FaultFs;
using ::testing::HasSubstr;

constexpr char kJob[] = "/ckpt/job";

std::string step_dir(std::int64_t step) {
  return std::string(kJob) + "/" + CheckpointStore::step_dir_name(step);
}

// The files of the checkpoint of `step`: content that differs per step, so a test can tell
// which version it reads back.
std::map<std::string, std::string> files_for(std::int64_t step) {
  const std::string tag = std::to_string(step);
  return {
      {"model.pt", "weights of step " + tag + std::string(1000 + step % 13, 'w')},
      {"optimizer.pt", "moments of step " + tag + std::string(300, 'o')},
      {"meta.json", "{\"step\": " + tag + "}"},
  };
}

Result<CheckpointRef> write_checkpoint(CheckpointStore& store, std::int64_t step,
                                       std::int64_t round = 1,
                                       const std::function<Status()>& fence = {}) {
  Result<CheckpointWriter> writer = store.begin(step, round);
  if (!writer) return writer.error();
  for (const auto& [name, bytes] : files_for(step)) {
    if (Status added = writer->add(name, bytes); !added) return added.error();
  }
  return writer->publish(fence);
}

std::optional<std::int64_t> latest_step(CheckpointStore& store) {
  Result<std::optional<CheckpointRef>> latest = store.latest();
  EXPECT_TRUE(latest.ok()) << latest.error().message;
  if (!latest.ok() || !latest->has_value()) return std::nullopt;
  return (*latest)->step;
}

// Every file of the checkpoint of `ref.step` reads back exactly what was written.
void expect_contents(CheckpointStore& store, const CheckpointRef& ref) {
  for (const auto& [name, bytes] : files_for(ref.step)) {
    Result<std::string> read = store.read(ref, name);
    ASSERT_TRUE(read.ok()) << read.error().message;
    EXPECT_EQ(*read, bytes) << ref.dir << "/" << name;
  }
}

// The job dir holds LATEST and published step dirs only: no tmp dir, no LATEST.tmp, nothing
// newer than LATEST.
void expect_clean(Fs& fs, std::optional<std::int64_t> latest) {
  Result<std::vector<std::string>> names = fs.list_dir(kJob);
  ASSERT_TRUE(names.ok()) << names.error().message;
  for (const std::string& name : *names) {
    if (name == "LATEST") {
      EXPECT_TRUE(latest.has_value());
      continue;
    }
    const std::optional<std::int64_t> step = CheckpointStore::parse_step_dir_name(name);
    ASSERT_TRUE(step.has_value()) << "leftover " << name;
    ASSERT_TRUE(latest.has_value()) << "step dir " << name << " without LATEST";
    EXPECT_LE(*step, *latest) << "unpublished step dir " << name;
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(store_.recover()); }

  FaultFs fs_;
  CheckpointStore store_{fs_, kJob, 2};
};

// ---------------------------------------------------------------------------------------------
// The filesystem model itself: the crash matrix is only as good as it.

TEST(FaultFsTest, UnsyncedDataIsLostAndSyncedDataSurvives) {
  FaultFs fs;
  ASSERT_OK(fs.make_dir("/d"));
  ASSERT_OK(fs.write_file("/d/synced", "one"));
  ASSERT_OK(fs.sync_file("/d/synced"));
  ASSERT_OK(fs.write_file("/d/unsynced", "two"));
  ASSERT_OK(fs.sync_dir("/d"));
  ASSERT_OK(fs.sync_dir("/"));
  ASSERT_OK(fs.write_file("/d/synced", "one, rewritten"));
  fs.crash();
  EXPECT_EQ(*fs.read_file("/d/synced"), "one");
  EXPECT_EQ(*fs.read_file("/d/unsynced"), "");  // entry durable, data never synced
}

TEST(FaultFsTest, EntriesNeedTheirParentSynced) {
  FaultFs fs;
  ASSERT_OK(fs.make_dirs("/a/b"));
  ASSERT_OK(fs.sync_dir("/a"));  // b is durable in a, but a is not durable in /
  fs.crash();
  EXPECT_FALSE(fs.exists("/a"));

  ASSERT_OK(fs.make_dirs("/a/b"));
  ASSERT_OK(fs.sync_dir("/"));
  fs.crash();
  EXPECT_TRUE(fs.exists("/a"));
  EXPECT_FALSE(fs.exists("/a/b"));
}

TEST(FaultFsTest, RenameIsDurableOnlyAfterParentSync) {
  FaultFs fs;
  ASSERT_OK(fs.write_file("/f", "old"));
  ASSERT_OK(fs.sync_file("/f"));
  ASSERT_OK(fs.write_file("/f.tmp", "new"));
  ASSERT_OK(fs.sync_file("/f.tmp"));
  ASSERT_OK(fs.sync_dir("/"));
  ASSERT_OK(fs.rename("/f.tmp", "/f"));
  EXPECT_EQ(*fs.read_file("/f"), "new");
  EXPECT_FALSE(fs.exists("/f.tmp"));
  fs.crash();
  EXPECT_EQ(*fs.read_file("/f"), "old");
  EXPECT_TRUE(fs.exists("/f.tmp"));
  ASSERT_OK(fs.rename("/f.tmp", "/f"));
  ASSERT_OK(fs.sync_dir("/"));
  fs.crash();
  EXPECT_EQ(*fs.read_file("/f"), "new");
  EXPECT_FALSE(fs.exists("/f.tmp"));
}

TEST(FaultFsTest, RemovalRevertsWithoutSync) {
  FaultFs fs;
  ASSERT_OK(fs.make_dir("/d"));
  ASSERT_OK(fs.write_file("/d/f", "x"));
  ASSERT_OK(fs.sync_file("/d/f"));
  ASSERT_OK(fs.sync_dir("/d"));
  ASSERT_OK(fs.sync_dir("/"));
  ASSERT_OK(fs.remove_all("/d"));
  EXPECT_FALSE(fs.exists("/d"));
  EXPECT_OK(fs.remove_all("/d"));  // absent: fine
  fs.crash();
  EXPECT_EQ(*fs.read_file("/d/f"), "x");
}

TEST(FaultFsTest, RenameFollowsPosixRules) {
  FaultFs fs;
  ASSERT_OK(fs.make_dirs("/a/inner"));
  ASSERT_OK(fs.make_dir("/empty"));
  ASSERT_OK(fs.write_file("/file", "x"));
  EXPECT_THAT(fs.rename("/empty", "/a").error().message, HasSubstr("Directory not empty"));
  EXPECT_THAT(fs.rename("/file", "/empty").error().message, HasSubstr("Is a directory"));
  EXPECT_THAT(fs.rename("/a", "/file").error().message, HasSubstr("Not a directory"));
  EXPECT_THAT(fs.rename("/a", "/a/inner/x").error().message, HasSubstr("Invalid argument"));
  EXPECT_THAT(fs.rename("/missing", "/x").error().message,
              HasSubstr("Cannot rename /missing to /x: No such file or directory."));
  ASSERT_OK(fs.rename("/a", "/empty"));
  EXPECT_EQ(fs.tree(), (std::vector<std::string>{"/empty/", "/empty/inner/", "/file"}));
}

TEST(FaultFsTest, FailAfterKillsEveryLaterCall) {
  FaultFs fs;
  fs.fail_after(2);
  ASSERT_OK(fs.make_dir("/a"));
  ASSERT_OK(fs.make_dir("/b"));
  Status third = fs.make_dir("/c");
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().message, "Cannot create directory /c: injected crash.");
  EXPECT_TRUE(fs.dead());
  EXPECT_FALSE(fs.make_dir("/d").ok());
  EXPECT_FALSE(fs.list_dir("/").ok());
  EXPECT_FALSE(fs.exists("/a"));
  EXPECT_EQ(fs.mutating_calls(), 4);
  fs.crash();
  EXPECT_FALSE(fs.dead());
  EXPECT_OK(fs.make_dir("/e"));
}

TEST(FaultFsTest, FailNextFailsOneMatchingCall) {
  FaultFs fs;
  fs.fail_next(FaultFs::Op::kWriteFile, "victim");
  ASSERT_OK(fs.write_file("/other", "x"));
  Status failed = fs.write_file("/victim", "x");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().message, "Cannot write /victim: Input/output error.");
  EXPECT_FALSE(fs.exists("/victim"));
  EXPECT_OK(fs.write_file("/victim", "x"));
}

TEST(FaultFsTest, NfsRenameHappensButReportsAnError) {
  FaultFs fs;
  fs.set_rename_reports_error(true);
  ASSERT_OK(fs.write_file("/a", "x"));
  EXPECT_FALSE(fs.rename("/a", "/b").ok());
  EXPECT_FALSE(fs.exists("/a"));
  EXPECT_EQ(*fs.read_file("/b"), "x");
}

TEST(FaultFsTest, ReorderedCrashKeepsWhatWasSynced) {
  for (std::uint64_t seed = 0; seed < 64; ++seed) {
    FaultFs fs;
    ASSERT_OK(fs.make_dir("/d"));
    ASSERT_OK(fs.write_file("/d/f", "synced"));
    ASSERT_OK(fs.sync_file("/d/f"));
    ASSERT_OK(fs.sync_dir("/d"));
    ASSERT_OK(fs.sync_dir("/"));
    fs.crash_reordered(seed);
    EXPECT_EQ(*fs.read_file("/d/f"), "synced") << seed;
  }
}

TEST(FaultFsTest, ReorderedCrashKeepsAnySubsetOfUnsyncedOperations) {
  // Two renames in one unsynced dir: all four combinations of survival must occur, and a
  // rename never leaves both names or neither.
  std::map<std::pair<bool, bool>, int> outcomes;
  bool torn = false;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    FaultFs fs;
    for (const char* name : {"/a", "/b"}) {
      ASSERT_OK(fs.write_file(name, "content"));
      ASSERT_OK(fs.sync_file(name));
    }
    ASSERT_OK(fs.sync_dir("/"));
    ASSERT_OK(fs.rename("/a", "/a2"));
    ASSERT_OK(fs.rename("/b", "/b2"));
    ASSERT_OK(fs.write_file("/a2", "rewritten, never synced"));
    fs.crash_reordered(seed);
    EXPECT_NE(fs.exists("/a"), fs.exists("/a2")) << seed;
    EXPECT_NE(fs.exists("/b"), fs.exists("/b2")) << seed;
    ++outcomes[{fs.exists("/a2"), fs.exists("/b2")}];
    if (fs.exists("/a2")) {
      const std::string content = *fs.read_file("/a2");
      if (content != "content" && content != "rewritten, never synced") torn = true;
    }
  }
  EXPECT_EQ(outcomes.size(), 4u);
  EXPECT_TRUE(torn);
}

// The reason for crash_reordered(): a protocol without the fsync between the step dir rename and
// the LATEST rename passes every strict crash, since the final fsync makes both durable at once,
// but a filesystem may persist the LATEST rename first.
TEST(FaultFsTest, ReorderedCrashExposesAMissingBarrier) {
  int strict_dangling = 0;
  int reordered_dangling = 0;
  for (std::uint64_t seed = 0; seed < 64; ++seed) {
    for (bool reordered : {false, true}) {
      FaultFs fs;
      ASSERT_OK(fs.make_dir("/job"));
      ASSERT_OK(fs.sync_dir("/"));
      ASSERT_OK(fs.make_dir("/job/.tmp"));
      ASSERT_OK(fs.sync_dir("/job/.tmp"));
      ASSERT_OK(fs.rename("/job/.tmp", "/job/step"));
      // Missing: fs.sync_dir("/job").
      ASSERT_OK(fs.write_file("/job/LATEST.tmp", "step"));
      ASSERT_OK(fs.sync_file("/job/LATEST.tmp"));
      ASSERT_OK(fs.rename("/job/LATEST.tmp", "/job/LATEST"));
      if (reordered) {
        fs.crash_reordered(seed);
      } else {
        fs.crash();
      }
      const bool dangling = fs.exists("/job/LATEST") && !fs.exists("/job/step");
      (reordered ? reordered_dangling : strict_dangling) += dangling ? 1 : 0;
    }
  }
  EXPECT_EQ(strict_dangling, 0);
  EXPECT_GT(reordered_dangling, 0);
}

// ---------------------------------------------------------------------------------------------
// The protocol, no faults.

TEST_F(CheckpointTest, StepDirNamesAreCanonical) {
  EXPECT_EQ(CheckpointStore::step_dir_name(1200), "step-000001200");
  EXPECT_EQ(CheckpointStore::step_dir_name(0), "step-000000000");
  EXPECT_EQ(CheckpointStore::step_dir_name(12345678901), "step-12345678901");
  EXPECT_EQ(CheckpointStore::parse_step_dir_name("step-000001200"), 1200);
  EXPECT_EQ(CheckpointStore::parse_step_dir_name("step-12345678901"), 12345678901);
  for (const char* bad :
       {"step-1200", "step-0000001200", "step-00000120x", "step-", "step", "STEP-000001200",
        "step-+00001200", "step-99999999999999999999", ".tmp-000001200-r1", "step-000001200/"}) {
    EXPECT_EQ(CheckpointStore::parse_step_dir_name(bad), std::nullopt) << bad;
  }
}

TEST_F(CheckpointTest, RecoverOnAFreshJobCreatesItDurably) {
  EXPECT_TRUE(fs_.exists(kJob));
  fs_.crash();
  EXPECT_TRUE(fs_.exists(kJob));
  EXPECT_EQ(latest_step(store_), std::nullopt);
  Result<std::vector<CheckpointRef>> listed = store_.list();
  ASSERT_OK(listed);
  EXPECT_TRUE(listed->empty());
}

TEST_F(CheckpointTest, PublishLatestReadRoundTrip) {
  Result<CheckpointRef> ref = write_checkpoint(store_, 1200, 7);
  ASSERT_OK(ref);
  EXPECT_EQ(ref->step, 1200);
  EXPECT_EQ(ref->dir, "/ckpt/job/step-000001200");
  EXPECT_EQ(*fs_.read_file("/ckpt/job/LATEST"), "step-000001200\n");

  Result<std::optional<CheckpointRef>> latest = store_.latest();
  ASSERT_OK(latest);
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ(**latest, *ref);
  expect_contents(store_, **latest);
  EXPECT_EQ(
      fs_.tree(kJob),
      (std::vector<std::string>{
          "/ckpt/job/LATEST", "/ckpt/job/step-000001200/", "/ckpt/job/step-000001200/meta.json",
          "/ckpt/job/step-000001200/model.pt", "/ckpt/job/step-000001200/optimizer.pt"}));

  // Durable once publish() returned.
  fs_.crash();
  CheckpointStore reopened(fs_, kJob, 2);
  ASSERT_OK(reopened.recover());
  EXPECT_EQ(latest_step(reopened), 1200);
  expect_contents(reopened, *ref);
}

TEST_F(CheckpointTest, WriterShowsItsTmpDir) {
  Result<CheckpointWriter> writer = store_.begin(1300, 7);
  ASSERT_OK(writer);
  EXPECT_EQ(writer->tmp_dir(), "/ckpt/job/.tmp-000001300-r7");
  EXPECT_EQ(writer->step(), 1300);
  EXPECT_TRUE(fs_.exists(writer->tmp_dir()));
  // Readers never see a checkpoint being written.
  EXPECT_EQ(latest_step(store_), std::nullopt);
}

TEST_F(CheckpointTest, ReadersSeeEachNewPublish) {
  CheckpointStore reader(fs_, kJob, 2);
  ASSERT_OK(write_checkpoint(store_, 10));
  EXPECT_EQ(latest_step(reader), 10);
  ASSERT_OK(write_checkpoint(store_, 20));
  EXPECT_EQ(latest_step(reader), 20);
}

TEST_F(CheckpointTest, KeepsOnlyTheNewestK) {
  for (std::int64_t step : {10, 20, 30, 40, 50}) ASSERT_OK(write_checkpoint(store_, step));
  Result<std::vector<CheckpointRef>> listed = store_.list();
  ASSERT_OK(listed);
  EXPECT_EQ(*listed, (std::vector<CheckpointRef>{{40, step_dir(40)}, {50, step_dir(50)}}));
  EXPECT_EQ(*fs_.list_dir(kJob),
            (std::vector<std::string>{"LATEST", "step-000000040", "step-000000050"}));
  for (const CheckpointRef& ref : *listed) expect_contents(store_, ref);
}

TEST_F(CheckpointTest, KeepOneKeepsOnlyLatest) {
  CheckpointStore store(fs_, kJob, 1);
  for (std::int64_t step : {1, 2, 3}) ASSERT_OK(write_checkpoint(store, step));
  EXPECT_EQ(*fs_.list_dir(kJob), (std::vector<std::string>{"LATEST", "step-000000003"}));
}

TEST_F(CheckpointTest, RecoverRemovesLeftoversByHand) {
  ASSERT_OK(write_checkpoint(store_, 10));
  ASSERT_OK(fs_.make_dir("/ckpt/job/.tmp-000000020-r3"));
  ASSERT_OK(fs_.write_file("/ckpt/job/.tmp-000000020-r3/model.pt", "partial"));
  ASSERT_OK(fs_.make_dir("/ckpt/job/.tmp-000000005-gc"));
  ASSERT_OK(fs_.write_file("/ckpt/job/LATEST.tmp", "step-000000030\n"));
  ASSERT_OK(fs_.make_dir("/ckpt/job/step-000000030"));
  ASSERT_OK(fs_.write_file("/ckpt/job/step-000000030/model.pt", "never published"));
  ASSERT_OK(fs_.write_file("/ckpt/job/notes.txt", "an operator's file"));

  CheckpointStore restarted(fs_, kJob, 2);
  ASSERT_OK(restarted.recover());
  EXPECT_EQ(*fs_.list_dir(kJob),
            (std::vector<std::string>{"LATEST", "notes.txt", "step-000000010"}));
  EXPECT_EQ(latest_step(restarted), 10);
  // The removals are durable.
  fs_.crash();
  EXPECT_EQ(*fs_.list_dir(kJob),
            (std::vector<std::string>{"LATEST", "notes.txt", "step-000000010"}));
}

TEST_F(CheckpointTest, RecoverWithoutLatestRemovesEveryStepDir) {
  ASSERT_OK(fs_.make_dir(step_dir(10)));
  ASSERT_OK(fs_.write_file(step_dir(10) + "/model.pt", "renamed before the first publish"));
  ASSERT_OK(store_.recover());
  EXPECT_TRUE(fs_.list_dir(kJob)->empty());
  EXPECT_EQ(latest_step(store_), std::nullopt);
}

TEST_F(CheckpointTest, RecoverIsIdempotent) {
  ASSERT_OK(write_checkpoint(store_, 10));
  const std::int64_t calls = fs_.mutating_calls();
  ASSERT_OK(store_.recover());
  ASSERT_OK(store_.recover());
  EXPECT_EQ(fs_.mutating_calls(), calls);  // nothing to do, nothing done
}

TEST_F(CheckpointTest, CorruptLatestIsReported) {
  ASSERT_OK(write_checkpoint(store_, 10));
  ASSERT_OK(fs_.write_file("/ckpt/job/not-a-dir", "x"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"garbage\n", "contains \"garbage\\n\""},
      {"", "contains \"\""},
      {"step-10\n", "contains \"step-10\\n\""},
      {"step-000000010\nstep-000000020\n", "contains \"step-000000010\\nstep-000000020\\n\""},
      {"step-000000010\n\n", "contains \"step-000000010\\n\\n\""},
      {std::string("step-\x01\xff", 7), "contains \"step-\\x01\\xff\""},
      {"../step-000000010\n", "contains \"../step-000000010\\n\""},
  };
  for (const auto& [content, expected] : cases) {
    ASSERT_OK(fs_.write_file("/ckpt/job/LATEST", content));
    Result<std::optional<CheckpointRef>> latest = store_.latest();
    ASSERT_FALSE(latest.ok()) << content;
    EXPECT_THAT(latest.error().message, HasSubstr("/ckpt/job/LATEST is corrupt"));
    EXPECT_THAT(latest.error().message, HasSubstr(expected));
    // Recovery refuses to guess which step dirs are published, and publish refuses too.
    Status recovered = store_.recover();
    ASSERT_FALSE(recovered.ok());
    EXPECT_THAT(recovered.error().message, HasSubstr("/ckpt/job/LATEST is corrupt"));
    EXPECT_TRUE(fs_.exists(step_dir(10)));
    Result<CheckpointRef> published = write_checkpoint(store_, 20);
    ASSERT_FALSE(published.ok());
    EXPECT_THAT(published.error().message, HasSubstr("Cannot publish the checkpoint of step 20"));
    EXPECT_FALSE(fs_.exists(step_dir(20)));
    EXPECT_FALSE(fs_.exists("/ckpt/job/.tmp-000000020-r1"));
  }

  ASSERT_OK(fs_.write_file("/ckpt/job/LATEST", "step-000000099\n"));
  Result<std::optional<CheckpointRef>> missing = store_.latest();
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message,
              HasSubstr("/ckpt/job/LATEST names step-000000099, which cannot be opened."));
  EXPECT_THAT(missing.error().message, HasSubstr("/ckpt/job/step-000000099"));

  ASSERT_OK(fs_.write_file("/ckpt/job/LATEST", "step-000000010"));  // no newline: accepted
  EXPECT_EQ(latest_step(store_), 10);
}

TEST_F(CheckpointTest, LatestNamingAFileIsAnError) {
  ASSERT_OK(fs_.write_file(step_dir(10), "a file, not a dir"));
  ASSERT_OK(fs_.write_file("/ckpt/job/LATEST", "step-000000010\n"));
  Result<std::optional<CheckpointRef>> latest = store_.latest();
  ASSERT_FALSE(latest.ok());
  EXPECT_THAT(latest.error().message, HasSubstr("Not a directory"));
}

TEST_F(CheckpointTest, InvalidFileNamesAreRejected) {
  Result<CheckpointWriter> writer = store_.begin(10, 1);
  ASSERT_OK(writer);
  for (std::string_view bad :
       {std::string_view("a/b"), std::string_view(""), std::string_view("."),
        std::string_view(".."), std::string_view("/abs"), std::string_view("nul\0x", 5)}) {
    Status added = writer->add(bad, "x");
    ASSERT_FALSE(added.ok()) << bad;
    EXPECT_THAT(added.error().message, HasSubstr("is invalid"));
  }
  EXPECT_EQ(fs_.tree(writer->tmp_dir()), std::vector<std::string>{});
  // A rejected name does not spoil the checkpoint.
  ASSERT_OK(writer->add("model.pt", "x"));
  Result<CheckpointRef> ref = writer->publish();
  ASSERT_OK(ref);
  Result<std::string> escaped = store_.read(*ref, "../LATEST");
  ASSERT_FALSE(escaped.ok());
  EXPECT_THAT(escaped.error().message, HasSubstr("\"../LATEST\" is invalid"));
  EXPECT_EQ(*store_.read(*ref, "model.pt"), "x");
}

TEST_F(CheckpointTest, ReadingAMissingFileNamesIt) {
  Result<CheckpointRef> ref = write_checkpoint(store_, 10);
  ASSERT_OK(ref);
  Result<std::string> read = store_.read(*ref, "absent.pt");
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error().message, HasSubstr("/ckpt/job/step-000000010/absent.pt"));
}

TEST_F(CheckpointTest, FenceRejectionLeavesNoTrace) {
  ASSERT_OK(write_checkpoint(store_, 10));
  const std::vector<std::string> before = fs_.tree(kJob);
  int asked = 0;
  Result<CheckpointRef> published = write_checkpoint(store_, 20, 3, [&]() -> Status {
    ++asked;
    // Asked right before the rename: everything written, nothing visible.
    EXPECT_TRUE(fs_.exists("/ckpt/job/.tmp-000000020-r3/model.pt"));
    EXPECT_FALSE(fs_.exists(step_dir(20)));
    return Error{"Round 3 is stale: the current round is 4."};
  });
  ASSERT_FALSE(published.ok());
  EXPECT_EQ(published.error().message, "Round 3 is stale: the current round is 4.");
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(fs_.tree(kJob), before);
  EXPECT_EQ(latest_step(store_), 10);
}

TEST_F(CheckpointTest, FenceAcceptancePublishes) {
  int asked = 0;
  ASSERT_OK(write_checkpoint(store_, 10, 4, [&]() -> Status {
    ++asked;
    return ok_status();
  }));
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(latest_step(store_), 10);
}

// A stale round's writer: the newer round claimed the dir (and published) while the older one
// was writing; the older one's publish is refused and LATEST stays on the newer round's step.
TEST_F(CheckpointTest, AStaleRoundCannotMoveLatestPastANewerRounds) {
  ASSERT_OK(store_.claim_round("job-a", 3));
  Result<CheckpointWriter> stale = store_.begin(40, 3);
  ASSERT_OK(stale);
  ASSERT_OK(stale->add("model.pt", "round 3 weights"));

  ASSERT_OK(store_.claim_round("job-a", 4));
  ASSERT_OK(write_checkpoint(store_, 30, 4, [&] { return store_.check_round("job-a", 4); }));

  Result<CheckpointRef> refused = stale->publish([&] { return store_.check_round("job-a", 3); });
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message, HasSubstr("Round 3 of job job-a is stale: round 4"));
  EXPECT_EQ(latest_step(store_), 30);
  EXPECT_FALSE(fs_.exists(step_dir(40)));
  EXPECT_FALSE(fs_.exists(stale->tmp_dir()));
  // The stale round cannot claim the dir back either.
  Status reclaimed = store_.claim_round("job-a", 3);
  ASSERT_FALSE(reclaimed.ok());
  EXPECT_THAT(reclaimed.error().message, HasSubstr("is stale"));
}

TEST_F(CheckpointTest, ClaimsAreDurableAndReplaceTheJobsOlderClaims) {
  ASSERT_OK(store_.claim_round("job-a", 2));
  ASSERT_OK(store_.claim_round("job-a", 2));  // the same round again: idempotent
  ASSERT_OK(store_.claim_round("job-a", 5));
  EXPECT_FALSE(fs_.exists("/ckpt/job/round-000000002-job-a"));
  // The claim is durable; the removal of the older one need not be (it fences nothing).
  fs_.crash();
  EXPECT_TRUE(fs_.exists("/ckpt/job/round-000000005-job-a"));
  EXPECT_OK(store_.check_round("job-a", 5));
  EXPECT_OK(store_.check_round("job-a", 6));  // a round newer than every claim is current
  EXPECT_FALSE(store_.check_round("job-a", 4).ok());
  // Claims survive recover() and do not count as checkpoints.
  ASSERT_OK(store_.recover());
  EXPECT_TRUE(fs_.exists("/ckpt/job/round-000000005-job-a"));
  Result<std::vector<CheckpointRef>> listed = store_.list();
  ASSERT_OK(listed);
  EXPECT_TRUE(listed->empty());
}

TEST_F(CheckpointTest, AnotherJobsClaimsFenceNothing) {
  // A resubmitted job (a new id, rounds counting from 0 again) may reuse the directory.
  ASSERT_OK(store_.claim_round("job-a", 9));
  ASSERT_OK(store_.claim_round("job-a-2", 1));
  EXPECT_OK(store_.check_round("job-a-2", 1));
  EXPECT_OK(store_.check_round("job-a", 9));
  EXPECT_TRUE(fs_.exists("/ckpt/job/round-000000009-job-a"));
}

TEST_F(CheckpointTest, ClaimWithABadJobIdOrAFailedWriteIsAnError) {
  for (std::string bad : {std::string(), std::string("a/b"), std::string("a\0b", 3)}) {
    Status claimed = store_.claim_round(bad, 1);
    ASSERT_FALSE(claimed.ok()) << bad;
    EXPECT_THAT(claimed.error().message, HasSubstr("cannot name a round claim"));
  }
  fs_.fail_next(FaultFs::Op::kSyncFile, "round-");
  Status claimed = store_.claim_round("job-a", 1);
  ASSERT_FALSE(claimed.ok());
  EXPECT_THAT(claimed.error().message, HasSubstr("round-000000001-job-a"));
}

TEST_F(CheckpointTest, NfsRenameReportedAsFailedButDoneIsSuccess) {
  CheckpointStore store(fs_, kJob, 1);  // garbage collection renames too
  fs_.set_rename_reports_error(true);
  ASSERT_OK(write_checkpoint(store, 10));
  Result<CheckpointRef> ref = write_checkpoint(store, 20);
  ASSERT_OK(ref);
  EXPECT_EQ(latest_step(store), 20);
  EXPECT_EQ(*fs_.list_dir(kJob), (std::vector<std::string>{"LATEST", "step-000000020"}));
  fs_.crash();
  EXPECT_EQ(latest_step(store), 20);
  expect_contents(store, *ref);
}

TEST_F(CheckpointTest, RenameThatReallyFailedIsReported) {
  ASSERT_OK(write_checkpoint(store_, 10));
  fs_.fail_next(FaultFs::Op::kRename, ".tmp-000000020", "Stale file handle");
  Result<CheckpointRef> published = write_checkpoint(store_, 20);
  ASSERT_FALSE(published.ok());
  EXPECT_EQ(published.error().message,
            "Cannot rename /ckpt/job/.tmp-000000020-r1 to /ckpt/job/step-000000020: Stale file "
            "handle.");
  EXPECT_EQ(latest_step(store_), 10);
  EXPECT_EQ(*fs_.list_dir(kJob), (std::vector<std::string>{"LATEST", "step-000000010"}));
}

TEST_F(CheckpointTest, EioOnFileWriteAbandonsTheCheckpoint) {
  ASSERT_OK(write_checkpoint(store_, 10));
  Result<CheckpointWriter> writer = store_.begin(20, 1);
  ASSERT_OK(writer);
  ASSERT_OK(writer->add("meta.json", "{}"));
  fs_.fail_next(FaultFs::Op::kWriteFile, "model.pt");
  Status added = writer->add("model.pt", "weights");
  ASSERT_FALSE(added.ok());
  EXPECT_EQ(added.error().message,
            "Cannot write /ckpt/job/.tmp-000000020-r1/model.pt: Input/output error. The "
            "checkpoint of step 20 is abandoned.");
  EXPECT_FALSE(fs_.exists(writer->tmp_dir()));
  Status again = writer->add("optimizer.pt", "moments");
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.error().message, HasSubstr("abandoned"));
  Result<CheckpointRef> published = writer->publish();
  ASSERT_FALSE(published.ok());
  EXPECT_THAT(published.error().message, HasSubstr("cannot be published"));
  EXPECT_EQ(latest_step(store_), 10);
  EXPECT_EQ(*fs_.list_dir(kJob), (std::vector<std::string>{"LATEST", "step-000000010"}));
  // The next checkpoint goes through.
  ASSERT_OK(write_checkpoint(store_, 30));
  EXPECT_EQ(latest_step(store_), 30);
}

TEST_F(CheckpointTest, EioOnFileSyncAbandonsTheCheckpoint) {
  fs_.fail_next(FaultFs::Op::kSyncFile, "optimizer.pt");
  Result<CheckpointRef> published = write_checkpoint(store_, 10);
  ASSERT_FALSE(published.ok());
  EXPECT_THAT(published.error().message,
              HasSubstr("Cannot fsync /ckpt/job/.tmp-000000010-r1/optimizer.pt: Input/output "
                        "error."));
  EXPECT_EQ(latest_step(store_), std::nullopt);
  EXPECT_TRUE(fs_.list_dir(kJob)->empty());
}

TEST_F(CheckpointTest, EioOnLatestLeavesLatestUnchanged) {
  ASSERT_OK(write_checkpoint(store_, 10));
  fs_.fail_next(FaultFs::Op::kSyncFile, "LATEST.tmp");
  Result<CheckpointRef> published = write_checkpoint(store_, 20);
  ASSERT_FALSE(published.ok());
  EXPECT_THAT(published.error().message, HasSubstr("/ckpt/job/LATEST.tmp"));
  EXPECT_EQ(latest_step(store_), 10);
  // A complete, unpublished step dir is left; recovery removes it.
  CheckpointStore restarted(fs_, kJob, 2);
  ASSERT_OK(restarted.recover());
  EXPECT_EQ(*fs_.list_dir(kJob), (std::vector<std::string>{"LATEST", "step-000000010"}));
  ASSERT_OK(write_checkpoint(restarted, 20));
  EXPECT_EQ(latest_step(restarted), 20);
}

TEST_F(CheckpointTest, GarbageCollectionFailureIsNotAPublishFailure) {
  CheckpointStore store(fs_, kJob, 1);
  ASSERT_OK(write_checkpoint(store, 10));
  fs_.fail_next(FaultFs::Op::kRename, "step-000000010");
  ASSERT_OK(write_checkpoint(store, 20));
  EXPECT_EQ(latest_step(store), 20);
  EXPECT_TRUE(fs_.exists(step_dir(10)));
  ASSERT_OK(write_checkpoint(store, 30));  // retries the collection
  EXPECT_EQ(*fs_.list_dir(kJob), (std::vector<std::string>{"LATEST", "step-000000030"}));
}

TEST_F(CheckpointTest, RepublishingTheLatestStepKeepsThePublishedCopy) {
  Result<CheckpointRef> first = write_checkpoint(store_, 20);
  ASSERT_OK(first);
  Result<CheckpointWriter> writer = store_.begin(20, 2);
  ASSERT_OK(writer);
  ASSERT_OK(writer->add("model.pt", "a different copy"));
  Result<CheckpointRef> again = writer->publish();
  ASSERT_OK(again);
  EXPECT_EQ(*again, *first);
  expect_contents(store_, *again);
  EXPECT_EQ(*fs_.list_dir(kJob), (std::vector<std::string>{"LATEST", "step-000000020"}));
}

TEST_F(CheckpointTest, PublishingAnOlderStepRewinds) {
  CheckpointStore store(fs_, kJob, 3);
  for (std::int64_t step : {10, 20, 30}) ASSERT_OK(write_checkpoint(store, step));
  ASSERT_OK(write_checkpoint(store, 15));
  EXPECT_EQ(latest_step(store), 15);
  EXPECT_EQ(*fs_.list_dir(kJob),
            (std::vector<std::string>{"LATEST", "step-000000010", "step-000000015"}));
  // Re-writing an older step that still exists replaces it.
  ASSERT_OK(write_checkpoint(store, 10));
  EXPECT_EQ(latest_step(store), 10);
  expect_contents(store, {10, step_dir(10)});
}

TEST_F(CheckpointTest, NeverPublishedTargetIsReplaced) {
  ASSERT_OK(write_checkpoint(store_, 10));
  ASSERT_OK(fs_.make_dir(step_dir(20)));
  ASSERT_OK(fs_.write_file(step_dir(20) + "/stale.pt", "from a crashed attempt"));
  Result<CheckpointRef> ref = write_checkpoint(store_, 20);
  ASSERT_OK(ref);
  expect_contents(store_, *ref);
  EXPECT_FALSE(fs_.exists(step_dir(20) + "/stale.pt"));
}

TEST_F(CheckpointTest, BeginReplacesAStaleTmpDirOfTheSameRound) {
  ASSERT_OK(fs_.make_dir("/ckpt/job/.tmp-000000020-r1"));
  ASSERT_OK(fs_.write_file("/ckpt/job/.tmp-000000020-r1/stale.pt", "x"));
  Result<CheckpointRef> ref = write_checkpoint(store_, 20, 1);
  ASSERT_OK(ref);
  EXPECT_FALSE(fs_.exists(step_dir(20) + "/stale.pt"));
}

TEST_F(CheckpointTest, JobDirWithTrailingSlashIsTheSameJob) {
  ASSERT_OK(write_checkpoint(store_, 10));
  CheckpointStore other(fs_, "/ckpt/job/", 2);
  Result<std::optional<CheckpointRef>> latest = other.latest();
  ASSERT_OK(latest);
  EXPECT_EQ((*latest)->dir, step_dir(10));
}

TEST_F(CheckpointTest, MisuseAborts) {
  EXPECT_DEATH(CheckpointStore(fs_, kJob, 0), "keep >= 1");
  EXPECT_DEATH((void)store_.begin(-1, 0), "step >= 0 and round >= 0");
  EXPECT_DEATH((void)store_.begin(1, -1), "step >= 0 and round >= 0");
  EXPECT_DEATH(
      {
        Result<CheckpointWriter> writer = store_.begin(10, 1);
        (void)writer->publish();
        (void)writer->publish();
      },
      "publish\\(\\) called on a finished writer");
  EXPECT_DEATH(
      {
        Result<CheckpointWriter> writer = store_.begin(10, 1);
        (void)writer->publish();
        (void)writer->add("late.pt", "x");
      },
      "add\\(\\) called on a finished writer");
  EXPECT_DEATH(
      {
        Result<CheckpointWriter> writer = store_.begin(10, 1);
        CheckpointWriter moved = std::move(*writer);
        (void)writer->publish();
      },
      "finished writer");
}

// ---------------------------------------------------------------------------------------------
// The crash matrix: the process dies before the n-th mutating call of a publish, for every n
// until the publish completes; then the machine crashes (unsynced state lost) and a new process
// recovers.

struct CrashScenario {
  std::string name;
  int keep = 2;
  std::vector<std::int64_t> published_before;  // published without faults first
  std::optional<std::int64_t> leftover;        // a durable, never-published step dir
  std::int64_t step = 20;                      // the publish that crashes
  bool nfs_rename = false;
};

// gtest prints the parameter into ctest's test names; its name beats a dump of raw bytes.
void PrintTo(const CrashScenario& scenario, std::ostream* out) { *out << scenario.name; }

void set_up(FaultFs& fs, const CrashScenario& scenario) {
  CheckpointStore store(fs, kJob, scenario.keep);
  ASSERT_OK(store.recover());
  for (std::int64_t step : scenario.published_before) ASSERT_OK(write_checkpoint(store, step));
  if (scenario.leftover) {
    const std::string dir = step_dir(*scenario.leftover);
    ASSERT_OK(fs.make_dir(dir));
    ASSERT_OK(fs.write_file(dir + "/model.pt", "stale leftover"));
    ASSERT_OK(fs.sync_file(dir + "/model.pt"));
    ASSERT_OK(fs.sync_dir(dir));
    ASSERT_OK(fs.sync_dir(kJob));
  }
  fs.set_rename_reports_error(scenario.nfs_rename);
}

// After the crash: a new process recovers, finds a complete checkpoint, and can go on.
void expect_recovers(FaultFs& fs, const CrashScenario& scenario, bool publish_returned_ok) {
  std::optional<std::int64_t> before;
  if (!scenario.published_before.empty()) before = scenario.published_before.back();

  CheckpointStore store(fs, kJob, scenario.keep);
  ASSERT_OK(store.recover());
  const std::optional<std::int64_t> latest = latest_step(store);
  if (publish_returned_ok) {
    EXPECT_EQ(latest, scenario.step) << "publish() returned but the checkpoint was not durable";
  } else {
    EXPECT_TRUE(latest == before || latest == scenario.step)
        << "latest is " << (latest ? std::to_string(*latest) : "none");
  }
  expect_clean(fs, latest);
  Result<std::vector<CheckpointRef>> listed = store.list();
  ASSERT_OK(listed);
  if (latest) {
    ASSERT_FALSE(listed->empty());
    EXPECT_EQ(listed->back().step, *latest);
  }
  for (const CheckpointRef& ref : *listed) expect_contents(store, ref);

  Result<CheckpointRef> next = write_checkpoint(store, 1000, 9);
  ASSERT_OK(next);
  EXPECT_EQ(latest_step(store), 1000);
  Result<std::vector<CheckpointRef>> kept = store.list();
  ASSERT_OK(kept);
  EXPECT_LE(kept->size(), static_cast<std::size_t>(scenario.keep));
  fs.crash_reordered(static_cast<std::uint64_t>(scenario.step));  // durable, whatever survives
  CheckpointStore after(fs, kJob, scenario.keep);
  ASSERT_OK(after.recover());
  EXPECT_EQ(latest_step(after), 1000);
  expect_contents(after, *next);
}

// Each crash point is tried with the strict crash and with kReorderings crashes that let a
// random subset of the unsynced operations survive.
constexpr int kReorderings = 8;

void crash(FaultFs& fs, int variant, std::int64_t point) {
  if (variant == 0) {
    fs.crash();
  } else {
    fs.crash_reordered(static_cast<std::uint64_t>(point * 1000 + variant));
  }
}

std::string crash_name(int variant) {
  return variant == 0 ? "strict crash" : "reordered crash " + std::to_string(variant);
}

class CrashMatrixTest : public ::testing::TestWithParam<CrashScenario> {};

TEST_P(CrashMatrixTest, EveryCrashPointRecoversToACompleteCheckpoint) {
  const CrashScenario& scenario = GetParam();
  std::int64_t crash_points = 0;
  std::int64_t crash_states = 0;
  bool completed = false;
  for (std::int64_t n = 0; !completed; ++n) {
    ASSERT_LT(n, 1000) << "publish never completes";
    for (int variant = 0; variant <= kReorderings; ++variant) {
      SCOPED_TRACE("process dies before mutating call " + std::to_string(n) + ", then " +
                   crash_name(variant));
      FaultFs fs;
      set_up(fs, scenario);
      if (HasFatalFailure()) return;
      fs.fail_after(n);
      CheckpointStore store(fs, kJob, scenario.keep);
      const Result<CheckpointRef> published = write_checkpoint(store, scenario.step, 7);
      completed = !fs.dead();
      if (completed) {
        ASSERT_TRUE(published.ok()) << published.error().message;
      }
      const std::string before_crash = fs.describe();
      crash(fs, variant, n);
      ++crash_states;
      expect_recovers(fs, scenario, published.ok());
      if (HasFailure()) {
        ADD_FAILURE() << "state before the crash:\n" << before_crash;
        return;
      }
    }
    if (!completed) ++crash_points;
  }
  std::printf("[ crash matrix ] %s: %lld crash points, %lld crash states\n", scenario.name.c_str(),
              static_cast<long long>(crash_points), static_cast<long long>(crash_states));
  EXPECT_GE(crash_points, 10);
}

CrashScenario make_scenario(std::string name, int keep, std::vector<std::int64_t> published_before,
                            std::optional<std::int64_t> leftover = std::nullopt,
                            bool nfs_rename = false) {
  CrashScenario made;
  made.name = std::move(name);
  made.keep = keep;
  made.published_before = std::move(published_before);
  made.leftover = leftover;
  made.nfs_rename = nfs_rename;
  return made;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, CrashMatrixTest,
                         ::testing::Values(make_scenario("FirstPublish", 2, {}),
                                           make_scenario("SecondPublishKeepOne", 1, {10}),
                                           make_scenario("ThirdPublishKeepTwo", 2, {10, 15}),
                                           make_scenario("NfsRenames", 1, {10}, std::nullopt, true),
                                           make_scenario("OverNeverPublishedLeftover", 2, {10}, 20),
                                           make_scenario("Rewind", 3, {10, 30})),
                         [](const ::testing::TestParamInfo<CrashScenario>& param_info) {
                           return param_info.param.name;
                         });

// A crash during recovery itself, after a crash during a publish: recovery must be restartable.
TEST(CrashDuringRecoveryTest, RecoveryAfterACrashedPublishIsRestartable) {
  const CrashScenario recovery = make_scenario("Recovery", 2, {10});
  std::int64_t combinations = 0;
  bool publish_completed = false;
  for (std::int64_t n = 0; !publish_completed; ++n) {
    bool recovery_completed = false;
    for (std::int64_t m = 0; !recovery_completed; ++m) {
      for (int variant = 0; variant <= 2; ++variant) {
        SCOPED_TRACE("publish dies at " + std::to_string(n) + ", recovery at " + std::to_string(m) +
                     ", " + crash_name(variant));
        FaultFs fs;
        set_up(fs, recovery);
        if (HasFatalFailure()) return;
        fs.fail_after(n);
        bool published = false;
        {
          CheckpointStore store(fs, kJob, recovery.keep);
          published = write_checkpoint(store, recovery.step, 7).ok();
        }
        publish_completed = !fs.dead();
        crash(fs, variant, n);
        fs.fail_after(m);
        {
          CheckpointStore store(fs, kJob, recovery.keep);
          (void)store.recover();
        }
        recovery_completed = !fs.dead();
        crash(fs, variant, n * 100 + m);
        ++combinations;
        expect_recovers(fs, recovery, published);
        if (HasFailure()) return;
      }
    }
  }
  std::printf("[ crash matrix ] publish x recovery: %lld crash states\n",
              static_cast<long long>(combinations));
}

// Recovery of a job dir full of leftovers (all durable), dying before every mutating call.
TEST(CrashDuringRecoveryTest, RecoveryOfManyLeftoversIsRestartable) {
  CrashScenario messy = make_scenario("Messy", 3, {10, 20});
  auto set_up_messy = [](FaultFs& fs) {
    CheckpointStore store(fs, kJob, 3);
    ASSERT_OK(store.recover());
    ASSERT_OK(write_checkpoint(store, 10));
    ASSERT_OK(write_checkpoint(store, 20));
    for (const std::string dir : {"/ckpt/job/.tmp-000000030-r2", "/ckpt/job/.tmp-000000040-gc",
                                  "/ckpt/job/step-000000040", "/ckpt/job/step-000000050"}) {
      ASSERT_OK(fs.make_dir(dir));
      for (const char* name : {"/a.pt", "/b.pt"}) {
        ASSERT_OK(fs.write_file(dir + name, "leftover"));
        ASSERT_OK(fs.sync_file(dir + name));
      }
      ASSERT_OK(fs.sync_dir(dir));
    }
    ASSERT_OK(fs.write_file("/ckpt/job/LATEST.tmp", "step-000000050\n"));
    ASSERT_OK(fs.sync_file("/ckpt/job/LATEST.tmp"));
    ASSERT_OK(fs.sync_dir(kJob));
  };
  std::int64_t crash_points = 0;
  bool completed = false;
  for (std::int64_t m = 0; !completed; ++m) {
    ASSERT_LT(m, 1000) << "recovery never completes";
    for (int variant = 0; variant <= kReorderings; ++variant) {
      SCOPED_TRACE("recovery dies before mutating call " + std::to_string(m) + ", then " +
                   crash_name(variant));
      FaultFs fs;
      set_up_messy(fs);
      if (HasFatalFailure()) return;
      fs.fail_after(m);
      {
        CheckpointStore store(fs, kJob, 3);
        (void)store.recover();
      }
      completed = !fs.dead();
      crash(fs, variant, m);
      expect_recovers(fs, messy, /*publish_returned_ok=*/true);
      if (HasFailure()) return;
    }
    if (!completed) ++crash_points;
  }
  std::printf("[ crash matrix ] recovery of leftovers: %lld crash points\n",
              static_cast<long long>(crash_points));
  EXPECT_GE(crash_points, 8);
}

}  // namespace
}  // namespace elastic::checkpoint
