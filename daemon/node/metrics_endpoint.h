// MetricsEndpoint: the daemon's Prometheus scrape endpoint (control.metrics_listen), a minimal
// non-blocking HTTP/1.1 server run inside the node's event loop.
//
// One listening TCP socket plus its connections, multiplexed on one epoll descriptor (as
// control::Server does): the loop polls fd() and calls process(now) when it is readable and at
// next_deadline(). Each connection carries one request and is closed after the response
// (Connection: close, then a lingering close: input is discarded until the client closes, at
// most 2 s, so a response to a request it stopped reading is not lost to a reset), which is all
// Prometheus needs:
//   GET or HEAD /metrics (any query string)   -> 200, Content-Type text/plain; version=0.0.4,
//                                                the body from the render callback (HEAD: none)
//   GET or HEAD of any other path             -> 404
//   any other method                          -> 405 with Allow: GET, HEAD
//   not an HTTP/1.0 or HTTP/1.1 request line  -> 400
//   request head above max_request_bytes      -> 431
//   more than max_headers header lines        -> 431
// Request bodies are never read.
//
// Hostile clients never block or crash the loop: sockets are non-blocking and every read and
// write is bounded; a request must be complete within request_timeout of the accept (so a
// slowloris client trickling bytes is cut off) and a response written within write_timeout;
// at max_connections a new connection replaces the oldest one still reading its request (so
// idle connections cannot lock scrapers out). Such events are counted (stats()) and logged at
// debug level only, so they cannot flood the log.
//
// Errors: open() returns an Error sentence naming the address when it cannot be resolved,
// bound or listened on. Runtime socket errors close the connection concerned.
// Thread safety: none; the node's loop thread owns it. The render callback runs on that thread
// inside process().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "daemon/core/result.h"
#include "daemon/core/time.h"

namespace elastic::node {

struct MetricsEndpointLimits {
  std::size_t max_connections = 32;
  std::size_t max_request_bytes = 8 * 1024;  // request line + headers
  std::size_t max_headers = 64;
  Duration request_timeout = std::chrono::seconds(5);
  Duration write_timeout = std::chrono::seconds(10);
};

struct MetricsEndpointStats {
  std::uint64_t scrapes = 0;       // 200 responses
  std::uint64_t not_found = 0;     // 404
  std::uint64_t bad_requests = 0;  // 400, 405 and 431
  std::uint64_t timeouts = 0;      // connections closed by request/write timeout
  std::uint64_t evicted = 0;       // replaced at max_connections
  std::uint64_t connections_accepted = 0;
};

class MetricsEndpoint {
 public:
  // Returns the exposition text for one scrape.
  using Render = std::function<std::string()>;

  // `listen` is "HOST:PORT" or "[V6]:PORT" (config validation checked the form); port 0 picks a
  // free port (bound_address() tells which).
  static Result<std::unique_ptr<MetricsEndpoint>> open(const std::string& listen, Render render,
                                                       MetricsEndpointLimits limits = {});
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Readable whenever process() has something to do.
  int fd() const { return epoll_fd_; }
  // Accepts, reads, answers and writes whatever is ready without blocking; closes connections
  // past their deadline.
  void process(TimePoint now);
  // The earliest connection deadline (kNever when there is no connection).
  TimePoint next_deadline() const;

  // "HOST:PORT" as bound, with the real port ("[::]:9100" for IPv6).
  const std::string& bound_address() const { return bound_; }
  const MetricsEndpointStats& stats() const { return stats_; }
  std::size_t connection_count() const { return connections_.size(); }

 private:
  struct Connection;
  MetricsEndpoint(Render render, MetricsEndpointLimits limits, int listen_fd, int epoll_fd,
                  std::string bound);
  void accept_all(TimePoint now);
  void on_readable(Connection& connection, TimePoint now);
  void on_writable(Connection& connection, TimePoint now);
  void discard_input(Connection& connection);
  void respond(Connection& connection, TimePoint now);
  void queue_response(Connection& connection, TimePoint now, int code, const char* reason,
                      const std::string& body, bool head, const char* extra_header);
  void close_connection(int fd, const char* why);

  Render render_;
  MetricsEndpointLimits limits_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  std::string bound_;
  std::map<int, std::unique_ptr<Connection>> connections_;
  MetricsEndpointStats stats_;
};

}  // namespace elastic::node
