#include "daemon/node/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

namespace elastic::node {

namespace {

std::string errno_text(int error) { return std::strerror(error); }

// A lingering close waits at most this long, and reads at most this much, for the client's end.
constexpr std::chrono::seconds kLinger{2};
constexpr std::size_t kMaxDiscard = 4 * 1024 * 1024;

// "HOST:PORT" / "[V6]:PORT" -> (host, port); "*" and "" hosts mean every address.
bool split_listen(const std::string& listen, std::string& host, std::string& port) {
  if (!listen.empty() && listen.front() == '[') {
    const auto close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return false;
    }
    host = listen.substr(1, close - 1);
    port = listen.substr(close + 2);
  } else {
    const auto colon = listen.rfind(':');
    if (colon == std::string::npos) return false;
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
  }
  return !port.empty();
}

std::string address_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
  ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(in->sin_port));
}

// Where the request head ends (just past the blank line), or npos while it is incomplete.
std::size_t head_end(const std::string& in) {
  const auto crlf = in.find("\r\n\r\n");
  const auto lf = in.find("\n\n");
  if (crlf == std::string::npos && lf == std::string::npos) return std::string::npos;
  if (lf == std::string::npos || (crlf != std::string::npos && crlf < lf)) return crlf + 4;
  return lf + 2;
}

}  // namespace

struct MetricsEndpoint::Connection {
  int fd = -1;
  std::string peer;
  std::string in;
  std::string out;
  std::size_t out_offset = 0;
  bool responding = false;  // a response is queued: read nothing more
  bool lingering = false;   // response written: discard input until the client closes
  std::size_t discarded = 0;
  std::uint64_t serial = 0;  // accept order (times tie within one accept batch)
  TimePoint deadline{};
};

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::open(const std::string& listen,
                                                               Render render,
                                                               MetricsEndpointLimits limits) {
  std::string host, port;
  if (!split_listen(listen, host, port)) {
    return Error{"The metrics address \"" + listen + "\" is not HOST:PORT."};
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const bool wildcard = host.empty() || host == "*";
  const int resolved =
      ::getaddrinfo(wildcard ? nullptr : host.c_str(), port.c_str(), &hints, &found);
  if (resolved != 0 || found == nullptr) {
    return Error{"Cannot resolve the metrics address " + listen + ": " + ::gai_strerror(resolved) +
                 "."};
  }
  int listen_fd = -1;
  std::string last_error = "no address to bind";
  for (addrinfo* a = found; a != nullptr && listen_fd < 0; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = errno_text(errno);
      continue;
    }
    // A restarted daemon must be able to bind again while old connections sit in TIME_WAIT.
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      last_error = errno_text(errno);
      ::close(fd);
      continue;
    }
    listen_fd = fd;
  }
  ::freeaddrinfo(found);
  if (listen_fd < 0) {
    return Error{"Cannot listen for metrics scrapes on " + listen + ": " + last_error + "."};
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &length);

  const int epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = listen_fd;
  if (epoll_fd < 0 || ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &event) != 0) {
    const int error = errno;
    if (epoll_fd >= 0) ::close(epoll_fd);
    ::close(listen_fd);
    return Error{"Cannot set up epoll for the metrics endpoint " + listen + ": " +
                 errno_text(error) + "."};
  }
  return std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(std::move(render), limits, listen_fd, epoll_fd, address_text(bound)));
}

MetricsEndpoint::MetricsEndpoint(Render render, MetricsEndpointLimits limits, int listen_fd,
                                 int epoll_fd, std::string bound)
    : render_(std::move(render)),
      limits_(limits),
      listen_fd_(listen_fd),
      epoll_fd_(epoll_fd),
      bound_(std::move(bound)) {}

MetricsEndpoint::~MetricsEndpoint() {
  for (auto& [fd, connection] : connections_) ::close(fd);
  connections_.clear();
  ::close(epoll_fd_);
  ::close(listen_fd_);
}

TimePoint MetricsEndpoint::next_deadline() const {
  TimePoint earliest = kNever;
  for (const auto& [fd, connection] : connections_) {
    earliest = std::min(earliest, connection->deadline);
  }
  return earliest;
}

