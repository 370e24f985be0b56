#include "daemon/control/server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace elastic::control {

namespace {

std::string errno_text(int error) { return std::strerror(error); }

Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return Error{"The control socket path \"" + path + "\" must be 1 to " +
                 std::to_string(sizeof(address.sun_path) - 1) + " bytes long."};
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// True when a process accepts connections on the socket at `address`.
bool someone_answers(const sockaddr_un& address) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool answered =
      ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return answered;
}

}  // namespace

struct Server::Connection {
  int fd = -1;
  PeerCredentials peer;
  std::string in;
  std::string out;
  std::size_t out_offset = 0;
  bool close_after_write = false;
  std::uint64_t awaiting = 0;  // serial of the request whose deferred reply is due; 0 = none
  // When the wait for the next whole request began (accept, or the previous reply); unset while
  // a deferred reply is due, and after a reply until process() next sees the time.
  std::optional<TimePoint> request_since;
  std::uint32_t interest = 0;
};

Result<std::unique_ptr<Server>> Server::open(const std::string& path, Handler handler) {
  auto address = unix_address(path);
  if (!address.ok()) return address.error();

  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code error;
    std::filesystem::create_directories(parent, error);
    if (error) {
      return Error{"Cannot create the control socket's directory " + parent.string() + ": " +
                   error.message() + "."};
    }
  }

  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      return Error{"The control socket path " + path +
                   " exists and is not a socket; refusing to remove it."};
    }
    if (someone_answers(*address)) {
      return Error{"Another daemon answers on the control socket " + path +
                   "; refusing to start a second one there."};
    }
    // A socket file nobody listens on is left over from a daemon that died: safe to replace.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Error{"Cannot remove the stale control socket " + path + ": " + errno_text(errno) +
                   "."};
    }
    spdlog::info("removed stale control socket {}", path);
  }

  const int listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) return Error{"Cannot create a unix socket: " + errno_text(errno) + "."};
  if (::bind(listen_fd, reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0) {
    const int error = errno;
    ::close(listen_fd);
    return Error{"Cannot bind the control socket " + path + ": " + errno_text(error) + "."};
  }
  // Every user may connect (to submit and follow their jobs); verbs check the peer's
  // credentials themselves.
  ::chmod(path.c_str(), 0666);
  struct stat created {};
  ::lstat(path.c_str(), &created);
  if (::listen(listen_fd, 64) != 0) {
    const int error = errno;
    ::close(listen_fd);
    ::unlink(path.c_str());
    return Error{"Cannot listen on the control socket " + path + ": " + errno_text(error) + "."};
  }
  const int epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = listen_fd;
  if (epoll_fd < 0 || ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &event) != 0) {
    const int error = errno;
    if (epoll_fd >= 0) ::close(epoll_fd);
    ::close(listen_fd);
    ::unlink(path.c_str());
    return Error{"Cannot set up epoll for the control socket: " + errno_text(error) + "."};
  }
  return std::unique_ptr<Server>(
      new Server(path, std::move(handler), listen_fd, epoll_fd, created.st_ino));
}

