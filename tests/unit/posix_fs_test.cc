// The POSIX Fs and the checkpoint protocol on the real filesystem, in a fresh mkdtemp dir.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/checkpoint/checkpoint_store.h"
#include "daemon/checkpoint/fs.h"
#include "tests/support/result_assertions.h"

namespace elastic::checkpoint {
namespace {

using ::testing::HasSubstr;

class PosixFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string pattern = std::string(tmpdir != nullptr && *tmpdir ? tmpdir : "/tmp") +
                          "/elastic-posix-fs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << pattern;
    root_ = pattern;
  }
  void TearDown() override {
    if (root_.empty()) return;
    ASSERT_OK(fs_->remove_all(root_));
    EXPECT_FALSE(fs_->exists(root_));
  }

  std::unique_ptr<Fs> fs_ = make_posix_fs();
  std::string root_;
};

TEST_F(PosixFsTest, WriteReadRoundTripOfALargeFile) {
  std::string big(5 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  const std::string path = root_ + "/big.bin";
  ASSERT_OK(fs_->write_file(path, big));
  ASSERT_OK(fs_->sync_file(path));
  Result<std::string> read = fs_->read_file(path);
  ASSERT_OK(read);
  EXPECT_TRUE(*read == big);
  // Truncates on rewrite.
  ASSERT_OK(fs_->write_file(path, "small"));
  EXPECT_EQ(*fs_->read_file(path), "small");
  ASSERT_OK(fs_->write_file(path, ""));
  EXPECT_EQ(*fs_->read_file(path), "");
}

TEST_F(PosixFsTest, MakeDirsListAndSync) {
  ASSERT_OK(fs_->make_dirs(root_ + "/a/b/c"));
  ASSERT_OK(fs_->make_dirs(root_ + "/a/b/c"));  // idempotent
  ASSERT_OK(fs_->make_dirs(root_ + "/a//d/"));
  ASSERT_OK(fs_->make_dir(root_ + "/a"));
  ASSERT_OK(fs_->write_file(root_ + "/a/z", "z"));
  ASSERT_OK(fs_->write_file(root_ + "/a/m", "m"));
  Result<std::vector<std::string>> names = fs_->list_dir(root_ + "/a");
  ASSERT_OK(names);
  EXPECT_EQ(*names, (std::vector<std::string>{"b", "d", "m", "z"}));
  ASSERT_OK(fs_->sync_dir(root_ + "/a"));
  ASSERT_OK(fs_->sync_file(root_ + "/a/z"));
  EXPECT_TRUE(fs_->exists(root_ + "/a/b/c"));
  EXPECT_FALSE(fs_->exists(root_ + "/a/nothing"));
}

TEST_F(PosixFsTest, ErrorsNameThePathAndTheReason) {
  const std::string missing = root_ + "/missing";
  Result<std::string> read = fs_->read_file(missing + "/f");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message,
            "Cannot open for reading " + missing + "/f: No such file or directory.");
  Status synced = fs_->sync_dir(missing);
  ASSERT_FALSE(synced.ok());
  EXPECT_EQ(synced.error().message,
            "Cannot open directory " + missing + ": No such file or directory.");
  Result<std::vector<std::string>> listed = fs_->list_dir(missing);
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(listed.error().message, HasSubstr(missing));
  Status written = fs_->write_file(missing + "/f", "x");
  ASSERT_FALSE(written.ok());
  EXPECT_THAT(written.error().message, HasSubstr(missing + "/f: No such file or directory"));
  Status renamed = fs_->rename(missing, root_ + "/x");
  ASSERT_FALSE(renamed.ok());
  EXPECT_EQ(renamed.error().message,
            "Cannot rename " + missing + " to " + root_ + "/x: No such file or directory.");

  const std::string file = root_ + "/file";
  ASSERT_OK(fs_->write_file(file, "x"));
  Status made = fs_->make_dir(file);
  ASSERT_FALSE(made.ok());
  EXPECT_THAT(made.error().message, HasSubstr(file + ": it exists and is not a directory"));
  Status nested = fs_->make_dirs(file + "/sub");
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(nested.error().message, HasSubstr(file + ": it exists and is not a directory"));
  EXPECT_FALSE(fs_->sync_dir(file).ok());
  EXPECT_FALSE(fs_->list_dir(file).ok());
}

