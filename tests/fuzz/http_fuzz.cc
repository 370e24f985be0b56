// libFuzzer target for what the daemon's HTTP servers read from the network
// (daemon/node/http_request.h: the request head parser, the bearer token check, query decoding)
// and the dashboard's routing of what they parsed (daemon/dashboard/dashboard.h). Hostile bytes
// must never crash, throw, hang or allocate without bound. Properties: a parsed request is GET
// or HEAD with an origin-form path and fits the limits; feeding the same bytes in two pieces
// gives the same answer (the server parses what has arrived so far, again and again); a route
// to the API always builds a JSON request naming a read-only verb. Built with clang++
// -fsanitize=fuzzer,address,undefined by tests/fuzz/CMakeLists.txt.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "daemon/dashboard/dashboard.h"
#include "daemon/node/http_request.h"

namespace {

using namespace elastic;

[[noreturn]] void property_failed(const char* what) {
  std::fprintf(stderr, "property failed: %s\n", what);
  std::abort();
}

void check_parse(std::string_view bytes) {
  node::HttpLimits limits;
  limits.max_request_bytes = 1024;
  limits.max_headers = 16;
  const node::HttpParse parse = node::parse_http_request(bytes, limits);
  using State = node::HttpParse::State;
  if (parse.state == State::kRefused) {
    const int s = parse.refusal.status;
    if (s != 400 && s != 405 && s != 431) property_failed("a refusal other than 400/405/431");
    return;
  }
  if (parse.state == State::kIncomplete) {
    if (bytes.size() > limits.max_request_bytes) property_failed("incomplete beyond the limit");
    return;
  }
  const node::HttpRequest& r = parse.request;
  if (r.method != "GET" && r.method != "HEAD") property_failed("a method other than GET/HEAD");
  if (r.path.empty() || r.path.front() != '/') property_failed("a path not starting with /");
  if (r.target.size() > limits.max_request_bytes) property_failed("a target beyond the limit");
  // Whatever arrived first, the whole head parses the same once it is all there.
  for (std::size_t cut : {std::size_t{1}, bytes.size() / 2}) {
    if (cut >= bytes.size()) continue;
    const node::HttpParse first = node::parse_http_request(bytes.substr(0, cut), limits);
    if (first.state == State::kRequest && first.request.target != r.target) {
      property_failed("a prefix parsed to another request");
    }
  }
  (void)node::bearer_token_matches(r.authorization, "s3cret-token");
  const dashboard::Route route = dashboard::route(r.path, r.query);
  if (route.kind == dashboard::Route::Kind::kApi) {
    const auto request = nlohmann::json::parse(route.request, nullptr, false);
    if (!request.is_object() || request.value("verb", "") != route.verb) {
      property_failed("an API route whose request does not name its verb");
    }
    if (route.verb != "status" && route.verb != "nodes" && route.verb != "jobs" &&
        route.verb != "job" && route.verb != "events" && route.verb != "drained" &&
        route.verb != "voters") {
      property_failed("an API route to a verb that is not read-only");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  // 0-1: a request head; 2: a token check; 3: query decoding and an API route.
  switch (data[0] % 4) {
    case 0:
    case 1:
      check_parse(text);
      break;
    case 2:
      (void)node::bearer_token_matches(text, "s3cret-token");
      (void)node::bearer_token_matches("Bearer s3cret-token", text);
      break;
    case 3: {
      std::string decoded;
      (void)node::url_decode(text, decoded);
      (void)node::query_value(text, "id");
      (void)dashboard::route("/api/events", text);
      (void)dashboard::route("/api/job", text);
      break;
    }
  }
  return 0;
}