Server::Server(std::string path, Handler handler, int listen_fd, int epoll_fd, ino_t inode)
    : path_(std::move(path)),
      handler_(std::move(handler)),
      listen_fd_(listen_fd),
      epoll_fd_(epoll_fd),
      inode_(inode) {
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

Server::~Server() {
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
  for (auto& [fd, connection] : connections_) ::close(fd);
  connections_.clear();
  ::close(epoll_fd_);
  ::close(listen_fd_);
  // Only remove the file if it is still the socket we bound (not a successor daemon's).
  struct stat current {};
  if (::lstat(path_.c_str(), &current) == 0 && current.st_ino == inode_) ::unlink(path_.c_str());
}

TimePoint Server::next_deadline() const {
  TimePoint earliest = listen_paused_until_.value_or(kNever);
  for (const auto& [fd, connection] : connections_) {
    if (connection->awaiting != 0 || !connection->request_since) continue;
    earliest = std::min(earliest, *connection->request_since + kRequestTimeout);
  }
  return earliest;
}

void Server::process(TimePoint now) {
  if (listen_paused_until_ && now >= *listen_paused_until_) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = listen_fd_;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &event) == 0) {
      listen_paused_until_.reset();
    } else {
      listen_paused_until_ = now + kAcceptBackoff;
    }
  }
  epoll_event events[32];
  const int ready = ::epoll_wait(epoll_fd_, events, 32, 0);
  for (int i = 0; i < ready; ++i) {
    const int fd = events[i].data.fd;
    if (fd == listen_fd_) {
      accept_all(now);
      continue;
    }
    auto it = connections_.find(fd);
    if (it == connections_.end()) continue;  // closed earlier in this batch
    Connection& connection = *it->second;
    if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
      on_readable(connection, now);
      if (!connections_.contains(fd)) continue;
    }
    if (events[i].events & EPOLLOUT) on_writable(connection);
  }
  for (auto it = remote_pending_.begin(); it != remote_pending_.end();) {
    if (now - it->second.since < kRemoteReplyTimeout) {
      ++it;
      continue;
    }
    spdlog::warn("control: remote request of user {} unanswered for {} s", it->second.user,
                 kRemoteReplyTimeout.count());
    send_remote(it->second.route, encode_error_reply("The daemon did not answer in time."));
    it = remote_pending_.erase(it);
  }
  std::vector<int> late;
  for (const auto& [fd, connection] : connections_) {
    if (connection->awaiting != 0) continue;
    if (!connection->request_since) connection->request_since = now;
    if (now >= *connection->request_since + kRequestTimeout) late.push_back(fd);
  }
  for (const int fd : late) {
    ++stats_.request_timeout;
    close_connection(fd,
                     "no whole request within " + std::to_string(kRequestTimeout.count()) + " s");
  }
}

void Server::accept_all(TimePoint now) {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == EAGAIN || error == EWOULDBLOCK) return;
      if (error == EINTR || error == ECONNABORTED) continue;
      on_accept_failed(now, error);
      // Out of descriptors with none to free: listening again at once would only spin.
      if (listen_paused_until_) return;
      continue;  // the waiting connection was shed: see whether more wait
    }
    ucred credentials{};
    socklen_t length = sizeof(credentials);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
      spdlog::warn("control socket {}: cannot read the peer's credentials ({}); closing", path_,
                   errno_text(errno));
      ::close(fd);
      continue;
    }
    const PeerCredentials peer{credentials.pid, credentials.uid, credentials.gid, {}};
    if (refuse_beyond_caps(fd, peer)) continue;
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connection->peer = peer;
    connection->request_since = now;
    connection->interest = EPOLLIN;
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      spdlog::warn("control: epoll_ctl failed for a new connection: {}", errno_text(errno));
      ::close(fd);
      continue;
    }
    spdlog::debug("control: connection from pid {} uid {} gid {}", peer.pid, peer.uid, peer.gid);
    connections_.emplace(fd, std::move(connection));
  }
}

bool Server::refuse_beyond_caps(int fd, const PeerCredentials& peer) {
  std::size_t of_uid = 0;
  for (const auto& [open_fd, connection] : connections_) {
    if (connection->peer.uid == peer.uid) ++of_uid;
  }
  std::string why;
  if (of_uid >= kMaxConnectionsPerUid) {
    why = "uid " + std::to_string(peer.uid) + " has " + std::to_string(of_uid) +
          " connections open, the most one user may";
  } else if (connections_.size() >= kMaxConnections) {
    why = std::to_string(connections_.size()) + " connections open";
  } else {
    return false;
  }
  // Logged at debug only: a client that reconnects in a loop must not flood the log.
  spdlog::debug("control: refusing connection from pid {} uid {} gid {}: {}", peer.pid, peer.uid,
                peer.gid, why);
  ++stats_.too_many_connections;
  const std::string reply = encode_error_reply("The daemon refused the connection: " + why + ".");
  const std::string frame = frame_header(static_cast<std::uint32_t>(reply.size())) + reply;
  (void)::send(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::close(fd);
  return true;
}

void Server::on_accept_failed(TimePoint now, int error) {
  ++stats_.accept_errors;
  ++accept_errors_unlogged_;
  if (now >= next_accept_log_) {
    spdlog::warn("control socket {}: accept failed {} time(s) in the last {} s: {}", path_,
                 accept_errors_unlogged_, kAcceptLogInterval.count(), errno_text(error));
    accept_errors_unlogged_ = 0;
    next_accept_log_ = now + kAcceptLogInterval;
  }
  if ((error == EMFILE || error == ENFILE) && reserve_fd_ >= 0) {
    // Free one descriptor to take the waiting connection off the queue and tell it why;
    // otherwise it stays queued and the listen socket readable, and the loop spins.
    ::close(reserve_fd_);
    reserve_fd_ = -1;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      const std::string reply =
          encode_error_reply("The daemon is out of file descriptors; try again later.");
      const std::string frame = frame_header(static_cast<std::uint32_t>(reply.size())) + reply;
      (void)::send(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      ::close(fd);
    }
    reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && reserve_fd_ >= 0) return;
  }
  // Nothing could be freed (or another error): stop listening for a while. Clients wait in the
  // kernel's backlog meanwhile, or are refused once it is full.
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
  listen_paused_until_ = now + kAcceptBackoff;
}

