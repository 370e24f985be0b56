// The HTTP/1.x request head as elasticd's read-only HTTP servers (http_server.h: the metrics
// endpoint and the dashboard) read it, and the bearer token check. Pure: no sockets, no clock.
//
// parse_http_request() looks at the bytes a connection has buffered so far and says whether
// they hold a whole request head, a refusal, or not enough yet:
//   incomplete (no blank line yet, within the limits)      -> keep reading
//   more than max_headers header lines                     -> 431
//   no blank line within max_request_bytes                 -> 431
//   request line not METHOD SP TARGET SP HTTP/1.0|HTTP/1.1 -> 400
//   a target that is not origin-form ("/..."), or holds a
//   control byte, a space or a '#'                          -> 400
//   a header line without "name:", a name with a space or a
//   control byte, an obsolete folded line, two
//   Authorization headers                                  -> 400
//   a method other than GET or HEAD                         -> 405 (Allow: GET, HEAD)
// Only GET and HEAD exist here: everything served is read-only, and request bodies are never
// read. The status a request is refused with comes with its reason phrase and a one-line body.
//
// bearer_token_matches() compares the credentials of "Authorization: Bearer <token>" with the
// configured token in time that depends only on the lengths, never on where they differ, so a
// client cannot find the token byte by byte by timing refusals.
//
// Errors: none thrown; hostile bytes give a refusal (fuzzed in tests/fuzz/http_fuzz.cc).
// Thread safety: pure functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace elastic::node {

struct HttpLimits {
  std::size_t max_request_bytes = 8 * 1024;  // request line + headers
  std::size_t max_headers = 64;
};

struct HttpRequest {
  std::string method;         // GET or HEAD
  std::string target;         // as sent: path and query
  std::string path;           // the target up to '?'
  std::string query;          // after '?' ("" when none)
  std::string authorization;  // the Authorization header's value ("" when absent)
  bool head = false;          // HEAD: the response has no body
};

// One response, as a handler makes it; the server adds Content-Length and Connection: close.
struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string extra_headers;  // whole "Name: value\r\n" lines
};

// A response with `body` as plain text (errors, refusals).
HttpResponse text_response(int status, std::string body, std::string extra_headers = "");
// A 200 response of `content_type`.
HttpResponse ok_response(std::string content_type, std::string body,
                         std::string extra_headers = "");

struct HttpParse {
  enum class State : std::uint8_t { kIncomplete, kRequest, kRefused };
  State state = State::kIncomplete;
  HttpRequest request;   // with kRequest
  HttpResponse refusal;  // with kRefused: 400, 405 or 431
};

// Reads the head in `buffered` (the bytes received so far on one connection).
HttpParse parse_http_request(std::string_view buffered, const HttpLimits& limits);

// "OK", "Not Found", ...; "Unknown" for a status this server never sends.
const char* http_reason(int status);

// The bytes of `response` on the wire: status line, Content-Type, Content-Length,
// Connection: close, the extra headers, and the body unless `head`.
std::string serialize_http_response(const HttpResponse& response, bool head);

// True when `authorization` (an Authorization header's value) is "Bearer <token>" for exactly
// `token` (the scheme is case-insensitive, spaces around the credentials are ignored). An empty
// `token` never matches.
bool bearer_token_matches(std::string_view authorization, std::string_view token);

// Percent-decodes one query value into `out` ('+' is a space); false on a broken escape.
bool url_decode(std::string_view in, std::string& out);

// The value of `key` in a query string "a=1&b=2" (decoded), or "" when absent or broken.
std::string query_value(std::string_view query, std::string_view key);

}  // namespace elastic::node
