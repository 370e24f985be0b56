// Integration tier: a plain Python script run as a job by real elasticd processes on 127.0.0.1,
// the way a torchrun user runs theirs (issue 16).
//  - Output: a print() without flush, followed by a long sleep, reaches `elasticctl logs` within
//    a second while the script still runs (PYTHONUNBUFFERED=1 in the worker's environment; the
//    daemon reads the worker's pipe as it becomes readable and stamps each line).
// Python is /usr/bin/python3; every wait polls with a deadline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/integ/daemon_under_test.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace elastic::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr const char* kPython = "/usr/bin/python3";

json ctl_json(const Daemon& daemon, const std::vector<std::string>& args) {
  const RunResult r = elasticctl_on(daemon, args);
  if (!r.status.exited_with(0)) return nullptr;
  const json reply = json::parse(r.out, nullptr, false);
  return reply.is_discarded() ? json(nullptr) : reply;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(PythonJobs, APrintWithoutFlushIsInTheLogsWithinASecond) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  TempDir dir;
  Daemon n1(dir, "n1", {});
  n1.start();
  // print() without flush into a pipe: block-buffered by Python unless PYTHONUNBUFFERED is set.
  const std::string script =
      "import time\n"
      "print('printed at', repr(time.time()))\n"
      "time.sleep(600)\n";
  const RunResult submitted =
      elasticctl_on(n1, {"submit", "--name", "py", "--nodes", "1:1", "--", kPython, "-c", script});
  ASSERT_TRUE(submitted.status.exited_with(0)) << submitted.err;
  const std::string id = "py-1";
  const std::regex printed(R"((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) printed at ([0-9.]+)\n)");
  std::smatch match;
  std::string logs;
  double seen_at = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        const RunResult r = elasticctl_on(n1, {"logs", id, "--rank", "0"});
        seen_at = wall_seconds();
        logs = r.out;
        return r.status.exited_with(0) && std::regex_search(logs, match, printed);
      },
      std::chrono::seconds(20)))
      << logs << "\n"
      << n1.process().err();
  const double printed_at = std::stod(match[2]);
  EXPECT_LT(seen_at - printed_at, 1.0) << logs;
  // The script still sleeps: the line did not wait for its exit.
  const json status = ctl_json(n1, {"status", "--json"});
  ASSERT_FALSE(status.is_null());
  bool running = false;
  for (const json& w : status.value("workers", json::array())) {
    running = running || (w["job"] == id && w["state"] == "running");
  }
  EXPECT_TRUE(running) << status.dump();
  EXPECT_TRUE(elasticctl_on(n1, {"cancel", id}).status.exited_with(0));
}

}  // namespace
}  // namespace elastic::testing