void MetricsEndpoint::process(TimePoint now) {
  epoll_event events[64];
  const int ready = ::epoll_wait(epoll_fd_, events, 64, 0);
  for (int i = 0; i < ready; ++i) {
    const int fd = events[i].data.fd;
    if (fd == listen_fd_) {
      accept_all(now);
      continue;
    }
    auto it = connections_.find(fd);
    if (it == connections_.end()) continue;  // closed earlier in this batch
    Connection& connection = *it->second;
    if (connection.lingering) {
      discard_input(connection);
      continue;
    }
    if (!connection.responding && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
      on_readable(connection, now);
      continue;  // a queued response was already tried once
    }
    if (events[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) on_writable(connection, now);
  }
  std::vector<int> expired;
  for (const auto& [fd, connection] : connections_) {
    if (now >= connection->deadline) expired.push_back(fd);
  }
  for (const int fd : expired) {
    const bool lingering = connections_.at(fd)->lingering;
    if (!lingering) ++stats_.timeouts;
    close_connection(fd, lingering ? nullptr : "timed out");
  }
}

void MetricsEndpoint::accept_all(TimePoint now) {
  while (true) {
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        spdlog::debug("metrics {}: accept failed: {}", bound_, errno_text(errno));
      }
      return;
    }
    ++stats_.connections_accepted;
    if (connections_.size() >= limits_.max_connections) {
      // Make room: a connection whose response is out (lingering) goes first; else the oldest
      // one that has not finished its request, which has had the longest to do so, since a
      // scraper arriving now must get through.
      auto victim = connections_.end();
      for (auto it = connections_.begin(); it != connections_.end(); ++it) {
        const Connection& c = *it->second;
        if (c.lingering) {
          victim = it;
          break;
        }
        if (c.responding) continue;
        if (victim == connections_.end() || c.serial < victim->second->serial) victim = it;
      }
      if (victim == connections_.end()) {
        spdlog::debug("metrics {}: refusing a connection: {} responses in flight", bound_,
                      connections_.size());
        ++stats_.evicted;
        ::close(fd);
        continue;
      }
      if (!victim->second->lingering) ++stats_.evicted;
      close_connection(victim->first,
                       victim->second->lingering ? nullptr : "replaced by a newer connection");
    }
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      spdlog::debug("metrics {}: epoll_ctl failed: {}", bound_, errno_text(errno));
      ::close(fd);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connection->peer = address_text(peer);
    connection->serial = stats_.connections_accepted;
    connection->deadline = now + limits_.request_timeout;
    connections_.emplace(fd, std::move(connection));
  }
}

void MetricsEndpoint::on_readable(Connection& connection, TimePoint now) {
  // Read what is there, but never more than one byte past the limit: that byte is enough to
  // know the request is too large.
  char buffer[4096];
  while (connection.in.size() <= limits_.max_request_bytes) {
    const std::size_t room = limits_.max_request_bytes + 1 - connection.in.size();
    const ssize_t n = ::recv(connection.fd, buffer, std::min(room, sizeof(buffer)), MSG_DONTWAIT);
    if (n == 0) {
      close_connection(connection.fd, "closed before a complete request");
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      close_connection(connection.fd, "read failed");
      return;
    }
    connection.in.append(buffer, static_cast<std::size_t>(n));
    if (head_end(connection.in) != std::string::npos) break;
  }
  const std::size_t end = head_end(connection.in);
  const auto lines = static_cast<std::size_t>(std::count(
      connection.in.begin(),
      end == std::string::npos ? connection.in.end() : connection.in.begin() + end, '\n'));
  // Request line + headers + the blank line.
  if (lines > limits_.max_headers + 2) {
    ++stats_.bad_requests;
    queue_response(connection, now, 431, "Request Header Fields Too Large",
                   "Too many header lines.\n", false, nullptr);
    return;
  }
  if (end == std::string::npos) {
    if (connection.in.size() > limits_.max_request_bytes) {
      ++stats_.bad_requests;
      queue_response(
          connection, now, 431, "Request Header Fields Too Large",
          "The request head exceeds " + std::to_string(limits_.max_request_bytes) + " bytes.\n",
          false, nullptr);
    }
    return;  // wait for the rest (until the request deadline)
  }
  respond(connection, now);
}