void Server::on_readable(Connection& connection, TimePoint now) {
  char buffer[16 * 1024];
  const ssize_t n = ::recv(connection.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
  if (n == 0) {
    close_connection(connection.fd, "");  // the client hung up: normal
    return;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    close_connection(connection.fd, "read failed: " + errno_text(errno));
    return;
  }
  (void)now;  // the request deadline does not move with the bytes that arrive
  if (connection.close_after_write) return;  // ignore anything after a fatal request
  connection.in.append(buffer, static_cast<std::size_t>(n));
  handle_frames(connection);
}

void Server::handle_frames(Connection& connection) {
  const int fd = connection.fd;
  while (connection.awaiting == 0 && connection.in.size() >= 4) {
    const std::uint32_t length =
        read_frame_header(reinterpret_cast<const unsigned char*>(connection.in.data()));
    if (length > kMaxRequestBytes) {
      ++stats_.oversized;
      close_connection(fd, "a request frame of " + std::to_string(length) +
                               " bytes exceeds the limit of " + std::to_string(kMaxRequestBytes));
      return;
    }
    if (connection.in.size() < 4 + std::size_t{length}) return;  // wait for the rest
    const std::string body = connection.in.substr(4, length);
    connection.in.erase(0, 4 + std::size_t{length});
    auto request = decode_request(body);
    if (!request.ok()) {
      // Answer, so a confused client learns why, then close: the stream may be out of step.
      spdlog::warn("control: closing connection from pid {} uid {}: {}", connection.peer.pid,
                   connection.peer.uid, request.error().message);
      ++stats_.malformed;
      connection.close_after_write = true;
      connection.in.clear();
      queue_reply(connection, encode_error_reply(request.error().message));
      break;
    }
    spdlog::debug("control: \"{}\" from pid {} uid {} gid {}", request->verb, connection.peer.pid,
                  connection.peer.uid, connection.peer.gid);
    const std::uint64_t serial = next_serial_++;
    connection.awaiting = serial;
    connection.request_since.reset();
    std::optional<std::string> reply =
        call_handler(*request, connection.peer, ReplyHandle{.fd = fd, .serial = serial});
    if (!reply) return;  // deferred: reply() resumes this connection
    connection.awaiting = 0;
    queue_reply(connection, std::move(*reply));
    if (connection.close_after_write) break;
  }
  on_writable(connection);
}

std::optional<std::string> Server::call_handler(const Request& request, const PeerCredentials& peer,
                                                ReplyHandle handle) {
  // The last line of defence: a request that makes a handler throw gets an error reply, and the
  // daemon goes on (uncaught, the exception would stop it, and with it every job it runs).
  try {
    return handler_(request, peer, handle);
  } catch (const std::exception& e) {
    ++stats_.handler_errors;
    spdlog::error("control: the \"{}\" request of pid {} uid {} failed: {}", request.verb, peer.pid,
                  peer.uid, e.what());
    return encode_error_reply("The daemon could not serve this \"" + request.verb +
                              "\" request (an internal error, logged).");
  }
}

void Server::queue_reply(Connection& connection, std::string reply) {
  if (reply.size() > kMaxReplyBytes) {
    reply = encode_error_reply("The reply is larger than the protocol's limit.");
  }
  connection.out += frame_header(static_cast<std::uint32_t>(reply.size()));
  connection.out += reply;
}

bool Server::reply(ReplyHandle handle, std::string reply) {
  if (handle.fd == kRemoteReplyFd) {
    const auto pending = remote_pending_.find(handle.serial);
    if (pending == remote_pending_.end()) return false;
    send_remote(pending->second.route, std::move(reply));
    remote_pending_.erase(pending);
    return true;
  }
  const auto it = connections_.find(handle.fd);
  if (it == connections_.end() || it->second->awaiting != handle.serial || handle.serial == 0) {
    return false;
  }
  Connection& connection = *it->second;
  connection.awaiting = 0;
  queue_reply(connection, std::move(reply));
  // Frames that arrived meanwhile are answered now (this also flushes the reply).
  handle_frames(connection);
  return true;
}

void Server::on_writable(Connection& connection) {
  const int fd = connection.fd;
  while (connection.out_offset < connection.out.size()) {
    const ssize_t n =
        ::send(fd, connection.out.data() + connection.out_offset,
               connection.out.size() - connection.out_offset, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      close_connection(fd, "write failed: " + errno_text(errno));
      return;
    }
    connection.out_offset += static_cast<std::size_t>(n);
  }
  if (connection.out_offset == connection.out.size()) {
    connection.out.clear();
    connection.out_offset = 0;
    if (connection.close_after_write) {
      close_connection(fd, "");  // reason already logged
      return;
    }
  }
  update_interest(connection);
}

void Server::update_interest(Connection& connection) {
  const std::uint32_t wanted = connection.out.empty() ? EPOLLIN : (EPOLLIN | EPOLLOUT);
  if (wanted == connection.interest) return;
  epoll_event event{};
  event.events = wanted;
  event.data.fd = connection.fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, connection.fd, &event) != 0) {
    close_connection(connection.fd, "epoll_ctl failed: " + errno_text(errno));
    return;
  }
  connection.interest = wanted;
}

