// The HTTP request head parser, the bearer token check and the dashboard's routes
// (daemon/node/http_request.h, daemon/dashboard/dashboard.h): table-driven, hostile input
// included.
#include "daemon/node/http_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/dashboard/dashboard.h"

namespace elastic::node {
namespace {

using ::testing::HasSubstr;
using State = HttpParse::State;

struct ParseCase {
  std::string name;
  std::string input;
  State state;
  int status = 0;         // with kRefused
  std::string path = "";  // with kRequest
  std::string query = "";
  std::string authorization = "";
};

class ParseTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ParseTest, Parses) {
  const ParseCase& c = GetParam();
  HttpLimits limits;
  limits.max_request_bytes = 256;
  limits.max_headers = 4;
  const HttpParse parse = parse_http_request(c.input, limits);
  ASSERT_EQ(parse.state, c.state) << c.input << " -> " << parse.refusal.status << " "
                                  << parse.refusal.body;
  if (c.state == State::kRefused) {
    EXPECT_EQ(parse.refusal.status, c.status) << parse.refusal.body;
    EXPECT_FALSE(parse.refusal.body.empty());
  }
  if (c.state == State::kRequest) {
    EXPECT_EQ(parse.request.path, c.path);
    EXPECT_EQ(parse.request.query, c.query);
    EXPECT_EQ(parse.request.authorization, c.authorization);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Heads, ParseTest,
    ::testing::Values(
        ParseCase{"Get", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", State::kRequest, 0, "/"},
        ParseCase{"Http10", "GET /jobs HTTP/1.0\r\n\r\n", State::kRequest, 0, "/jobs"},
        ParseCase{"BareLf", "GET /jobs HTTP/1.1\nHost: x\n\n", State::kRequest, 0, "/jobs"},
        ParseCase{"Query", "GET /api/job?id=a-1 HTTP/1.1\r\n\r\n", State::kRequest, 0, "/api/job",
                  "id=a-1"},
        ParseCase{"Head", "HEAD /metrics HTTP/1.1\r\n\r\n", State::kRequest, 0, "/metrics"},
        ParseCase{"Token", "GET / HTTP/1.1\r\nauthorization:  Bearer abc \r\n\r\n", State::kRequest,
                  0, "/", "", "Bearer abc"},
        ParseCase{"Incomplete", "GET / HTTP/1.1\r\nHost: x\r\n", State::kIncomplete},
        ParseCase{"Empty", "", State::kIncomplete},
        ParseCase{"Post", "POST /api/jobs HTTP/1.1\r\n\r\n", State::kRefused, 405},
        ParseCase{"Delete", "DELETE / HTTP/1.1\r\n\r\n", State::kRefused, 405},
        ParseCase{"NoVersion", "GET /\r\n\r\n", State::kRefused, 400},
        ParseCase{"Http2", "GET / HTTP/2.0\r\n\r\n", State::kRefused, 400},
        ParseCase{"AbsoluteForm", "GET http://x/ HTTP/1.1\r\n\r\n", State::kRefused, 400},
        ParseCase{"SpaceInTarget", "GET /a b HTTP/1.1\r\n\r\n", State::kRefused, 400},
        ParseCase{"ControlInTarget", std::string("GET /a\x01 HTTP/1.1\r\n\r\n"), State::kRefused,
                  400},
        ParseCase{"NulInTarget", std::string("GET /a\0b HTTP/1.1\r\n\r\n", 22), State::kRefused,
                  400},
        ParseCase{"Fragment", "GET /#x HTTP/1.1\r\n\r\n", State::kRefused, 400},
        ParseCase{"Garbage", "\x16\x03\x01\x02\x05\n\n", State::kRefused, 400},
        ParseCase{"HeaderWithoutColon", "GET / HTTP/1.1\r\nHost x\r\n\r\n", State::kRefused, 400},
        ParseCase{"EmptyHeaderName", "GET / HTTP/1.1\r\n: x\r\n\r\n", State::kRefused, 400},
        ParseCase{"SpaceInHeaderName", "GET / HTTP/1.1\r\nHo st: x\r\n\r\n", State::kRefused, 400},
        ParseCase{"Folded", "GET / HTTP/1.1\r\nA: x\r\n  y\r\n\r\n", State::kRefused, 400},
        ParseCase{"TwoAuthorizations",
                  "GET / HTTP/1.1\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n",
                  State::kRefused, 400},
        ParseCase{"ControlInValue", "GET / HTTP/1.1\r\nA: x\x7f\r\n\r\n", State::kRefused, 400},
        ParseCase{"TooManyHeaders",
                  "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\n",
                  State::kRefused, 431},
        ParseCase{"TooLargeIncomplete", "GET /" + std::string(300, 'a'), State::kRefused, 431},
        ParseCase{"TooLargeComplete", "GET /" + std::string(300, 'a') + " HTTP/1.1\r\n\r\n",
                  State::kRefused, 431}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(HttpRequestTest, MethodNotAllowedNamesTheAllowedOnes) {
  const HttpParse parse = parse_http_request("PUT / HTTP/1.1\r\n\r\n", {});
  ASSERT_EQ(parse.state, State::kRefused);
  EXPECT_EQ(parse.refusal.extra_headers, "Allow: GET, HEAD\r\n");
}

TEST(HttpRequestTest, EveryPrefixOfARequestIsIncompleteOrTheRequest) {
  const std::string request = "GET /api/events?job=a&limit=5 HTTP/1.1\r\nHost: h\r\n\r\n";
  for (std::size_t n = 0; n < request.size(); ++n) {
    EXPECT_EQ(parse_http_request(request.substr(0, n), {}).state, State::kIncomplete) << n;
  }
  EXPECT_EQ(parse_http_request(request, {}).state, State::kRequest);
}

TEST(HttpRequestTest, ResponseIsSerialisedWithLengthAndClose) {
  const HttpResponse response = text_response(401, "no\n", "X: y\r\n");
  EXPECT_EQ(serialize_http_response(response, false),
            "HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 3\r\nConnection: close\r\nX: y\r\n\r\nno\n");
  EXPECT_EQ(serialize_http_response(response, true).find("no\n"), std::string::npos);
}

struct TokenCase {
  std::string name;
  std::string header;
  std::string token;
  bool matches;
};

class TokenTest : public ::testing::TestWithParam<TokenCase> {};

TEST_P(TokenTest, Matches) {
  const TokenCase& c = GetParam();
  EXPECT_EQ(bearer_token_matches(c.header, c.token), c.matches) << c.header;
}

INSTANTIATE_TEST_SUITE_P(
    Tokens, TokenTest,
    ::testing::Values(TokenCase{"Exact", "Bearer s3cret", "s3cret", true},
                      TokenCase{"SchemeCase", "bearer s3cret", "s3cret", true},
                      TokenCase{"Spaces", "  Bearer   s3cret  ", "s3cret", true},
                      TokenCase{"Missing", "", "s3cret", false},
                      TokenCase{"Wrong", "Bearer s3creT", "s3cret", false},
                      TokenCase{"Prefix", "Bearer s3cre", "s3cret", false},
                      TokenCase{"Longer", "Bearer s3cret0", "s3cret", false},
                      TokenCase{"OtherScheme", "Basic s3cret", "s3cret", false},
                      TokenCase{"NoSpace", "Bearers3cret", "s3cret", false},
                      TokenCase{"SchemeOnly", "Bearer", "s3cret", false},
                      TokenCase{"EmptyToken", "Bearer ", "", false},
                      TokenCase{"NulInside", std::string("Bearer s3\0cret", 14), "s3cret", false}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(HttpRequestTest, QueryValuesAreDecoded) {
  EXPECT_EQ(query_value("id=a%2Db+c&x=1", "id"), "a-b c");
  EXPECT_EQ(query_value("x=1&id=j-7", "id"), "j-7");
  EXPECT_EQ(query_value("idx=1", "id"), "");
  EXPECT_EQ(query_value("id=%zz", "id"), "");
  EXPECT_EQ(query_value("id=%4", "id"), "");
  EXPECT_EQ(query_value("", "id"), "");
  std::string out;
  EXPECT_FALSE(url_decode("%", out));
  EXPECT_TRUE(url_decode("%41%62", out));
  EXPECT_EQ(out, "Ab");
}

}  // namespace
}  // namespace elastic::node

namespace elastic::dashboard {
namespace {

using ::testing::HasSubstr;
using Kind = Route::Kind;

// `target` is a path and maybe "?query"; `request` the control request of an kApi route.
struct RouteCase {
  std::string name;
  std::string target;
  Kind kind;
  std::string request = "";
};

class RouteTest : public ::testing::TestWithParam<RouteCase> {};

TEST_P(RouteTest, Routes) {
  const RouteCase& c = GetParam();
  const auto question = c.target.find('?');
  const std::string path = c.target.substr(0, question);
  const std::string query = question == std::string::npos ? "" : c.target.substr(question + 1);
  const Route r = route(path, query);
  ASSERT_EQ(r.kind, c.kind) << c.target << ": " << r.error;
  switch (c.kind) {
    case Kind::kAsset:
      EXPECT_FALSE(r.body.empty());
      EXPECT_FALSE(r.content_type.empty());
      break;
    case Kind::kApi: {
      const auto expected = nlohmann::json::parse(c.request);
      EXPECT_EQ(nlohmann::json::parse(r.request), expected);
      EXPECT_EQ(r.verb, expected.value("verb", "?"));
      break;
    }
    case Kind::kBadRequest:
      EXPECT_FALSE(r.error.empty());
      break;
    case Kind::kNotFound:
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Paths, RouteTest,
    ::testing::Values(
        RouteCase{"Cluster", "/", Kind::kAsset}, RouteCase{"Jobs", "/jobs", Kind::kAsset},
        RouteCase{"Job", "/job?id=x", Kind::kAsset},
        RouteCase{"Incidents", "/incidents", Kind::kAsset},
        RouteCase{"Css", "/dashboard.css", Kind::kAsset},
        RouteCase{"Js", "/dashboard.js", Kind::kAsset},
        RouteCase{"Status", "/api/status", Kind::kApi, R"({"verb":"status"})"},
        RouteCase{"Nodes", "/api/nodes", Kind::kApi, R"({"verb":"nodes"})"},
        RouteCase{"JobsApi", "/api/jobs", Kind::kApi, R"({"verb":"jobs"})"},
        RouteCase{"JobApi", "/api/job?id=fm-1", Kind::kApi, R"({"verb":"job","job":"fm-1"})"},
        RouteCase{"JobApiEncoded", "/api/job?id=a%22b", Kind::kApi,
                  R"({"verb":"job","job":"a\"b"})"},
        RouteCase{"Events", "/api/events?job=j&limit=5", Kind::kApi,
                  R"({"verb":"events","job":"j","limit":5})"},
        RouteCase{"EventsAll", "/api/events", Kind::kApi, R"({"verb":"events"})"},
        RouteCase{"Drained", "/api/drained", Kind::kApi, R"({"verb":"drained"})"},
        // Only the list: the arguments of a voter change are never passed on.
        RouteCase{"Voters", "/api/voters?action=add&node=x", Kind::kApi, R"({"verb":"voters"})"},
        RouteCase{"JobWithoutId", "/api/job", Kind::kBadRequest},
        RouteCase{"LongId", "/api/job?id=" + std::string(300, 'x'), Kind::kBadRequest},
        RouteCase{"BadLimit", "/api/events?limit=-1", Kind::kBadRequest},
        RouteCase{"ZeroLimit", "/api/events?limit=0", Kind::kBadRequest},
        RouteCase{"HugeLimit", "/api/events?limit=99999999999999999999", Kind::kBadRequest}),
    [](const auto& test_case) { return test_case.param.name; });

TEST(DashboardTest, NothingOutsideTheListedPaths) {
  // No write verb, no node-local file, no other page.
  for (const char* path : {"/api/submit",
                           "/api/cancel",
                           "/api/drain",
                           "/api/undrain",
                           "/api/priority",
                           "/api/suspend",
                           "/api/resume",
                           "/api/log_files",
                           "/api/reload",
                           "/api/progress",
                           "/api/topology",
                           "/api/",
                           "/api",
                           "/api/jobs/",
                           "/../etc/passwd",
                           "/metrics",
                           "/jobs/",
                           "/JOBS",
                           "/favicon.ico",
                           "/index.html",
                           "//",
                           ""}) {
    EXPECT_EQ(route(path, "job=x").kind, Kind::kNotFound) << path;
  }
}

// A rank's log tail: operators only (the daemon checks the token), the rank's last 64 KiB.
TEST(DashboardTest, LogTailsAreAnOperatorsApiPath) {
  const Route r = route("/api/logs", "job=train-3&rank=2&round=5&node=gpu-1");
  ASSERT_EQ(r.kind, Kind::kApi);
  EXPECT_EQ(r.verb, "logs");
  EXPECT_TRUE(r.operator_only);
  EXPECT_EQ(nlohmann::json::parse(r.request),
            nlohmann::json::parse(R"({"verb":"logs","job":"train-3","rank":2,"round":5,)"
                                  R"("node":"gpu-1","max_bytes":65536})"));
  EXPECT_FALSE(route("/api/jobs", "").operator_only);
  for (const char* query : {"", "job=x", "rank=1", "job=x&rank=-1", "job=x&rank=1&round=r",
                            "job=x&rank=99999999999"}) {
    EXPECT_EQ(route("/api/logs", query).kind, Kind::kBadRequest) << query;
  }
  EXPECT_EQ(route("/log", "job=x&rank=0").kind, Kind::kAsset);
}

TEST(DashboardTest, ApiStatusFollowsTheReply) {
  EXPECT_EQ(api_status(R"({"ok":true})"), 200);
  EXPECT_EQ(api_status(R"({"ok":false,"error":"No job \"x\" is known."})"), 200);
  EXPECT_EQ(api_status("not json"), 502);
}

TEST(DashboardTest, PagesLoadOnlyFromThisDaemon) {
  // No CDN, no external font or script: every URL in the shell is relative to the daemon.
  const Route page = route("/", "");
  const std::string html(page.body);
  EXPECT_THAT(html, HasSubstr("/dashboard.js"));
  EXPECT_THAT(html, HasSubstr("/dashboard.css"));
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  const std::string js(route("/dashboard.js", "").body);
  EXPECT_EQ(js.find("http://"), std::string::npos);
  EXPECT_EQ(js.find("https://"), std::string::npos);
  EXPECT_THAT(js, HasSubstr("no training metrics reported"));
}

}  // namespace
}  // namespace elastic::dashboard
