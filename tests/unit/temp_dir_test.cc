// TempDir::share_with_others (tests/support/temp_dir.h): tests that let another user reach a
// socket open their own directory and nothing above it. The old helpers walked up from the
// socket and chmodded every directory to 0755, /tmp included, which cost /tmp its sticky bit
// (1777 -> 0755) and broke the non-root demo after `make test`.
#include "tests/support/temp_dir.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace elastic::testing {
namespace {

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(TempDir, SharingOpensTheTestsOwnDirectoriesAndNothingAbove) {
  TempDir dir;
  const std::string parent = std::filesystem::path(dir.path()).parent_path().string();
  const mode_t parent_before = mode_of(parent);
  std::filesystem::create_directories(dir.file("n1/state"));
  const std::string socket = dir.write("n1/ctl.sock", "");
  ::chmod(socket.c_str(), 0600);
  const mode_t beside_before = mode_of(dir.file("n1/state"));

  const std::string closed = dir.share_with_others(socket);
  if (!closed.empty()) GTEST_SKIP() << closed << " does not let other users through";
  EXPECT_EQ(mode_of(socket), 0666u);
  EXPECT_EQ(mode_of(dir.file("n1")), 0755u);
  EXPECT_EQ(mode_of(dir.path()), 0755u);
  EXPECT_EQ(mode_of(dir.file("n1/state")), beside_before);  // not on the way to the socket
  EXPECT_EQ(mode_of(parent), parent_before) << parent << " was changed";
}

TEST(TempDir, SharingRefusesPathsOutsideTheDirectory) {
  TempDir dir;
  EXPECT_THROW((void)dir.share_with_others("/etc"), std::invalid_argument);
  // A sibling whose name merely starts with this directory's name is outside it too.
  EXPECT_THROW((void)dir.share_with_others(dir.path() + "x/ctl.sock"), std::invalid_argument);
}

}  // namespace
}  // namespace elastic::testing
