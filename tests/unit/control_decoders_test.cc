// Unit tier, security: the typed decoders of control requests
// (daemon/control/requests.h). The requests that stopped the leader in the attack round each
// get one sentence naming the field; valid requests decode to their values. (Round reports are
// wire messages now: node_codec_test.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "daemon/control/protocol.h"
#include "daemon/control/requests.h"
#include "daemon/control/verbs.h"

namespace elastic {
namespace {

using ::testing::HasSubstr;

template <typename T>
std::string error_of(const Result<T>& result) {
  return result.ok() ? std::string("(decoded)") : result.error().message;
}

TEST(ControlRequests, TheAttackRequestsAreOneClearErrorEach) {
  // Each of these threw a JSON type error in the job service and stopped the daemon.
  EXPECT_EQ(error_of(control::decode_events_request(R"({"verb":"events","job":1})")),
            "The events request's \"job\" must be a string (a job id), not a number.");
  EXPECT_EQ(error_of(control::decode_voters_request(R"({"verb":"voters","action":1})")),
            "The voters request's \"action\" must be a string (\"add\" or \"remove\"), not a "
            "number.");
  EXPECT_EQ(error_of(control::decode_drain_request("drain",
                                                   R"({"verb":"drain","node":"n1","reason":1})")),
            "The drain request's \"reason\" must be a string (why), not a number.");
  EXPECT_EQ(
      error_of(control::decode_voters_request(R"({"verb":"voters","action":"add","node":[1]})")),
      "The voters request's \"node\" must be a string (a node name), not an array.");
}

TEST(ControlRequests, PriorityNeedsAJobAndA32BitInteger) {
  auto ok = control::decode_priority_request(R"({"verb":"priority","job":"a-1","priority":-7})");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->job, "a-1");
  EXPECT_EQ(ok->priority, -7);
  EXPECT_EQ(error_of(control::decode_priority_request(R"({"verb":"priority","job":"a-1"})")),
            "The priority request needs \"priority\": an integer (the job's new priority).");
  EXPECT_EQ(error_of(control::decode_priority_request(
                R"({"verb":"priority","job":"a-1","priority":5000000000})")),
            "The \"priority\" request's \"priority\" 5000000000 is out of range.");
  EXPECT_THAT(error_of(control::decode_priority_request(
                  R"({"verb":"priority","job":"a-1","priority":"high"})")),
              HasSubstr("\"priority\" must be an integer (the job's new priority)"));
  EXPECT_EQ(error_of(control::decode_priority_request(R"({"verb":"priority","priority":1})")),
            "The priority request needs \"job\": a string (a job id).");
  for (const char* verb : {"priority", "suspend", "resume"}) {
    ASSERT_NE(control::find_verb(verb), nullptr) << verb;
    EXPECT_EQ(control::find_verb(verb)->caller, control::Caller::kAnyone) << verb;
  }
}

TEST(ControlRequests, MissingEmptyAndOutOfRangeFieldsNameTheField) {
  EXPECT_EQ(error_of(control::decode_job_request("cancel", R"({"verb":"cancel"})")),
            "The cancel request needs \"job\": a string (a job id).");
  EXPECT_EQ(error_of(control::decode_job_request("job", R"({"verb":"job","job":""})")),
            "The job request's \"job\" must not be empty.");
  EXPECT_THAT(error_of(control::decode_job_request("job", "[1,2]")),
              HasSubstr("is not a JSON object"));
  EXPECT_THAT(error_of(control::decode_job_request("job", "{\"job\":")),
              HasSubstr("is not a JSON object"));
  EXPECT_THAT(error_of(control::decode_events_request(R"({"limit":-1})")),
              HasSubstr("\"limit\" must be an integer >= 0 (how many events)"));
  EXPECT_THAT(error_of(control::decode_events_request(R"({"limit":"10"})")),
              HasSubstr("not a string"));
  EXPECT_EQ(error_of(control::decode_voters_request(R"({"action":"promote","node":"n2"})")),
            "The voters request's \"action\" must be \"add\" or \"remove\", not \"promote\".");
  EXPECT_EQ(error_of(control::decode_voters_request(R"({"action":"add"})")),
            "The voters request needs \"node\": a string (a node name).");
  EXPECT_EQ(error_of(control::decode_submit_request(R"({"spec":"train"})")),
            "The submit request's \"spec\" must be an object (the job spec), not a string.");
  EXPECT_THAT(error_of(control::decode_logs_request(R"({"job":"j","rank":1.5})")),
              HasSubstr("\"rank\" must be an integer >= 0 (a rank)"));
  EXPECT_THAT(error_of(control::decode_logs_request(R"({"job":"j","rank":0,"offset":{}})")),
              HasSubstr("\"offset\" must be an integer >= 0 (a byte offset)"));
  EXPECT_THAT(
      error_of(control::decode_job_request("job", "{\"job\":\"" + std::string(300, 'j') + "\"}")),
      HasSubstr("is longer than 256 bytes"));
}

TEST(ControlRequests, ValidRequestsDecodeToTheirValues) {
  auto events = control::decode_events_request(R"({"verb":"events","job":"train-1","limit":7})");
  ASSERT_TRUE(events.ok()) << events.error().message;
  EXPECT_EQ(events->job, "train-1");
  EXPECT_EQ(events->limit, 7u);
  // Absent, null and empty optional fields are the defaults; a huge limit is clamped.
  auto all = control::decode_events_request(R"({"verb":"events","job":null,"limit":1e0})");
  EXPECT_FALSE(all.ok());  // 1e0 is a float
  all = control::decode_events_request(R"({"verb":"events","job":"","limit":999999999})");
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->job, "");
  EXPECT_EQ(all->limit, control::kMaxEventsLimit);

