#include "daemon/node/http_server.h"

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
#include <exception>
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

}  // namespace

struct HttpServer::Connection {
  int fd = -1;
  bool waiting = false;  // a deferred response is awaited from the handler
  bool head = false;     // a HEAD request: the response goes without its body
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

Result<std::unique_ptr<HttpServer>> HttpServer::open(const std::string& listen, Handler handler,
                                                     HttpServerOptions options) {
  std::string host, port;
  if (!split_listen(listen, host, port)) {
    return Error{"The address \"" + listen + "\" for " + options.what + " is not HOST:PORT."};
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
    return Error{"Cannot resolve the address " + listen + " for " + options.what + ": " +
                 ::gai_strerror(resolved) + "."};
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
    return Error{"Cannot listen for " + options.what + " on " + listen + ": " + last_error + "."};
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
    return Error{"Cannot set up epoll for " + options.what + " on " + listen + ": " +
                 errno_text(error) + "."};
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(handler), std::move(options),
                                                    listen_fd, epoll_fd, address_text(bound)));
}

HttpServer::HttpServer(Handler handler, HttpServerOptions options, int listen_fd, int epoll_fd,
                       std::string bound)
    : handler_(std::move(handler)),
      options_(std::move(options)),
      listen_fd_(listen_fd),
      epoll_fd_(epoll_fd),
      bound_(std::move(bound)) {}

HttpServer::~HttpServer() {
  for (auto& [fd, connection] : connections_) ::close(fd);
  connections_.clear();
  ::close(epoll_fd_);
  ::close(listen_fd_);
}

TimePoint HttpServer::next_deadline() const {
  TimePoint earliest = kNever;
  for (const auto& [fd, connection] : connections_) {
    earliest = std::min(earliest, connection->deadline);
  }
  return earliest;
}

void HttpServer::process(TimePoint now) {
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
    Connection& connection = *connections_.at(fd);
    if (connection.waiting) {
      connection.waiting = false;
      queue_response(connection, now,
                     text_response(504, "No answer in time (is there a Raft leader?).\n"));
      continue;
    }
    const bool lingering = connection.lingering;
    if (!lingering) ++stats_.timeouts;
    close_connection(fd, lingering ? nullptr : "timed out");
  }
}

void HttpServer::accept_all(TimePoint now) {
  while (true) {
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        spdlog::debug("{} {}: accept failed: {}", options_.what, bound_, errno_text(errno));
      }
      return;
    }
    ++stats_.connections_accepted;
    if (connections_.size() >= options_.max_connections) {
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
        spdlog::debug("{} {}: refusing a connection: {} responses in flight", options_.what, bound_,
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
      spdlog::debug("{} {}: epoll_ctl failed: {}", options_.what, bound_, errno_text(errno));
      ::close(fd);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connection->peer = address_text(peer);
    connection->serial = stats_.connections_accepted;
    connection->deadline = now + options_.request_timeout;
    connections_.emplace(fd, std::move(connection));
  }
}

void HttpServer::on_readable(Connection& connection, TimePoint now) {
  // Read what is there, but never more than one byte past the limit: that byte is enough to
  // know the request is too large.
  char buffer[4096];
  const std::size_t limit = options_.limits.max_request_bytes;
  HttpParse parse;
  while (connection.in.size() <= limit) {
    const std::size_t room = limit + 1 - connection.in.size();
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
    parse = parse_http_request(connection.in, options_.limits);
    if (parse.state != HttpParse::State::kIncomplete) break;
  }
  if (parse.state == HttpParse::State::kIncomplete) {
    parse = parse_http_request(connection.in, options_.limits);
  }
  switch (parse.state) {
    case HttpParse::State::kIncomplete:
      return;  // wait for the rest (until the request deadline)
    case HttpParse::State::kRefused:
      queue_response(connection, now, parse.refusal);
      return;
    case HttpParse::State::kRequest:
      dispatch(connection, parse.request, now);
      return;
  }
}

void HttpServer::dispatch(Connection& connection, const HttpRequest& request, TimePoint now) {
  connection.head = request.head;
  if (!options_.token.empty() && !bearer_token_matches(request.authorization, options_.token)) {
    queue_response(connection, now,
                   text_response(401, "A bearer token is required (Authorization: Bearer ...).\n",
                                 "WWW-Authenticate: Bearer\r\n"));
    return;
  }
  std::optional<HttpResponse> response;
  try {
    response = handler_(request, connection.serial);
  } catch (const std::exception& e) {
    spdlog::error("{} {}: the handler of {} failed: {}", options_.what, bound_, request.path,
                  e.what());
    response = text_response(500, "The daemon could not serve this request.\n");
  }
  if (response) {
    queue_response(connection, now, *response);
    return;
  }
  // Deferred: read nothing more (interest in nothing but hang-ups) until respond() or the
  // reply timeout.
  connection.responding = true;
  connection.waiting = true;
  connection.in.clear();
  connection.in.shrink_to_fit();
  connection.deadline = now + options_.reply_timeout;
  epoll_event event{};
  event.events = 0;
  event.data.fd = connection.fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, connection.fd, &event);
}

bool HttpServer::respond(std::uint64_t id, const HttpResponse& response, TimePoint now) {
  for (auto& [fd, connection] : connections_) {
    if (connection->serial != id || !connection->waiting) continue;
    connection->waiting = false;
    queue_response(*connection, now, response);
    return true;
  }
  return false;
}

void HttpServer::count(int status) {
  if (status == 200) {
    ++stats_.served;
  } else if (status == 404) {
    ++stats_.not_found;
  } else if (status == 401) {
    ++stats_.unauthorized;
  } else if (status >= 500) {
    ++stats_.failed;
  } else {
    ++stats_.bad_requests;
  }
}

void HttpServer::queue_response(Connection& connection, TimePoint now,
                                const HttpResponse& response) {
  count(response.status);
  connection.out = serialize_http_response(response, connection.head);
  connection.out_offset = 0;
  connection.responding = true;
  connection.in.clear();
  connection.in.shrink_to_fit();
  connection.deadline = now + options_.write_timeout;
  on_writable(connection, now);
}

void HttpServer::on_writable(Connection& connection, TimePoint now) {
  if (!connection.responding) return;
  if (connection.waiting) {  // hung up while its answer is awaited
    close_connection(connection.fd, "closed before its response");
    return;
  }
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

void HttpServer::discard_input(Connection& connection) {
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

void HttpServer::close_connection(int fd, const char* why) {
  const auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (why != nullptr)
    spdlog::debug("{} {}: closing {}: {}", options_.what, bound_, it->second->peer, why);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  connections_.erase(it);
}

}  // namespace elastic::node
