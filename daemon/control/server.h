// Server: elasticd's end of the local control socket (protocol in daemon/control/protocol.h).
//
// A non-blocking AF_UNIX SOCK_STREAM listener plus its connections, multiplexed on one epoll
// descriptor so the node's event loop polls a single fd() and calls process() when it is
// readable. Each connection's peer credentials (pid, uid, gid) come from SO_PEERCRED at accept
// and are logged and passed to the handler. The socket is mode 0666 on purpose (every user must
// be able to submit); the handler decides per verb from the credentials, never from the JSON:
// users act on their own jobs, root or control.admin_group on anything (credentials.h).
//
// Hostile clients: a frame above kMaxRequestBytes, a request that is not JSON, a connection
// that has not sent a whole request within kRequestTimeout of its accept (or of its previous
// reply), or one beyond kMaxConnectionsPerUid of the same uid or kMaxConnections in all is
// closed with a logged reason; the daemon goes on. The request deadline is not moved by the
// bytes that trickle in, so a client dribbling one byte at a time (slowloris) holds a
// connection for kRequestTimeout at most, and the per-uid cap keeps one user's connections
// from locking out the others.
// A handler that throws is answered with an error reply and counted (stats().handler_errors);
// no exception leaves process().
// Out of descriptors: when accept() fails with EMFILE or ENFILE the server closes a reserved
// descriptor, accepts the waiting connection, answers it with an error and closes it, then
// reserves again; so a full descriptor table neither spins the loop (the level-triggered
// listen socket stays readable otherwise) nor leaves clients hanging. If no descriptor can be
// freed it stops listening for kAcceptBackoff. Failures are counted (stats().accept_errors) and
// logged at most once per kAcceptLogInterval.
//
// Startup: open() creates the socket's parent directory, removes a stale socket file only if no
// one answers on it, and refuses to start (an Error) when another daemon answers there or the
// path exists and is not a socket. The destructor closes everything and removes the socket file
// if it is still ours.
//
// Deferred replies: a handler that cannot answer at once (the request goes to the Raft leader)
// returns std::nullopt and later calls reply() with the handle it was given. Until then that
// connection reads no further frame and has no request deadline (the node bounds how long a
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

#include "daemon/control/credentials.h"
#include "daemon/control/protocol.h"
#include "daemon/core/result.h"
#include "daemon/core/time.h"

namespace elastic::control {

// Names one request awaiting a deferred reply; stale once its connection is gone. Remote
// requests use fd == kRemoteReplyFd.
struct ReplyHandle {
  int fd = -1;
  std::uint64_t serial = 0;
};
inline constexpr int kRemoteReplyFd = -2;

// Requests and connections refused or closed for what the client did (metrics).
struct ServerStats {
  // Refused at accept: kMaxConnections open, or kMaxConnectionsPerUid of the caller's uid.
  std::uint64_t too_many_connections = 0;
  std::uint64_t oversized = 0;        // a frame above kMaxRequestBytes
  std::uint64_t malformed = 0;        // a frame that is not a request (answered, closed)
  std::uint64_t request_timeout = 0;  // no whole request within kRequestTimeout
  std::uint64_t handler_errors = 0;   // the handler threw (answered with an error)
  std::uint64_t accept_errors = 0;    // accept() failed other than EAGAIN (EMFILE, ENFILE, ...)
};

class Server {
 public:
  // Returns the encoded reply (protocol.h encode_*) to a decoded request, or std::nullopt to
  // answer later through reply(handle, ...).
  using Handler = std::function<std::optional<std::string>(const Request&, const PeerCredentials&,
                                                           ReplyHandle)>;

  // Local requests are one small frame written at once: a whole one in 5 s is generous.
  static constexpr std::chrono::seconds kRequestTimeout{5};
  static constexpr std::size_t kMaxConnections = 128;
  // elasticctl opens one connection per call; a user's workers report progress briefly each.
  static constexpr std::size_t kMaxConnectionsPerUid = 16;
  static constexpr std::chrono::seconds kAcceptBackoff{1};
  static constexpr std::chrono::seconds kAcceptLogInterval{10};

  static Result<std::unique_ptr<Server>> open(const std::string& path, Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Readable (POLLIN) whenever process() has something to do.
  int fd() const { return epoll_fd_; }
  // Accepts, reads, answers and writes whatever is ready without blocking; closes connections
  // whose request deadline passed.
  void process(TimePoint now);
  // When the next request deadline passes or listening resumes (kNever if neither).
  TimePoint next_deadline() const;

  // Sends the deferred reply of `handle`; false when its connection has gone away.
  bool reply(ReplyHandle handle, std::string reply);

  // Remote requests (control.remote_listen; the CURVE socket lives in the transport, which
  // authenticated the client key and names its user). Sends a reply frame back to `route`.
  using RemoteSender = std::function<void(const std::string& route, std::string reply)>;
  void set_remote_sender(RemoteSender sender) { remote_sender_ = std::move(sender); }
  // Maps `user` to a uid/gid (an unknown user is answered with an error), decodes `body` like a
  // local frame and hands it to the same handler; the reply goes to `route` at once or later
  // through reply(). At most kMaxRemotePending requests wait at once (more are refused with a
  // reply); one unanswered for kRemoteReplyTimeout gets an error reply.
  void handle_remote(TimePoint now, const std::string& route, const std::string& user,
                     const std::string& body);
  static constexpr std::size_t kMaxRemotePending = 256;
  static constexpr std::chrono::seconds kRemoteReplyTimeout{30};
  // Remote requests refused before the handler: unknown user, not JSON, too many pending.
  std::uint64_t remote_refused() const { return remote_refused_; }
  const ServerStats& stats() const { return stats_; }

  const std::string& path() const { return path_; }
  std::size_t connection_count() const { return connections_.size(); }

 private:
  struct Connection;
  Server(std::string path, Handler handler, int listen_fd, int epoll_fd, ino_t inode);
  void accept_all(TimePoint now);
  void on_accept_failed(TimePoint now, int error);
  bool refuse_beyond_caps(int fd, const PeerCredentials& peer);
  void on_readable(Connection& connection, TimePoint now);
  void on_writable(Connection& connection);
  void handle_frames(Connection& connection);
  // The handler's reply; an error reply (counted) if it threw.
  std::optional<std::string> call_handler(const Request& request, const PeerCredentials& peer,
                                          ReplyHandle handle);
  void update_interest(Connection& connection);
  void close_connection(int fd, const std::string& reason);
  void queue_reply(Connection& connection, std::string reply);

  std::string path_;
  Handler handler_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  ino_t inode_ = 0;      // of the socket file we created, so we never unlink a successor's
  int reserve_fd_ = -1;  // /dev/null, closed to make room for one accept when out of fds
  std::optional<TimePoint> listen_paused_until_;
  TimePoint next_accept_log_{};
  std::uint64_t accept_errors_unlogged_ = 0;
  std::map<int, std::unique_ptr<Connection>> connections_;
  std::uint64_t next_serial_ = 1;
  struct RemotePending {
    std::string route;
    std::string user;
    TimePoint since{};
  };
  void send_remote(const std::string& route, std::string reply);
  RemoteSender remote_sender_;
  std::map<std::uint64_t, RemotePending> remote_pending_;  // by serial
  std::uint64_t remote_refused_ = 0;
  ServerStats stats_;
};

}  // namespace elastic::control
