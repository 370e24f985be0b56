// ZapHandler (daemon/transport/zap_handler.h): ZAP request frames in, a verdict, the reply
// frames and the refusal counters out. A map stands in for the allow-lists; no sockets (the
// handshakes that go through the handler are in transport_test and the security integ tests).
#include "daemon/transport/zap_handler.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace elastic::transport {
namespace {

using namespace std::chrono_literals;

class MapKeys final : public ZapKeys {
 public:
  explicit MapKeys(std::map<std::string, std::string> names) : names_(std::move(names)) {}
  std::string name_of(const std::string& raw_key, TimePoint now) override {
    ++lookups;
    last_now = now;
    auto it = names_.find(raw_key);
    return it == names_.end() ? std::string() : it->second;
  }
  int lookups = 0;
  TimePoint last_now{};

 private:
  std::map<std::string, std::string> names_;
};

const std::string kAliceKey(kCurveKeyBytes, 'a');
const std::string kNodeKey(kCurveKeyBytes, 'n');
const std::string kStrangerKey(kCurveKeyBytes, 's');

// What libzmq's CURVE server sends: version, request id, domain, address, identity, mechanism,
// the client's public key.
std::vector<std::string> curve_request(const std::string& domain, const std::string& key,
                                       const std::string& id = "7") {
  return {"1.0", id, domain, "127.0.0.1", "", "CURVE", key};
}

class ZapHandlerTest : public ::testing::Test {
 protected:
  ZapHandlerTest() {
    handler_.add_domain("elastic", &node_keys_, &node_refused_, "/etc/elastic/keys");
    handler_.add_domain("elastic.control", &client_keys_, &control_refused_,
                        "/etc/elastic/clients");
  }

  ZapAnswer answer(const std::vector<std::string>& frames) {
    std::vector<std::string_view> views(frames.begin(), frames.end());
    return handler_.answer(views, now_);
  }