void MetricsEndpoint::respond(Connection& connection, TimePoint now) {
  std::string_view head(connection.in);
  std::string_view line = head.substr(0, head.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const auto first_space = line.find(' ');
  const auto last_space = line.rfind(' ');
  if (first_space == std::string_view::npos || first_space == last_space) {
    ++stats_.bad_requests;
    queue_response(connection, now, 400, "Bad Request", "Not an HTTP request line.\n", false,
                   nullptr);
    return;
  }
  const std::string_view method = line.substr(0, first_space);
  const std::string_view target = line.substr(first_space + 1, last_space - first_space - 1);
  const std::string_view version = line.substr(last_space + 1);
  if ((version != "HTTP/1.1" && version != "HTTP/1.0") || target.empty() ||
      target.find(' ') != std::string_view::npos) {
    ++stats_.bad_requests;
    queue_response(connection, now, 400, "Bad Request", "Not an HTTP/1.x request line.\n", false,
                   nullptr);
    return;
  }
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    ++stats_.bad_requests;
    queue_response(connection, now, 405, "Method Not Allowed", "Only GET and HEAD are served.\n",
                   false, "Allow: GET, HEAD\r\n");
    return;
  }
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics") {
    ++stats_.not_found;
    queue_response(connection, now, 404, "Not Found", "Metrics are served at /metrics.\n",
                   head_only, nullptr);
    return;
  }
  ++stats_.scrapes;
  queue_response(connection, now, 200, "OK", render_(), head_only, nullptr);
}

void MetricsEndpoint::queue_response(Connection& connection, TimePoint now, int code,
                                     const char* reason, const std::string& body, bool head,
                                     const char* extra_header) {
  const char* type =
      code == 200 ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8";
  connection.out = "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
                   "\r\nContent-Length: " + std::to_string(body.size()) +
                   "\r\nConnection: close\r\n" + (extra_header ? extra_header : "") + "\r\n";
  if (!head) connection.out += body;
  connection.out_offset = 0;
  connection.responding = true;
  connection.in.clear();
  connection.in.shrink_to_fit();
  connection.deadline = now + limits_.write_timeout;
  on_writable(connection, now);
}

void MetricsEndpoint::on_writable(Connection& connection, TimePoint now) {
  if (!connection.responding) return;
  while (connection.out_offset < connection.out.size()) {
    const ssize_t n =
        ::send(connection.fd, connection.out.data() + connection.out_offset,
               connection.out.size() - connection.out_offset, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        epoll_event event{};
        event.events = EPOLLOUT;
        event.data.fd = connection.fd;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, connection.fd, &event);
        return;
      }
      close_connection(connection.fd, "write failed");
      return;
    }
    connection.out_offset += static_cast<std::size_t>(n);
  }
  // All written: FIN after the response. Closing now could reset the connection (the kernel
  // sends RST when unread input remains, say the rest of a request too large) and the client
  // might lose the response, so wait for its close while discarding input (a lingering close).
  ::shutdown(connection.fd, SHUT_WR);
  connection.lingering = true;
  connection.out.clear();
  connection.out.shrink_to_fit();
  connection.deadline = std::min(connection.deadline, now + kLinger);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = connection.fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, connection.fd, &event);
  discard_input(connection);
}

void MetricsEndpoint::discard_input(Connection& connection) {
  char buffer[16 * 1024];
  while (true) {
    const ssize_t n = ::recv(connection.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) break;  // the client closed (or reset): done
    connection.discarded += static_cast<std::size_t>(n);
    if (connection.discarded > kMaxDiscard) break;
  }
  close_connection(connection.fd, nullptr);
}

void MetricsEndpoint::close_connection(int fd, const char* why) {
  const auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (why != nullptr) spdlog::debug("metrics {}: closing {}: {}", bound_, it->second->peer, why);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  connections_.erase(it);
}

}  // namespace elastic::node
