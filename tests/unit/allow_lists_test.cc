// NodeAllowList and ClientAllowList (daemon/transport/allow_lists.h): which node or user a raw
// CURVE key speaks for, and when the directories are read again. Files in a temp directory and
// manual time only; no sockets (the handshakes that consult them are in transport_test).
#include "daemon/transport/allow_lists.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zmq.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "daemon/transport/curve_keys.h"
#include "tests/support/temp_dir.h"

namespace elastic::transport {
namespace {

using namespace std::chrono_literals;
using elastic::testing::TempDir;

// The raw 32 bytes ZAP hands over for a Z85 public key.
std::string raw(const std::string& z85) {
  std::string out(32, '\0');
  EXPECT_NE(zmq_z85_decode(reinterpret_cast<std::uint8_t*>(out.data()), z85.c_str()), nullptr);
  return out;
}

class AllowLists : public ::testing::Test {
 protected:
  // A fresh keypair whose public half is <dir>/<name>.pub; returns the public key (Z85).
  std::string add(const std::string& dir, const std::string& name) {
    Result<CurveKeyPair> keys = generate_curve_keypair();
    EXPECT_TRUE(keys.ok());
    EXPECT_TRUE(write_curve_keypair(dir, name, *keys).ok());
    std::filesystem::remove(dir + "/" + name + ".key");  // only the .pub files matter here
    return keys->public_key;
  }
  std::string dir(const std::string& name) const { return tmp_ / name; }

  TempDir tmp_;
  TimePoint t0_ = TimePoint{} + std::chrono::hours(1);
};

TEST_F(AllowLists, NodeKeysNameTheirNodeAndAnUnknownKeyNone) {
  const std::string a = add(dir("nodes"), "a");
  const std::string b = add(dir("nodes"), "b");
  NodeAllowList list(dir("nodes"));
  ASSERT_TRUE(list.load(t0_).ok());
  EXPECT_EQ(list.node_of(raw(a), t0_), "a");
  EXPECT_EQ(list.node_of(raw(b), t0_), "b");
  EXPECT_EQ(list.node_of(std::string(32, 'x'), t0_), "");
  EXPECT_EQ(list.public_key_of("b", t0_), b);
  EXPECT_EQ(list.public_key_of("nobody", t0_), std::nullopt);
}

TEST_F(AllowLists, ANodeAddedOrRemovedLaterIsSeenAtTheNextLookup) {
  add(dir("nodes"), "a");
  NodeAllowList list(dir("nodes"));
  ASSERT_TRUE(list.load(t0_).ok());
  const std::string c = add(dir("nodes"), "c");
  EXPECT_EQ(list.node_of(raw(c), t0_ + 1ms), "c");
  EXPECT_EQ(list.public_key_of("c", t0_ + 2ms), c);
  std::filesystem::remove(dir("nodes") + "/c.pub");
  EXPECT_EQ(list.node_of(raw(c), t0_ + 3ms), "");
}

TEST_F(AllowLists, AnUnsafeNodeDirectoryOnReReadKeepsTheLastGoodList) {
  const std::string a = add(dir("nodes"), "a");
  NodeAllowList list(dir("nodes"));
  ASSERT_TRUE(list.load(t0_).ok());
  const std::string c = add(dir("nodes"), "c");
  ASSERT_EQ(::chmod(dir("nodes").c_str(), 0777), 0);
  EXPECT_EQ(list.node_of(raw(a), t0_ + 2s), "a");
  EXPECT_EQ(list.node_of(raw(c), t0_ + 4s), "");  // added while the directory was unsafe
  ASSERT_EQ(::chmod(dir("nodes").c_str(), 0755), 0);
  EXPECT_EQ(list.node_of(raw(c), t0_ + 6s), "c");
}

TEST_F(AllowLists, AnUnsafeNodeDirectoryAtTheFirstReadIsAnErrorNamingTheKey) {
  add(dir("nodes"), "a");
  ASSERT_EQ(::chmod(dir("nodes").c_str(), 0777), 0);
  NodeAllowList list(dir("nodes"));
  const Status loaded = list.load(t0_);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().message.find("(transport.public_keys_dir)"), std::string::npos)
      << loaded.error().message;
}

TEST_F(AllowLists, ClientKeysNameTheirUserAndAreReReadAtMostOnceASecond) {
  const std::string alice = add(dir("clients"), "alice");
  ClientAllowList list(dir("clients"));
  ASSERT_TRUE(list.load(t0_).ok());
  EXPECT_EQ(list.size(), 1u);
  EXPECT_EQ(list.user_of(raw(alice), t0_), "alice");
  const std::string bob = add(dir("clients"), "bob");
  EXPECT_EQ(list.user_of(raw(bob), t0_ + 500ms), "");  // not re-read within the second
  EXPECT_EQ(list.user_of(raw(bob), t0_ + kClientKeysReload), "bob");
  // An unsafe directory refuses everyone until it is safe again.
  ASSERT_EQ(::chmod(dir("clients").c_str(), 0777), 0);
  EXPECT_EQ(list.user_of(raw(alice), t0_ + 3s), "");
  ASSERT_EQ(::chmod(dir("clients").c_str(), 0755), 0);
  EXPECT_EQ(list.user_of(raw(alice), t0_ + 5s), "alice");
}

}  // namespace
}  // namespace elastic::transport
