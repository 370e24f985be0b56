// A minimal HTTP/1.1 client for tests of the daemon's HTTP servers (the metrics endpoint and
// the dashboard, daemon/node/http_server.h): one request per connection to 127.0.0.1, read
// until the server closes. Also the address a server's line in the daemon's readiness line
// names. Header-only; every socket wait is bounded (connect_loopback's timeouts).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <string>

#include "tests/support/sockets.h"

namespace elastic::testing {

// Sends `request` (as far as the server reads it) and returns everything the server answered
// before it closed the connection ("" when nothing listens).
inline std::string http_exchange(int port, const std::string& request) {
  const int fd = connect_loopback(port);
  if (fd < 0) return "";
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered early and closed (a request too large)
    sent += static_cast<std::size_t>(n);
  }
  std::string response;
  char buffer[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return response;
}

struct HttpReply {
  int code = 0;  // 0: no HTTP/1.1 response
  std::string head;
  std::string body;
};

// `method path` with a Host header and `extra_headers` (whole "Name: value\r\n" lines).
inline HttpReply http_get(int port, const std::string& path, const std::string& method = "GET",
                          const std::string& extra_headers = "") {
  const std::string raw = http_exchange(
      port, method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n" +
                extra_headers + "\r\n");
  HttpReply r;
  const auto end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
  r.code = std::stoi(raw.substr(9, 3));
  r.head = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  return r;
}

// The "<key>=HOST:PORT" of the "elasticd ready: ..." line in `log` ("" when it has none).
inline std::string ready_line_address(const std::string& log, const std::string& key) {
  std::smatch match;
  const std::regex ready("elasticd ready: [^\n]* " + key + "=(\\S+)");
  return std::regex_search(log, match, ready) ? match[1].str() : "";
}

// A TCP port of 127.0.0.1 held listening while this lives, so that a daemon told to bind it
// fails (port() is 0 when it could not be made).
class HeldLoopbackPort {
 public:
  HeldLoopbackPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        ::listen(fd_, 1) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      port_ = ntohs(address.sin_port);
    }
  }
  ~HeldLoopbackPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  HeldLoopbackPort(const HeldLoopbackPort&) = delete;
  HeldLoopbackPort& operator=(const HeldLoopbackPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The port of "HOST:PORT" or "[V6]:PORT".
inline int port_of(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

}  // namespace elastic::testing
