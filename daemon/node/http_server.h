// HttpServer: elasticd's read-only HTTP/1.1 server, run inside the node's event loop. Two
// serve through it: the Prometheus endpoint (control.metrics_listen, GET /metrics) and the web
// dashboard (dashboard.listen, daemon/dashboard/dashboard.h). What a request gets is the
// handler's to decide; parsing and refusals are http_request.h's.
//
// One listening TCP socket plus its connections, multiplexed on one epoll descriptor (as
// control::Server does): the loop polls fd() and calls process(now) when it is readable and at
// next_deadline(). Each connection carries one request and is closed after the response
// (Connection: close, then a lingering close: input is discarded until the client closes, at
// most 2 s, so a response to a request it stopped reading is not lost to a reset):
//   a request http_request.h refuses (400, 405, 431)  -> that refusal
//   with a token set, no "Authorization: Bearer <token>"
//   for exactly that token                             -> 401 with WWW-Authenticate: Bearer
//                                                         (checked before anything is routed)
//   otherwise                                          -> the handler's response, now or later
// A handler answers at once (returns the response) or later (returns nullopt and calls
// respond() with the request id it was given, from the same thread); a deferred request not
// answered within reply_timeout gets 504. HEAD gets the GET response without its body.
// Request bodies are never read.
//
// Hostile clients never block or crash the loop: sockets are non-blocking and every read and
// write is bounded; a request must be complete within request_timeout of the accept (so a
// slowloris client trickling bytes is cut off) and a response written within write_timeout;
// at max_connections a new connection replaces the oldest one still reading its request (so
// idle connections cannot lock scrapers out). Such events are counted (stats()) and logged at
// debug level only, so they cannot flood the log.
//
// Errors: open() returns an Error sentence naming the address and what listens there when it
// cannot be resolved, bound or listened on (the caller adds the config key). Runtime socket
// errors close the connection concerned. A handler that throws is answered with 500 (counted).
// Thread safety: none; the node's loop thread owns it. The handler runs on that thread inside
// process().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/node/http_request.h"

namespace elastic::node {

struct HttpServerOptions {
  // Names the server in errors and logs: "metrics scrapes", "the dashboard".
  std::string what = "HTTP";
  HttpLimits limits;
  std::size_t max_connections = 32;
  Duration request_timeout = std::chrono::seconds(5);
  Duration write_timeout = std::chrono::seconds(10);
  // A deferred response (the data comes from the Raft leader) within this, else 504.
  Duration reply_timeout = std::chrono::seconds(15);
  // "" = no authentication; else every request needs "Authorization: Bearer <token>".
  std::string token;
};

struct HttpServerStats {
  std::uint64_t served = 0;        // 200 responses
  std::uint64_t not_found = 0;     // 404
  std::uint64_t bad_requests = 0;  // 400, 405 and 431
  std::uint64_t unauthorized = 0;  // 401
  std::uint64_t failed = 0;        // 5xx: the handler threw, or a deferred reply timed out
  std::uint64_t timeouts = 0;      // connections closed by request/write timeout
  std::uint64_t evicted = 0;       // replaced at max_connections
  std::uint64_t connections_accepted = 0;
};

class HttpServer {
 public:
  // The response to `request`, or nullopt to answer later through respond(`id`, ...).
  using Handler =
      std::function<std::optional<HttpResponse>(const HttpRequest& request, std::uint64_t id)>;

  // `listen` is "HOST:PORT" or "[V6]:PORT" (config validation checked the form); port 0 picks a
  // free port (bound_address() tells which).
  static Result<std::unique_ptr<HttpServer>> open(const std::string& listen, Handler handler,
                                                  HttpServerOptions options = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Readable whenever process() has something to do.
  int fd() const { return epoll_fd_; }
  // Accepts, reads, answers and writes whatever is ready without blocking; closes connections
  // past their deadline.
  void process(TimePoint now);
  // The earliest connection deadline (kNever when there is no connection).
  TimePoint next_deadline() const;
  // Answers the deferred request `id`; false when its connection has gone (timed out, closed).
  bool respond(std::uint64_t id, const HttpResponse& response, TimePoint now);

  // "HOST:PORT" as bound, with the real port ("[::]:9100" for IPv6).
  const std::string& bound_address() const { return bound_; }
  const HttpServerStats& stats() const { return stats_; }
  std::size_t connection_count() const { return connections_.size(); }

 private:
  struct Connection;
  HttpServer(Handler handler, HttpServerOptions options, int listen_fd, int epoll_fd,
             std::string bound);
  void accept_all(TimePoint now);
  void on_readable(Connection& connection, TimePoint now);
  void on_writable(Connection& connection, TimePoint now);
  void discard_input(Connection& connection);
  void dispatch(Connection& connection, const HttpRequest& request, TimePoint now);
  void queue_response(Connection& connection, TimePoint now, const HttpResponse& response);
  void count(int status);
  void close_connection(int fd, const char* why);

  Handler handler_;
  HttpServerOptions options_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  std::string bound_;
  std::map<int, std::unique_ptr<Connection>> connections_;
  HttpServerStats stats_;
};

}  // namespace elastic::node
