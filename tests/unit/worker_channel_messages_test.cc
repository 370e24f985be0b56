// The worker channel's codec and framing (daemon/worker_channel/messages.h): round trips of
// every message, the sentence for each kind of bad field, unknown types, and frames split or
// joined arbitrarily, with the bound on a frame's length.
#include "daemon/worker_channel/messages.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/result_assertions.h"

namespace elastic::worker_channel {
namespace {

RoundOffer sample_round() {
  return RoundOffer{.job = "fmnist-1",
                    .round = 7,
                    .term = 3,
                    .rank = 5,
                    .local_rank = 1,
                    .world_size = 8,
                    .local_world_size = 2,
                    .group_rank = 2,
                    .master_addr = "10.0.0.4",
                    .master_port = 29500,
                    .restart_count = 6};
}

TEST(WorkerChannelMessagesTest, EveryMessageSurvivesARoundTrip) {
  Result<WorkerMessage> hello = decode_worker_message(encode(WorkerMessage(Hello{1, true})));
  ASSERT_OK(hello);
  ASSERT_TRUE(std::holds_alternative<Hello>(*hello));
  EXPECT_EQ(std::get<Hello>(*hello).version, 1u);
  EXPECT_TRUE(std::get<Hello>(*hello).live);

  Result<WorkerMessage> joined = decode_worker_message(encode(WorkerMessage(Joined{9, 4})));
  ASSERT_OK(joined);
  EXPECT_EQ(std::get<Joined>(*joined).round, 9u);
  EXPECT_EQ(std::get<Joined>(*joined).term, 4u);

  Result<WorkerMessage> alive = decode_worker_message(encode(WorkerMessage(Alive{812, 40, true})));
  ASSERT_OK(alive);
  EXPECT_EQ(std::get<Alive>(*alive).step, 812u);
  EXPECT_EQ(std::get<Alive>(*alive).idle_ms, 40u);
  EXPECT_TRUE(std::get<Alive>(*alive).waiting);

  const RoundOffer sent = sample_round();
  Result<DaemonMessage> round = decode_daemon_message(encode(DaemonMessage(sent)));
  ASSERT_OK(round);
  const RoundOffer& got = std::get<RoundOffer>(*round);
  EXPECT_EQ(got.job, sent.job);
  EXPECT_EQ(got.round, sent.round);
  EXPECT_EQ(got.term, sent.term);
  EXPECT_EQ(got.rank, sent.rank);
  EXPECT_EQ(got.local_rank, sent.local_rank);
  EXPECT_EQ(got.world_size, sent.world_size);
  EXPECT_EQ(got.local_world_size, sent.local_world_size);
  EXPECT_EQ(got.group_rank, sent.group_rank);
  EXPECT_EQ(got.master_addr, sent.master_addr);
  EXPECT_EQ(got.master_port, sent.master_port);
  EXPECT_EQ(got.restart_count, sent.restart_count);
  EXPECT_FALSE(got.intact);
  RoundOffer grow = sample_round();
  grow.intact = true;
  Result<DaemonMessage> intact = decode_daemon_message(encode(DaemonMessage(grow)));
  ASSERT_OK(intact);
  EXPECT_TRUE(std::get<RoundOffer>(*intact).intact);

  Result<DaemonMessage> stop = decode_daemon_message(encode(DaemonMessage(Stop{"job cancelled"})));
  ASSERT_OK(stop);
  EXPECT_EQ(std::get<Stop>(*stop).reason, "job cancelled");
}

TEST(WorkerChannelMessagesTest, TheWireFormIsTheDocumentedJson) {
  EXPECT_EQ(encode(WorkerMessage(Hello{1, false})), R"({"live":false,"type":"hello","version":1})");
  EXPECT_EQ(encode(WorkerMessage(Joined{2, 1})), R"({"round":2,"term":1,"type":"joined"})");
  EXPECT_EQ(encode(WorkerMessage(Alive{7, 250, false})),
            R"({"idle_ms":250,"step":7,"type":"alive","waiting":false})");
}

TEST(WorkerChannelMessagesTest, UnknownTypesAndFieldsAreToleratedForNewerPeers) {
  Result<WorkerMessage> newer = decode_worker_message(R"({"type":"progress","step":5})");
  ASSERT_OK(newer);
  ASSERT_TRUE(std::holds_alternative<UnknownMessage>(*newer));
  EXPECT_EQ(std::get<UnknownMessage>(*newer).type, "progress");

  Result<WorkerMessage> extra =
      decode_worker_message(R"({"type":"hello","version":2,"live":true,"gpus":[0,1]})");
  ASSERT_OK(extra);
  EXPECT_EQ(std::get<Hello>(*extra).version, 2u);

  Result<DaemonMessage> later = decode_daemon_message(R"({"type":"pause"})");
  ASSERT_OK(later);
  EXPECT_EQ(std::get<UnknownMessage>(*later).type, "pause");
}

struct BadCase {
  const char* json;
  const char* expected;  // a part of the error sentence
};

TEST(WorkerChannelMessagesTest, EveryBadWorkerMessageIsOneSentenceNamingTheField) {
  const std::vector<BadCase> cases = {
      {"", "The worker's message is not a JSON object."},
      {"not json", "The worker's message is not a JSON object."},
      {"[1,2]", "The worker's message is not a JSON object."},
      {"{}", "The worker's message needs \"type\""},
      {R"({"type":""})", "\"type\" must not be empty"},
      {R"({"type":7})", "\"type\" must be a string (the message type), not a number."},
      {R"({"type":"hello","live":true})", "The worker's \"hello\" message needs \"version\""},
      {R"({"type":"hello","version":0,"live":true})", "has version 0"},
      {R"({"type":"hello","version":1,"live":"yes"})",
       "\"live\" must be true or false (whether it can re-form in place), not a string."},
      {R"({"type":"hello","version":-1,"live":true})", "\"version\" must be an integer >= 0"},
      {R"({"type":"joined","round":1.5,"term":1})", "\"round\" must be an integer >= 0"},
      {R"({"type":"joined","round":1})", "The worker's \"joined\" message needs \"term\""},
      {R"({"type":"alive","step":3,"idle_ms":5})",
       "The worker's \"alive\" message needs \"waiting\""},
      {R"({"type":"alive","step":-3,"idle_ms":5,"waiting":true})", "\"step\" must be an integer"},
      {R"({"type":"alive","step":3,"idle_ms":1e300,"waiting":false})", "\"idle_ms\""},
      {R"({"type":"alive","step":3,"idle_ms":18446744073709551615,"waiting":false})",
       "\"idle_ms\""},
  };
  for (const BadCase& c : cases) {
    Result<WorkerMessage> decoded = decode_worker_message(c.json);
    ASSERT_FALSE(decoded.ok()) << c.json;
    EXPECT_NE(decoded.error().message.find(c.expected), std::string::npos)
        << c.json << " -> " << decoded.error().message;
  }
}

TEST(WorkerChannelMessagesTest, ARoundThatCannotBeRunIsRefused) {
  auto with = [](auto change) {
    RoundOffer m = sample_round();
    change(m);
    return decode_daemon_message(encode(DaemonMessage(m)));
  };
  const auto rank_outside = with([](RoundOffer& m) { m.rank = 8; });
  ASSERT_FALSE(rank_outside.ok());
  EXPECT_EQ(rank_outside.error().message,
            "The daemon's \"round\" message gives rank 8 of a world of 8.");
  const auto local_outside = with([](RoundOffer& m) { m.local_rank = 2; });
  ASSERT_FALSE(local_outside.ok());
  EXPECT_NE(local_outside.error().message.find("local rank 2 of 2"), std::string::npos);
  const auto no_port = with([](RoundOffer& m) { m.master_port = 0; });
  ASSERT_FALSE(no_port.ok());
  EXPECT_NE(no_port.error().message.find("no store port"), std::string::npos);
  const auto big_port =
      decode_daemon_message(R"({"type":"round","job":"j","round":1,"term":1,"rank":0,)"
                            R"("local_rank":0,"world_size":1,"local_world_size":1,)"
                            R"("group_rank":0,"master_addr":"h","master_port":70000,)"
                            R"("restart_count":0})");
  ASSERT_FALSE(big_port.ok());
  EXPECT_NE(big_port.error().message.find("\"master_port\" must be an integer from 0 to 65535"),
            std::string::npos)
      << big_port.error().message;
  const auto no_job = with([](RoundOffer& m) { m.job = std::string(300, 'j'); });
  ASSERT_FALSE(no_job.ok());
  EXPECT_NE(no_job.error().message.find("\"job\" is longer than 256 bytes"), std::string::npos);
  const std::string round_fields =
      R"({"type":"round","job":"j","round":1,"term":1,"rank":0,"local_rank":0,"world_size":1,)"
      R"("local_world_size":1,"group_rank":0,"master_addr":"h","master_port":29500,)"
      R"("restart_count":0)";
  // An older daemon's offer has no "intact": the group is aborted, as it always was.
  const auto older = decode_daemon_message(round_fields + "}");
  ASSERT_OK(older);
  EXPECT_FALSE(std::get<RoundOffer>(*older).intact);
  const auto bad_intact = decode_daemon_message(round_fields + R"(,"intact":1})");
  ASSERT_FALSE(bad_intact.ok());
  EXPECT_NE(bad_intact.error().message.find("\"intact\" must be true or false"), std::string::npos)
      << bad_intact.error().message;
}

TEST(WorkerChannelMessagesTest, FramesSplitAtEveryByteAreReassembled) {
  const std::string stream =
      frame(encode(WorkerMessage(Hello{1, true}))) + frame(encode(WorkerMessage(Joined{3, 2})));
  FrameReader reader;
  std::vector<std::string> frames;
  for (char c : stream) {
    reader.append(&c, 1);
    while (true) {
      auto next = reader.next();
      ASSERT_OK(next);
      if (!next->has_value()) break;
      frames.push_back(**next);
    }
  }
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0], encode(WorkerMessage(Hello{1, true})));
  EXPECT_EQ(frames[1], encode(WorkerMessage(Joined{3, 2})));
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(WorkerChannelMessagesTest, TwoFramesInOneReadComeOutInOrder) {
  const std::string stream = frame("{\"a\":1}") + frame("{\"b\":2}") + std::string("\0\0", 2);
  FrameReader reader;
  reader.append(stream.data(), stream.size());
  auto first = reader.next();
  ASSERT_OK(first);
  EXPECT_EQ(first->value(), "{\"a\":1}");
  auto second = reader.next();
  ASSERT_OK(second);
  EXPECT_EQ(second->value(), "{\"b\":2}");
  auto partial = reader.next();
  ASSERT_OK(partial);
  EXPECT_FALSE(partial->has_value());
  EXPECT_EQ(reader.buffered(), 2u);
}

TEST(WorkerChannelMessagesTest, AFrameAtTheBoundPassesAndOneAboveBreaksTheStreamForGood) {
  const std::string largest(kMaxFrameBytes, 'x');
  FrameReader fits;
  const std::string whole = frame(largest);
  fits.append(whole.data(), whole.size());
  auto got = fits.next();
  ASSERT_OK(got);
  EXPECT_EQ(got->value().size(), kMaxFrameBytes);

  FrameReader reader;
  const std::string header = frame(std::string(kMaxFrameBytes + 1, 'x')).substr(0, 4);
  reader.append(header.data(), header.size());
  auto bad = reader.next();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "a frame announces 65537 bytes; a frame holds 1 to 65536.");
  EXPECT_TRUE(reader.broken());
  const std::string more = frame("{}");
  reader.append(more.data(), more.size());
  EXPECT_EQ(reader.buffered(), 0u);  // dropped: the stream cannot be resynchronised
  EXPECT_FALSE(reader.next().ok());
}

TEST(WorkerChannelMessagesTest, AnEmptyFrameIsAnError) {
  FrameReader reader;
  const std::string empty(4, '\0');
  reader.append(empty.data(), empty.size());
  auto bad = reader.next();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "a frame announces 0 bytes; a frame holds 1 to 65536.");
}

}  // namespace
}  // namespace elastic::worker_channel
