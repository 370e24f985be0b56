#include "daemon/node/http_request.h"

#include <algorithm>
#include <cctype>

namespace elastic::node {
namespace {

HttpParse refuse(int status, std::string body, std::string extra_headers = "") {
  HttpParse parse;
  parse.state = HttpParse::State::kRefused;
  parse.refusal = text_response(status, std::move(body), std::move(extra_headers));
  return parse;
}

// Where the head ends (just past the blank line), or npos while it is incomplete. A bare LF
// ends lines too (as most servers accept).
std::size_t head_end(std::string_view in) {
  const auto crlf = in.find("\r\n\r\n");
  const auto lf = in.find("\n\n");
  if (crlf == std::string_view::npos && lf == std::string_view::npos) return std::string_view::npos;
  if (lf == std::string_view::npos || (crlf != std::string_view::npos && crlf < lf)) {
    return crlf + 4;
  }
  return lf + 2;
}

bool is_control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

HttpParse parse_http_request(std::string_view buffered, const HttpLimits& limits) {
  const std::size_t end = head_end(buffered);
  const std::string_view head = end == std::string_view::npos ? buffered : buffered.substr(0, end);
  // Request line + headers + the blank line.
  const auto lines = static_cast<std::size_t>(std::count(head.begin(), head.end(), '\n'));
  if (lines > limits.max_headers + 2) return refuse(431, "Too many header lines.\n");
  if (end == std::string_view::npos) {
    if (buffered.size() > limits.max_request_bytes) {
      return refuse(431, "The request head exceeds " + std::to_string(limits.max_request_bytes) +
                             " bytes.\n");
    }
    return {};
  }
  if (end > limits.max_request_bytes) {
    return refuse(
        431, "The request head exceeds " + std::to_string(limits.max_request_bytes) + " bytes.\n");
  }

  // Split into lines (CRLF or LF), dropping the blank line at the end.
  std::string_view rest = head;
  const auto next_line = [&rest]() {
    const auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  };
  const std::string_view line = next_line();
  const auto first_space = line.find(' ');
  const auto last_space = line.rfind(' ');
  if (first_space == std::string_view::npos || first_space == last_space) {
    return refuse(400, "Not an HTTP request line.\n");
  }
  const std::string_view method = line.substr(0, first_space);
  const std::string_view target = line.substr(first_space + 1, last_space - first_space - 1);
  const std::string_view version = line.substr(last_space + 1);
  if ((version != "HTTP/1.1" && version != "HTTP/1.0") || method.empty() ||
      std::any_of(method.begin(), method.end(), [](char c) {
        return !std::isalpha(static_cast<unsigned char>(c)) && c != '-' && c != '_';
      })) {
    return refuse(400, "Not an HTTP/1.x request line.\n");
  }
  if (target.empty() || target.front() != '/' ||
      std::any_of(target.begin(), target.end(),
                  [](char c) { return is_control(c) || c == ' ' || c == '#'; })) {
    return refuse(400, "The request target must be a path (\"/...\").\n");
  }

  HttpRequest request;
  bool has_authorization = false;
  while (!rest.empty()) {
    const std::string_view header = next_line();
    if (header.empty()) break;  // the blank line
    if (header.front() == ' ' || header.front() == '\t') {
      return refuse(400, "Folded header lines are not accepted.\n");
    }
    const auto colon = header.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return refuse(400, "A header line has no \"name:\".\n");
    }
    const std::string_view name = header.substr(0, colon);
    if (std::any_of(name.begin(), name.end(),
                    [](char c) { return is_control(c) || c == ' ' || c == '\t'; })) {
      return refuse(400, "A header name holds a space or a control byte.\n");
    }
    const std::string_view value = trim(header.substr(colon + 1));
    if (std::any_of(value.begin(), value.end(),
                    [](char c) { return c != '\t' && is_control(c); })) {
      return refuse(400, "A header value holds a control byte.\n");
    }
    if (iequals(name, "Authorization")) {
      if (has_authorization) return refuse(400, "Two Authorization headers.\n");
      has_authorization = true;
      request.authorization = std::string(value);
    }
  }
  if (method != "GET" && method != "HEAD") {
    return refuse(405, "Only GET and HEAD are served.\n", "Allow: GET, HEAD\r\n");
  }
  request.method = std::string(method);
  request.head = method == "HEAD";
  request.target = std::string(target);
  const auto question = target.find('?');
  request.path = std::string(target.substr(0, question));
  if (question != std::string_view::npos) request.query = std::string(target.substr(question + 1));
  HttpParse parse;
  parse.state = HttpParse::State::kRequest;
  parse.request = std::move(request);
  return parse;
}

HttpResponse text_response(int status, std::string body, std::string extra_headers) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  response.extra_headers = std::move(extra_headers);
  return response;
}

HttpResponse ok_response(std::string content_type, std::string body, std::string extra_headers) {
  HttpResponse response;
  response.content_type = std::move(content_type);
  response.body = std::move(body);
  response.extra_headers = std::move(extra_headers);
  return response;
}

const char* http_reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

std::string serialize_http_response(const HttpResponse& response, bool head) {
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " +
                    http_reason(response.status) + "\r\nContent-Type: " + response.content_type +
                    "\r\nContent-Length: " + std::to_string(response.body.size()) +
                    "\r\nConnection: close\r\n" + response.extra_headers + "\r\n";
  if (!head) out += response.body;
  return out;
}

bool bearer_token_matches(std::string_view authorization, std::string_view token) {
  if (token.empty()) return false;
  authorization = trim(authorization);
  constexpr std::string_view kScheme = "Bearer";
  if (authorization.size() <= kScheme.size() ||
      !iequals(authorization.substr(0, kScheme.size()), kScheme) ||
      (authorization[kScheme.size()] != ' ' && authorization[kScheme.size()] != '\t')) {
    return false;
  }
  const std::string_view given = trim(authorization.substr(kScheme.size()));
  // Every byte of both is looked at whatever differs, and no branch depends on the contents.
  unsigned difference = given.size() == token.size() ? 0U : 1U;
  const std::size_t n = std::max(given.size(), token.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto a = static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    const auto b = static_cast<unsigned char>(i < token.size() ? token[i] : 0);
    difference |= static_cast<unsigned>(a ^ b);
  }
  return difference == 0;
}

bool url_decode(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int high = hex_digit(in[i + 1]);
      const int low = hex_digit(in[i + 2]);
      if (high < 0 || low < 0) return false;
      out += static_cast<char>(high * 16 + low);
      i += 2;
    } else {
      out += c;
    }
  }
  return true;
}

std::string query_value(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto equals = pair.find('=');
    if (pair.substr(0, equals) != key) continue;
    std::string value;
    if (equals == std::string_view::npos) return "";
    if (!url_decode(pair.substr(equals + 1), value)) return "";
    return value;
  }
  return "";
}

}  // namespace elastic::node
