// spawner.cgroup_root (daemon/spawner/cgroup_root.h): the layout read from mountinfo and
// /proc/self/cgroup texts of a unified, a hybrid (the delegated cgroup lies under
// /sys/fs/cgroup/unified there) and a v1-only host, inside a cgroup namespace and under a
// bind-mounted subtree; "auto" and explicit paths checked against the real file system (a real
// writable cgroup2 directory when this machine has one, else those cases skip).
#include "daemon/spawner/cgroup_root.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace elastic::spawner {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr const char* kUnifiedMounts =
    "24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

// Debian 10 / systemd's "hybrid" mode: v1 controllers plus a controller-less cgroup2.
constexpr const char* kHybridMounts =
    "31 23 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 "
    "cgroup2 rw,nsdelegate\n"
    "33 31 0:30 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup "
    "cgroup rw,xattr,name=systemd\n"
    "36 31 0:33 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup "
    "cgroup rw,memory\n";

constexpr const char* kLegacyMounts =
    "31 23 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "33 31 0:30 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup "
    "cgroup rw,xattr,name=systemd\n";

constexpr const char* kServiceCgroupV2Only = "0::/system.slice/elasticd.service\n";
constexpr const char* kServiceCgroupHybrid =
    "9:memory:/system.slice/elasticd.service\n"
    "1:name=systemd:/system.slice/elasticd.service\n"
    "0::/system.slice/elasticd.service\n";

TEST(CgroupLayout, UnifiedHostPutsTheUnitUnderSysFsCgroup) {
  const CgroupLayout layout = parse_cgroup_layout(kUnifiedMounts, kServiceCgroupV2Only);
  EXPECT_EQ(layout.mount, "/sys/fs/cgroup");
  EXPECT_FALSE(layout.hybrid);
  EXPECT_EQ(layout.name(), "unified");
  EXPECT_EQ(layout.own, "/sys/fs/cgroup/system.slice/elasticd.service");
  EXPECT_FALSE(layout.own_is_root);
}

TEST(CgroupLayout, HybridHostPutsTheUnitUnderSysFsCgroupUnified) {
  const CgroupLayout layout = parse_cgroup_layout(kHybridMounts, kServiceCgroupHybrid);
  EXPECT_EQ(layout.mount, "/sys/fs/cgroup/unified");
  EXPECT_TRUE(layout.hybrid);
  EXPECT_EQ(layout.name(), "hybrid");
  EXPECT_EQ(layout.own, "/sys/fs/cgroup/unified/system.slice/elasticd.service");
}

TEST(CgroupLayout, LegacyHostHasNoCgroup2) {
  const CgroupLayout layout = parse_cgroup_layout(kLegacyMounts, "1:name=systemd:/x.service\n");
  EXPECT_EQ(layout.mount, "");
  EXPECT_EQ(layout.own, "");
  EXPECT_EQ(layout.name(), "legacy");
}

TEST(CgroupLayout, RootCgroupIsRecognised) {
  const CgroupLayout layout = parse_cgroup_layout(kUnifiedMounts, "0::/\n");
  EXPECT_EQ(layout.own, "/sys/fs/cgroup");
  EXPECT_TRUE(layout.own_is_root);
}

// A process entered into a container's cgroup namespace from outside sees "/.." (it is not
// below the namespace's root): there is no own cgroup to use.
TEST(CgroupLayout, CgroupOutsideTheNamespaceIsNotVisible) {
  const CgroupLayout layout = parse_cgroup_layout(kUnifiedMounts, "0::/..\n");
  EXPECT_EQ(layout.mount, "/sys/fs/cgroup");
  EXPECT_EQ(layout.own, "");
}

// A container given only its own subtree, bind-mounted at /sys/fs/cgroup (root field != "/").
TEST(CgroupLayout, BindMountedSubtreeIsResolvedRelativeToItsRoot) {
  const std::string mounts =
      "35 24 0:30 /machine.slice/c1.scope /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";
  const CgroupLayout layout =
      parse_cgroup_layout(mounts, "0::/machine.slice/c1.scope/system.slice/elasticd.service\n");
  EXPECT_EQ(layout.own, "/sys/fs/cgroup/system.slice/elasticd.service");
  const CgroupLayout other = parse_cgroup_layout(mounts, "0::/machine.slice/c2.scope\n");
  EXPECT_EQ(other.own, "");
}

TEST(CgroupLayout, EscapedMountPointAndExtraOptionalFields) {
  const std::string mounts =
      "40 24 0:40 / /mnt/cg\\040two rw shared:3 master:1 - cgroup2 none rw\n";
  const CgroupLayout layout = parse_cgroup_layout(mounts, "0::/a\n");
  EXPECT_EQ(layout.mount, "/mnt/cg two");
  EXPECT_EQ(layout.own, "/mnt/cg two/a");
}