  MapKeys node_keys_{{{kNodeKey, "n1"}}};
  MapKeys client_keys_{{{kAliceKey, "alice"}}};
  std::uint64_t node_refused_ = 0;
  std::uint64_t control_refused_ = 0;
  std::uint64_t elsewhere_refused_ = 0;
  ZapHandler handler_{&elsewhere_refused_};
  TimePoint now_ = TimePoint{} + 3h;
};

TEST_F(ZapHandlerTest, AKnownKeyIsAllowedAsItsNameWithTheRequestIdEchoed) {
  const ZapAnswer a = answer(curve_request("elastic", kNodeKey, "req-42"));
  EXPECT_EQ(a.verdict, ZapVerdict::kAllowed);
  EXPECT_EQ(a.user, "n1");
  const std::array<std::string, 6> expected = {"1.0", "req-42", "200", "OK", "n1", ""};
  EXPECT_EQ(a.reply, expected);
  EXPECT_EQ(node_keys_.last_now, now_);  // the allow-list learns when it may re-read
  EXPECT_EQ(node_refused_ + control_refused_ + elsewhere_refused_, 0u);
}

TEST_F(ZapHandlerTest, EachDomainAnswersFromItsOwnKeys) {
  EXPECT_EQ(answer(curve_request("elastic.control", kAliceKey)).user, "alice");
  // A client key is no node key and a node key no client key.
  EXPECT_EQ(answer(curve_request("elastic", kAliceKey)).verdict, ZapVerdict::kUnknownKey);
  EXPECT_EQ(answer(curve_request("elastic.control", kNodeKey)).verdict, ZapVerdict::kUnknownKey);
  EXPECT_EQ(node_refused_, 1u);
  EXPECT_EQ(control_refused_, 1u);
  EXPECT_EQ(elsewhere_refused_, 0u);
}

TEST_F(ZapHandlerTest, AnUnknownKeyIsRefusedWith400AndCountedInItsDomain) {
  const ZapAnswer a = answer(curve_request("elastic", kStrangerKey, "9"));
  EXPECT_EQ(a.verdict, ZapVerdict::kUnknownKey);
  EXPECT_EQ(a.user, "");
  EXPECT_EQ(a.reply[0], "1.0");
  EXPECT_EQ(a.reply[1], "9");
  EXPECT_EQ(a.reply[2], "400");
  EXPECT_EQ(a.reply[4], "");  // no user id: libzmq refuses the handshake
  EXPECT_EQ(node_refused_, 1u);
  EXPECT_EQ(control_refused_, 0u);
  for (int i = 0; i < 250; ++i) answer(curve_request("elastic", kStrangerKey));
  EXPECT_EQ(node_refused_, 251u);  // every refusal counts, though only a few are logged
}

TEST_F(ZapHandlerTest, MalformedRequestsAreRefusedWithoutAskingTheKeys) {
  struct Case {
    const char* what;
    std::vector<std::string> frames;
    std::string echoed_id;
    const std::uint64_t* counter;
  };
  const std::vector<Case> cases = {
      {"no frames", {}, "", &elsewhere_refused_},
      {"a version only", {"1.0"}, "", &elsewhere_refused_},
      {"no domain", {"1.0", "5"}, "5", &elsewhere_refused_},
      {"no mechanism", {"1.0", "5", "elastic", "addr", ""}, "5", &node_refused_},
      {"CURVE without a key", {"1.0", "5", "elastic", "addr", "", "CURVE"}, "5", &node_refused_},
      {"CURVE with two keys",
       {"1.0", "5", "elastic", "addr", "", "CURVE", kNodeKey, kNodeKey},
       "5",
       &node_refused_},
      {"a short key", curve_request("elastic", kNodeKey.substr(1), "5"), "5", &node_refused_},
      {"a long key", curve_request("elastic", kNodeKey + "x", "5"), "5", &node_refused_},
      {"an empty key", curve_request("elastic", "", "5"), "5", &node_refused_},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::uint64_t before = *c.counter;
    const ZapAnswer a = answer(c.frames);
    EXPECT_EQ(a.verdict, ZapVerdict::kMalformed);
    EXPECT_EQ(a.user, "");
    EXPECT_EQ(a.reply[1], c.echoed_id);
    EXPECT_EQ(a.reply[2], "400");
    EXPECT_EQ(*c.counter, before + 1);
  }
  EXPECT_EQ(node_keys_.lookups, 0);
  EXPECT_EQ(node_refused_ + control_refused_ + elsewhere_refused_, cases.size());
}

TEST_F(ZapHandlerTest, AnotherVersionOrMechanismIsRefusedEvenWithAKnownKey) {
  std::vector<std::string> v2 = curve_request("elastic", kNodeKey);
  v2[0] = "2.0";
  EXPECT_EQ(answer(v2).verdict, ZapVerdict::kWrongVersion);
  std::vector<std::string> no_version = curve_request("elastic", kNodeKey);
  no_version[0] = "";
  EXPECT_EQ(answer(no_version).verdict, ZapVerdict::kWrongVersion);

  // PLAIN carries a user name and a password; NULL nothing; lowercase is another mechanism.
  EXPECT_EQ(answer({"1.0", "1", "elastic", "addr", "", "PLAIN", "n1", kNodeKey}).verdict,
            ZapVerdict::kWrongMechanism);
  EXPECT_EQ(answer({"1.0", "1", "elastic", "addr", "", "NULL"}).verdict,
            ZapVerdict::kWrongMechanism);
  std::vector<std::string> lowercase = curve_request("elastic", kNodeKey);
  lowercase[5] = "curve";
  const ZapAnswer a = answer(lowercase);
  EXPECT_EQ(a.verdict, ZapVerdict::kWrongMechanism);
  EXPECT_EQ(a.reply[2], "400");
  EXPECT_EQ(a.reply[4], "");
  EXPECT_EQ(node_keys_.lookups, 0);
  EXPECT_EQ(node_refused_, 5u);
}

TEST_F(ZapHandlerTest, ADomainNobodyAddedIsRefusedAndCountedElsewhere) {
  EXPECT_EQ(answer(curve_request("", kNodeKey)).verdict, ZapVerdict::kUnknownDomain);
  EXPECT_EQ(answer(curve_request("elastic2", kNodeKey)).verdict, ZapVerdict::kUnknownDomain);
  EXPECT_EQ(answer(curve_request("ELASTIC", kNodeKey)).verdict, ZapVerdict::kUnknownDomain);
  EXPECT_EQ(elsewhere_refused_, 3u);
  EXPECT_EQ(node_refused_ + control_refused_, 0u);
  EXPECT_EQ(node_keys_.lookups + client_keys_.lookups, 0);
}

TEST_F(ZapHandlerTest, AddingADomainAgainReplacesItsKeysAndCounter) {
  MapKeys other{{{kStrangerKey, "n9"}}};
  std::uint64_t other_refused = 0;
  handler_.add_domain("elastic", &other, &other_refused, "/tmp/other");
  EXPECT_EQ(answer(curve_request("elastic", kStrangerKey)).user, "n9");
  EXPECT_EQ(answer(curve_request("elastic", kNodeKey)).verdict, ZapVerdict::kUnknownKey);
  EXPECT_EQ(other_refused, 1u);
  EXPECT_EQ(node_refused_, 0u);
}

// Any frames at all: an answer with six frames, never a crash, and a user only when allowed.
TEST_F(ZapHandlerTest, RandomFramesGetAnAnswerAndOnlyAnAllowedOneHasAUser) {
  std::mt19937 rng(14);
  const std::vector<std::string> pieces = {"1.0",    "elastic", "elastic.control",
                                           "CURVE",  "PLAIN",   "",
                                           kNodeKey, kAliceKey, std::string("\0\xff", 2)};
  int allowed = 0;
  for (int i = 0; i < 20'000; ++i) {
    std::vector<std::string> frames(rng() % 9);
    for (std::string& f : frames) {
      if (rng() % 4 == 0) {
        f.resize(rng() % 40);
        for (char& c : f) c = static_cast<char>(rng());
      } else {
        f = pieces[rng() % pieces.size()];
      }
    }
    const ZapAnswer a = answer(frames);
    EXPECT_EQ(a.reply[0], "1.0");
    EXPECT_EQ(a.reply[2], a.allowed() ? "200" : "400");
    EXPECT_EQ(a.reply[4], a.user);
    EXPECT_EQ(a.user.empty(), !a.allowed());
    allowed += a.allowed();
  }
  const std::uint64_t refused = node_refused_ + control_refused_ + elsewhere_refused_;
  EXPECT_EQ(refused + allowed, 20'000u);
}

}  // namespace
}  // namespace elastic::transport