void Server::close_connection(int fd, const std::string& reason) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (!reason.empty()) {
    spdlog::warn("control: closing connection from pid {} uid {}: {}", it->second->peer.pid,
                 it->second->peer.uid, reason);
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  connections_.erase(it);
}

}  // namespace elastic::control

namespace elastic::control {

void Server::send_remote(const std::string& route, std::string reply) {
  if (reply.size() > kMaxReplyBytes) {
    reply = encode_error_reply("The reply is larger than the protocol's limit.");
  }
  if (remote_sender_) remote_sender_(route, std::move(reply));
}

void Server::handle_remote(TimePoint now, const std::string& route, const std::string& user,
                           const std::string& body) {
  auto refuse = [&](const std::string& why) {
    ++remote_refused_;
    spdlog::warn("control: refusing a remote request of user \"{}\": {}", user, why);
    send_remote(route, encode_error_reply(why));
  };
  Result<PeerCredentials> peer = user_credentials(user);
  if (!peer.ok()) return refuse(peer.error().message);
  if (body.size() > kMaxRequestBytes) {
    return refuse("The request of " + std::to_string(body.size()) + " bytes exceeds the limit of " +
                  std::to_string(kMaxRequestBytes) + ".");
  }
  Result<Request> request = decode_request(body);
  if (!request.ok()) return refuse(request.error().message);
  if (remote_pending_.size() >= kMaxRemotePending) {
    return refuse("The daemon has " + std::to_string(remote_pending_.size()) +
                  " remote requests in flight; try again.");
  }
  spdlog::debug("control: \"{}\" from remote user {} (uid {})", request->verb, user, peer->uid);
  const std::uint64_t serial = next_serial_++;
  // Registered before the handler runs: it may answer through reply() before it returns.
  remote_pending_.emplace(serial, RemotePending{.route = route, .user = user, .since = now});
  std::optional<std::string> reply =
      call_handler(*request, *peer, ReplyHandle{.fd = kRemoteReplyFd, .serial = serial});
  if (reply) {
    remote_pending_.erase(serial);
    send_remote(route, std::move(*reply));
  }
}

}  // namespace elastic::control