TEST(CgroupLayout, GarbageNeverCrashes) {
  for (const char* text : {"", "-", "1 2 3 - cgroup2", "\\", "0::", "a b c d e f - cgroup2 x y"}) {
    const CgroupLayout layout = parse_cgroup_layout(text, text);
    EXPECT_TRUE(layout.own.empty() || !layout.mount.empty()) << text;
  }
}

// ---- resolve / check against the real file system ----------------------------------------------

TEST(ResolveCgroupRoot, EmptyMeansNoCgroups) {
  auto root = resolve_cgroup_root("", CgroupLayout{});
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(*root, "");
}

// The unit's old example on a hybrid host. The message says where cgroup v2 is.
TEST(ResolveCgroupRoot, UnifiedPathOnAHybridHostNamesTheLayout) {
  const CgroupLayout hybrid = parse_cgroup_layout(kHybridMounts, kServiceCgroupHybrid);
  const std::string path = "/sys/fs/cgroup/system.slice/elastic-test-no-such.service";
  for (auto checked : {resolve_cgroup_root(path, hybrid), check_cgroup_root(path, hybrid)}) {
    ASSERT_FALSE(checked.ok());
    EXPECT_THAT(checked.error().message,
                StartsWith("'" + path + "' is not a writable cgroup v2 directory: "));
    EXPECT_THAT(checked.error().message,
                HasSubstr("; this host mounts cgroup v2 at /sys/fs/cgroup/unified (hybrid "
                          "layout): use \"auto\" (the daemon's own cgroup) or a path below it"));
  }
}

TEST(ResolveCgroupRoot, PathOutsideCgroupFsIsRefusedWithoutAHint) {
  elastic::testing::TempDir dir;
  const CgroupLayout hybrid = parse_cgroup_layout(kHybridMounts, kServiceCgroupHybrid);
  auto root = resolve_cgroup_root(dir.path(), hybrid);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.error().message, "'" + dir.path() +
                                      "' is not a writable cgroup v2 directory: it is not on a "
                                      "cgroup2 file system");
}

TEST(ResolveCgroupRoot, AutoOnALegacyHostSaysToUseNothing) {
  const CgroupLayout legacy = parse_cgroup_layout(kLegacyMounts, "");
  for (auto checked : {resolve_cgroup_root("auto", legacy), check_cgroup_root("auto", legacy)}) {
    ASSERT_FALSE(checked.ok());
    EXPECT_EQ(checked.error().message,
              "\"auto\" needs cgroup v2, and this host mounts none (legacy layout): set \"\" "
              "(process groups only)");
  }
}

TEST(ResolveCgroupRoot, AutoInTheRootCgroupIsRefused) {
  const CgroupLayout layout = parse_cgroup_layout(kUnifiedMounts, "0::/\n");
  auto root = resolve_cgroup_root("auto", layout);
  ASSERT_FALSE(root.ok());
  EXPECT_THAT(root.error().message,
              HasSubstr("runs in the root cgroup of /sys/fs/cgroup (unified layout)"));
  // --check-config runs in the operator's shell, not the unit: it checks the layout only.
  auto checked = check_cgroup_root("auto", layout);
  ASSERT_TRUE(checked.ok()) << checked.error().message;
  EXPECT_EQ(*checked,
            "\"auto\": the daemon's own cgroup below /sys/fs/cgroup (unified layout); under the "
            "shipped unit /sys/fs/cgroup/system.slice/elasticd.service");
}

// A real cgroup2 directory of this test below this machine's own cgroup2 mount, or "".
class TestCgroup {
 public:
  TestCgroup() {
    const CgroupLayout here = this_process_cgroup_layout();
    if (here.mount.empty() || ::geteuid() != 0) return;
    path_ = here.mount + "/elastic-cgroup-root-test-" + std::to_string(::getpid());
    if (::mkdir(path_.c_str(), 0755) != 0) path_.clear();
  }
  ~TestCgroup() {
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ResolveCgroupRoot, AutoIsTheOwnCgroupWhenItIsAWritableCgroup2Directory) {
  TestCgroup cgroup;
  if (cgroup.path().empty()) GTEST_SKIP() << "needs root and a cgroup2 mount";
  const CgroupLayout here = this_process_cgroup_layout();
  CgroupLayout layout = here;
  layout.own = cgroup.path();  // as if this process had been started in it
  layout.own_is_root = false;
  auto root = resolve_cgroup_root("auto", layout);
  ASSERT_TRUE(root.ok()) << root.error().message;
  EXPECT_EQ(*root, cgroup.path());
  auto explicit_path = resolve_cgroup_root(cgroup.path(), here);
  ASSERT_TRUE(explicit_path.ok()) << explicit_path.error().message;
  EXPECT_EQ(*explicit_path, cgroup.path());
}

}  // namespace
}  // namespace elastic::spawner