  auto list = control::decode_voters_request(R"({"verb":"voters"})");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->action, control::VotersRequest::Action::kList);
  auto remove = control::decode_voters_request(R"({"action":"remove","node":"n3","x":[]})");
  ASSERT_TRUE(remove.ok()) << remove.error().message;
  EXPECT_EQ(remove->action, control::VotersRequest::Action::kRemove);
  EXPECT_EQ(remove->node, "n3");

  auto drain = control::decode_drain_request("undrain", R"({"node":"n2"})");
  ASSERT_TRUE(drain.ok());
  EXPECT_EQ(drain->node, "n2");
  EXPECT_EQ(drain->reason, "");

  auto submit = control::decode_submit_request(R"({"verb":"submit","spec":{"name":"x"}})");
  ASSERT_TRUE(submit.ok());
  EXPECT_EQ(submit->spec, R"({"name":"x"})");

  auto logs = control::decode_logs_request(R"({"job":"j","rank":3,"max_bytes":0,"offset":9})");
  ASSERT_TRUE(logs.ok()) << logs.error().message;
  EXPECT_EQ(logs->rank, 3u);
  EXPECT_EQ(logs->max_bytes, 1u);  // clamped to 1..kMaxLogBytes
  EXPECT_EQ(logs->offset, 9u);
  EXPECT_EQ(control::decode_logs_request(R"({"job":"j","rank":3})")->offset, std::nullopt);
  // The round of the logs verbs: optional (none: the newest round, or every round), a number.
  EXPECT_EQ(control::decode_logs_request(R"({"job":"j","rank":3})")->round, std::nullopt);
  EXPECT_EQ(control::decode_logs_request(R"({"job":"j","rank":3,"round":7})")->round, 7u);
  EXPECT_THAT(error_of(control::decode_logs_request(R"({"job":"j","rank":3,"round":"7"})")),
              HasSubstr("The logs request's \"round\" must be"));
  auto files = control::decode_log_files_request(R"({"job":"j","node":"n2","round":0})");
  ASSERT_TRUE(files.ok()) << files.error().message;
  EXPECT_EQ(files->job, "j");
  EXPECT_EQ(files->node, "n2");
  EXPECT_EQ(files->round, 0u);
  EXPECT_EQ(control::decode_log_files_request(R"({"job":"j"})")->round, std::nullopt);
  EXPECT_THAT(error_of(control::decode_log_files_request(R"({"job":"j","round":-1})")),
              HasSubstr("The log_files request's \"round\" must be"));
  EXPECT_THAT(error_of(control::decode_log_files_request(R"({"round":1})")),
              HasSubstr("The log_files request needs \"job\""));
}

// The verb table (control/verbs.h): one entry per verb, the leader's verbs marked, and the
// answer to an unknown verb built from it.
// A status reply's numbers: a float, a negative number for an unsigned count or 1e116 is one
// error naming the field (found by control_fuzz: nlohmann's get<> converted 3.2e116 to an
// unsigned 64-bit integer, undefined behaviour).
TEST(ControlReplies, AStatusNumberTheFieldCannotHoldIsAnErrorNamingIt) {
  const auto status = [](const std::string& generation) {
    return control::decode_status_reply(R"({"ok":true,"self":{"name":"n1","generation":)" +
                                        generation + R"(,"address":"tcp://n1:7946"}})");
  };
  auto ok = status("7");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->self.generation, 7u);
  for (const std::string bad : {"3.2e116", "-1", "1.5"}) {
    auto decoded = status(bad);
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_THAT(decoded.error().message, HasSubstr("\"generation\"")) << bad;
  }
  EXPECT_THAT(status("\"x\"").error().message, HasSubstr("has the wrong type"));
  EXPECT_THAT(status("-1").error().message, HasSubstr("is out of range"));
}

TEST(VerbTable, NamesAreUniqueAndTheUnknownVerbAnswerListsEveryOne) {
  std::vector<std::string> names;
  for (const control::Verb& verb : control::verbs()) names.emplace_back(verb.name);
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  EXPECT_EQ(names.size(), 19u);
  const std::string unknown = control::unknown_verb_message("x");
  EXPECT_THAT(unknown,
              ::testing::StartsWith("Unknown request \"x\"; this daemon answers \"submit\", "));
  EXPECT_THAT(unknown, ::testing::EndsWith(" and \"progress\"."));
  for (const std::string& name : names)
    EXPECT_THAT(unknown, ::testing::HasSubstr("\"" + name + "\""));
  for (const char* leader : {"submit", "cancel", "jobs", "job", "events", "drain", "undrain",
                             "drained", "voters", "priority", "suspend", "resume"}) {
    EXPECT_TRUE(control::is_leader_verb(leader)) << leader;
  }
  for (const char* local :
       {"status", "nodes", "topology", "logs", "log_files", "reload", "progress", "x"}) {
    EXPECT_FALSE(control::is_leader_verb(local)) << local;
  }
  ASSERT_NE(control::find_verb("reload"), nullptr);
  EXPECT_EQ(control::admin_only_message(*control::find_verb("reload")),
            "Only root or members of control.admin_group may reload the configuration.");
  EXPECT_EQ(control::find_verb("frobnicate"), nullptr);
}

}  // namespace
}  // namespace elastic