TEST_F(PosixFsTest, RenameReplacesAFileAndMovesADir) {
  ASSERT_OK(fs_->write_file(root_ + "/LATEST", "old"));
  ASSERT_OK(fs_->write_file(root_ + "/LATEST.tmp", "new"));
  ASSERT_OK(fs_->rename(root_ + "/LATEST.tmp", root_ + "/LATEST"));
  EXPECT_EQ(*fs_->read_file(root_ + "/LATEST"), "new");
  EXPECT_FALSE(fs_->exists(root_ + "/LATEST.tmp"));
  ASSERT_OK(fs_->make_dirs(root_ + "/tmp/inner"));
  ASSERT_OK(fs_->rename(root_ + "/tmp", root_ + "/done"));
  EXPECT_TRUE(fs_->exists(root_ + "/done/inner"));
}

TEST_F(PosixFsTest, RemoveAllDoesNotFollowSymlinks) {
  const std::string outside = root_ + "/outside";
  ASSERT_OK(fs_->make_dir(outside));
  ASSERT_OK(fs_->write_file(outside + "/precious", "keep me"));
  const std::string tree = root_ + "/tree";
  ASSERT_OK(fs_->make_dirs(tree + "/a/b"));
  ASSERT_OK(fs_->write_file(tree + "/a/b/f", "x"));
  ASSERT_EQ(::symlink(outside.c_str(), (tree + "/a/link-to-dir").c_str()), 0);
  ASSERT_EQ(::symlink((outside + "/precious").c_str(), (tree + "/link-to-file").c_str()), 0);
  ASSERT_EQ(::symlink("/nonexistent", (tree + "/dangling").c_str()), 0);

  ASSERT_OK(fs_->remove_all(tree));
  EXPECT_FALSE(fs_->exists(tree));
  EXPECT_EQ(*fs_->read_file(outside + "/precious"), "keep me");
  ASSERT_OK(fs_->remove_all(tree));  // nothing there: fine

  // A symlink given directly is removed itself.
  const std::string link = root_ + "/link";
  ASSERT_EQ(::symlink(outside.c_str(), link.c_str()), 0);
  ASSERT_OK(fs_->remove_all(link));
  EXPECT_FALSE(fs_->exists(link));
  EXPECT_TRUE(fs_->exists(outside + "/precious"));
}

TEST_F(PosixFsTest, ProtocolPublishLatestAndGarbageCollection) {
  const std::string job = root_ + "/ckpt/job";
  CheckpointStore store(*fs_, job, 2);
  ASSERT_OK(store.recover());
  Result<std::optional<CheckpointRef>> none = store.latest();
  ASSERT_OK(none);
  EXPECT_FALSE(none->has_value());

  for (std::int64_t step : {100, 200, 300}) {
    Result<CheckpointWriter> writer = store.begin(step, 4);
    ASSERT_OK(writer);
    ASSERT_OK(writer->add("model.pt", "weights " + std::to_string(step)));
    ASSERT_OK(writer->add("meta.json", "{}"));
    Result<CheckpointRef> ref = writer->publish([] { return ok_status(); });
    ASSERT_OK(ref);
    EXPECT_EQ(ref->dir, job + "/" + CheckpointStore::step_dir_name(step));
  }
  EXPECT_EQ(*fs_->read_file(job + "/LATEST"), "step-000000300\n");
  EXPECT_EQ(*fs_->list_dir(job),
            (std::vector<std::string>{"LATEST", "step-000000200", "step-000000300"}));
  CheckpointStore reader(*fs_, job, 2);
  Result<std::optional<CheckpointRef>> latest = reader.latest();
  ASSERT_OK(latest);
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->step, 300);
  EXPECT_EQ(*reader.read(**latest, "model.pt"), "weights 300");
  Result<std::vector<CheckpointRef>> listed = reader.list();
  ASSERT_OK(listed);
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].step, 200);
}

