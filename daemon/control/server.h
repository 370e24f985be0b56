// Server: elasticd's end of the local control socket (protocol in daemon/control/protocol.h).
//
// A non-blocking AF_UNIX SOCK_STREAM listener plus its connections, multiplexed on one epoll
// descriptor so the node's event loop polls a single fd() and calls process() when it is
// readable. Each connection's peer credentials (pid, uid, gid) come from SO_PEERCRED at accept
// and are logged and passed to the handler. Every verb today is read-only, so any local user may
// call them (the socket is mode 0666); admin verbs (submit, drain, ...) will check uid 0 or
// membership of control.admin_group in the handler.
//
// Hostile clients: a frame above kMaxRequestBytes, a request that is not JSON, a connection
// silent for kIdleTimeout or more than kMaxConnections at once are closed with a logged reason;
// the daemon goes on.
//
// Startup: open() creates the socket's parent directory, removes a stale socket file only if no
// one answers on it, and refuses to start (an Error) when another daemon answers there or the
// path exists and is not a socket. The destructor closes everything and removes the socket file
// if it is still ours.
//
// Deferred replies: a handler that cannot answer at once (the request goes to the Raft leader)
// returns std::nullopt and later calls reply() with the handle it was given. Until then that
// connection reads no further frame and is not closed for idleness (the node bounds how long a
// request may take); a client that hangs up first simply loses the reply.
//
// Thread safety: none; the node's loop thread owns it. The handler runs on that thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "daemon/control/protocol.h"
#include "daemon/core/result.h"
#include "daemon/core/time.h"

namespace elastic::control {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Names one request awaiting a deferred reply; stale once its connection is gone.
struct ReplyHandle {
  int fd = -1;
  std::uint64_t serial = 0;
};

class Server {
 public:
  // Returns the encoded reply (protocol.h encode_*) to a decoded request, or std::nullopt to
  // answer later through reply(handle, ...).
  using Handler = std::function<std::optional<std::string>(const Request&, const PeerCredentials&,
                                                           ReplyHandle)>;

  static constexpr std::size_t kMaxConnections = 64;
  static constexpr std::chrono::seconds kIdleTimeout{10};

  static Result<std::unique_ptr<Server>> open(const std::string& path, Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Readable (POLLIN) whenever process() has something to do.
  int fd() const { return epoll_fd_; }
  // Accepts, reads, answers and writes whatever is ready without blocking; closes connections
  // idle since before now - kIdleTimeout.
  void process(TimePoint now);
  // When the next idle connection times out (kNever if none).
  TimePoint next_deadline() const;

  // Sends the deferred reply of `handle`; false when its connection has gone away.
  bool reply(ReplyHandle handle, std::string reply);

  const std::string& path() const { return path_; }
  std::size_t connection_count() const { return connections_.size(); }

 private:
  struct Connection;
  Server(std::string path, Handler handler, int listen_fd, int epoll_fd, ino_t inode);
  void accept_all(TimePoint now);
  void on_readable(Connection& connection, TimePoint now);
  void on_writable(Connection& connection);
  void handle_frames(Connection& connection);
  void update_interest(Connection& connection);
  void close_connection(int fd, const std::string& reason);
  void queue_reply(Connection& connection, std::string reply);

  std::string path_;
  Handler handler_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  ino_t inode_ = 0;  // of the socket file we created, so we never unlink a successor's
  std::map<int, std::unique_ptr<Connection>> connections_;
  std::uint64_t next_serial_ = 1;
};

}  // namespace elastic::control