TEST_F(PosixFsTest, ProtocolFenceRejectionLeavesNoTrace) {
  const std::string job = root_ + "/job";
  CheckpointStore store(*fs_, job, 2);
  ASSERT_OK(store.recover());
  Result<CheckpointWriter> writer = store.begin(10, 1);
  ASSERT_OK(writer);
  ASSERT_OK(writer->add("model.pt", "x"));
  Result<CheckpointRef> ref = writer->publish([] { return Status(Error{"Round 1 is stale."}); });
  ASSERT_FALSE(ref.ok());
  EXPECT_EQ(ref.error().message, "Round 1 is stale.");
  EXPECT_TRUE(fs_->list_dir(job)->empty());
}

TEST_F(PosixFsTest, ProtocolRecoverRemovesLeftoversMadeByHand) {
  const std::string job = root_ + "/job";
  CheckpointStore store(*fs_, job, 3);
  ASSERT_OK(store.recover());
  Result<CheckpointWriter> writer = store.begin(10, 1);
  ASSERT_OK(writer);
  ASSERT_OK(writer->add("model.pt", "x"));
  ASSERT_OK(writer->publish());

  ASSERT_EQ(::mkdir((job + "/.tmp-000000020-r2").c_str(), 0755), 0);
  ASSERT_OK(fs_->write_file(job + "/.tmp-000000020-r2/model.pt", "partial"));
  ASSERT_EQ(::mkdir((job + "/step-000000030").c_str(), 0755), 0);
  ASSERT_OK(fs_->write_file(job + "/step-000000030/model.pt", "never published"));
  ASSERT_OK(fs_->write_file(job + "/LATEST.tmp", "step-000000030\n"));

  CheckpointStore restarted(*fs_, job, 3);
  ASSERT_OK(restarted.recover());
  EXPECT_EQ(*fs_->list_dir(job), (std::vector<std::string>{"LATEST", "step-000000010"}));
  Result<std::optional<CheckpointRef>> latest = restarted.latest();
  ASSERT_OK(latest);
  EXPECT_EQ((*latest)->step, 10);
}

TEST_F(PosixFsTest, ProtocolErrorsNameThePath) {
  // The job dir cannot be created under a plain file.
  const std::string file = root_ + "/plain";
  ASSERT_OK(fs_->write_file(file, "x"));
  CheckpointStore blocked(*fs_, file + "/job", 2);
  Status recovered = blocked.recover();
  ASSERT_FALSE(recovered.ok());
  EXPECT_THAT(recovered.error().message, HasSubstr(file));
  EXPECT_THAT(recovered.error().message, HasSubstr("is not a directory"));

  // A corrupt LATEST names the file and what it holds.
  const std::string job = root_ + "/job";
  CheckpointStore store(*fs_, job, 2);
  ASSERT_OK(store.recover());
  ASSERT_OK(fs_->write_file(job + "/LATEST", "rubbish"));
  Result<std::optional<CheckpointRef>> latest = store.latest();
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.error().message, "The checkpoint pointer " + job +
                                        "/LATEST is corrupt: it contains \"rubbish\" instead of "
                                        "one line naming a step directory.");
  // A LATEST naming a missing dir names both.
  ASSERT_OK(fs_->write_file(job + "/LATEST", "step-000000042\n"));
  latest = store.latest();
  ASSERT_FALSE(latest.ok());
  EXPECT_THAT(latest.error().message, HasSubstr(job + "/step-000000042"));
  EXPECT_THAT(latest.error().message, HasSubstr("No such file or directory"));
}

}  // namespace
}  // namespace elastic::checkpoint
