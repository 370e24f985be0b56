// netns_delay: a userspace delay line between two interfaces, for NetnsCluster::set_delay() on
// kernels without sch_netem (see netns_cluster.h). Started by the harness inside a cluster's
// switch namespace, one per delayed host, and ended by pid.
//
//   netns_delay HOST_IF SWITCH_IF DELAY_US [JITTER_US [QUEUE_FRAMES]]
//
// Forwards every Ethernet frame between HOST_IF (the host's switch-side veth, out of the
// bridge) and SWITCH_IF (a veth whose peer is a bridge port). Frames from the host (its egress)
// leave after DELAY_US microseconds, plus a uniform jitter in [-JITTER_US, +JITTER_US], never
// before an earlier frame (order is kept, as with netem without reordering). Frames towards the
// host pass at once. At most QUEUE_FRAMES frames (default 10000) or 64 MiB wait; beyond that new
// frames are dropped and counted.
//
// Sockets: AF_PACKET/SOCK_RAW bound per interface with PACKET_VNET_HDR, so GSO super-frames and
// partial checksums from veth travel as they are (without it a 64 KiB TSO frame could not be
// sent back out, and checksum-offloaded frames would arrive with wrong checksums); outgoing
// frames (our own sends) are ignored so nothing loops.
//
// Prints "ready" once both sockets are bound, and "forwarded F delayed D dropped X" on SIGTERM
// or SIGINT before exiting 0. Exit 2 on bad usage or a failed socket call, 1 if an interface
// disappears (message on stderr).
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kQueueBytes = 64u << 20;
// A GSO frame is at most 64 KiB plus headers; anything longer is truncated and dropped.
constexpr std::size_t kBufferBytes = 256u << 10;
// Frames read per socket per loop turn, so one busy direction cannot starve the releases.
constexpr int kBurst = 64;

volatile sig_atomic_t g_stop = 0;

void on_signal(int) { g_stop = 1; }

int fail(const char* what, const char* name) {
  std::fprintf(stderr, "netns_delay: %s %s: %s\n", what, name, std::strerror(errno));
  return 2;
}

int port_failed(const char* what, const char* name) {
  fail(what, name);
  return -1;
}

int gone(const char* name) {
  std::fprintf(stderr, "netns_delay: interface %s disappeared\n", name);
  return 1;
}

bool parse(const char* text, long long max, long long& value) {
  char* end = nullptr;
  errno = 0;
  value = std::strtoll(text, &end, 10);
  return errno == 0 && end != text && *end == '\0' && value >= 0 && value <= max;
}

// A packet socket that receives and sends on `name` only; -1 after printing why.
int open_port(const char* name) {
  const unsigned index = ::if_nametoindex(name);
  if (index == 0) return port_failed("no interface", name);
  // Protocol 0 until bound: an ETH_P_ALL socket would queue frames of every interface meanwhile.
  const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return port_failed("socket for", name);
  const int one = 1;
  if (::setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) {
    return port_failed("PACKET_VNET_HDR on", name);
  }
  // Our own transmissions come back as PACKET_OUTGOING; the kernel can skip them (4.20+), and
  // the receive path checks sll_pkttype as well for older kernels.
  (void)::setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
  const int buffer = 8 << 20;
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof buffer);
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(index);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return port_failed("bind to", name);
  }
  // veth delivers frames for any MAC to packet sockets anyway; promiscuous mode makes that
  // explicit for devices that filter.
  packet_mreq mreq{};
  mreq.mr_ifindex = static_cast<int>(index);
  mreq.mr_type = PACKET_MR_PROMISC;
  if (::setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq, sizeof mreq) != 0) {
    return port_failed("promiscuous mode on", name);
  }
  return fd;
}

struct Frame {
  Clock::time_point due;
  std::vector<char> bytes;  // virtio_net_hdr + Ethernet frame
};

struct Stats {
  unsigned long long forwarded = 0;
  unsigned long long delayed = 0;
  unsigned long long dropped = 0;
};

enum class Read { kFrame, kEmpty, kSkip, kGone };

Read read_frame(int fd, std::vector<char>& buffer, ssize_t& length, Stats& stats) {
  sockaddr_ll from{};
  socklen_t from_len = sizeof from;
  length = ::recvfrom(fd, buffer.data(), buffer.size(), MSG_TRUNC,
                      reinterpret_cast<sockaddr*>(&from), &from_len);
  if (length < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Read::kEmpty;
    if (errno == ENODEV || errno == ENXIO) return Read::kGone;
    return Read::kSkip;  // ENETDOWN and friends: transient, the socket stays bound
  }
  if (from.sll_pkttype == PACKET_OUTGOING) return Read::kSkip;
  if (static_cast<std::size_t>(length) > buffer.size()) {
    ++stats.dropped;
    return Read::kSkip;
  }
  return Read::kFrame;
}

void send_frame(int fd, const char* bytes, std::size_t length, Stats& stats) {
  // A full device queue is a loss, as on a real link; never block the other direction.
  if (::send(fd, bytes, length, MSG_DONTWAIT) == static_cast<ssize_t>(length)) {
    ++stats.forwarded;
  } else {
    ++stats.dropped;
  }
}

}  // namespace

int main(int argc, char** argv) {
  long long delay_us = 0;
  long long jitter_us = 0;
  long long queue_frames = 10000;
  const long long kMaxMicros = 3600LL * 1000 * 1000;
  if (argc < 4 || argc > 6 || !parse(argv[3], kMaxMicros, delay_us) ||
      (argc > 4 && !parse(argv[4], delay_us, jitter_us)) ||
      (argc > 5 && (!parse(argv[5], 1000000, queue_frames) || queue_frames == 0))) {
    std::fprintf(stderr,
                 "usage: netns_delay HOST_IF SWITCH_IF DELAY_US [JITTER_US<=DELAY_US "
                 "[QUEUE_FRAMES]]\n");
    return 2;
  }
  // Blocked except inside ppoll, so a stop request can never slip in between two checks.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigset_t poll_mask;
  sigprocmask(SIG_SETMASK, nullptr, &poll_mask);
  sigdelset(&poll_mask, SIGTERM);
  sigdelset(&poll_mask, SIGINT);

  const int host = open_port(argv[1]);
  const int sw = host < 0 ? -1 : open_port(argv[2]);
  if (host < 0 || sw < 0) return 2;
  std::printf("ready\n");
  std::fflush(stdout);

  const auto delay = std::chrono::microseconds(delay_us);
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<long long> jitter(-jitter_us, jitter_us);
  std::deque<Frame> queue;
  std::size_t queued_bytes = 0;
  Clock::time_point last_due{};
  std::vector<char> buffer(kBufferBytes);
  Stats stats;
  pollfd fds[2] = {{host, POLLIN, 0}, {sw, POLLIN, 0}};

  while (!g_stop) {
    auto now = Clock::now();
    while (!queue.empty() && queue.front().due <= now) {
      send_frame(sw, queue.front().bytes.data(), queue.front().bytes.size(), stats);
      queued_bytes -= queue.front().bytes.size();
      queue.pop_front();
    }
    timespec timeout{};
    timespec* timeout_ptr = nullptr;
    if (!queue.empty()) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::nanoseconds>(queue.front().due - now).count();
      timeout.tv_sec = static_cast<time_t>(wait / 1000000000);
      timeout.tv_nsec = static_cast<long>(wait % 1000000000);
      timeout_ptr = &timeout;
    }
    if (::ppoll(fds, 2, timeout_ptr, &poll_mask) < 0) {
      if (errno == EINTR) continue;
      return fail("ppoll on", argv[1]);
    }
    now = Clock::now();
    for (int i = 0; i < kBurst && (fds[0].revents & (POLLIN | POLLERR)); ++i) {
      ssize_t length = 0;
      const Read got = read_frame(host, buffer, length, stats);
      if (got == Read::kEmpty) break;
      if (got == Read::kGone) return gone(argv[1]);
      if (got == Read::kSkip) continue;
      if (delay_us == 0 && queue.empty()) {
        send_frame(sw, buffer.data(), static_cast<std::size_t>(length), stats);
        continue;
      }
      if (queue.size() >= static_cast<std::size_t>(queue_frames) ||
          queued_bytes + static_cast<std::size_t>(length) > kQueueBytes) {
        ++stats.dropped;
        continue;
      }
      auto due = now + delay + std::chrono::microseconds(jitter_us > 0 ? jitter(rng) : 0);
      if (due < last_due) due = last_due;  // keep the order
      last_due = due;
      queue.push_back({due, std::vector<char>(buffer.data(), buffer.data() + length)});
      queued_bytes += static_cast<std::size_t>(length);
      ++stats.delayed;
    }
    for (int i = 0; i < kBurst && (fds[1].revents & (POLLIN | POLLERR)); ++i) {
      ssize_t length = 0;
      const Read got = read_frame(sw, buffer, length, stats);
      if (got == Read::kEmpty) break;
      if (got == Read::kGone) return gone(argv[2]);
      if (got == Read::kSkip) continue;
      send_frame(host, buffer.data(), static_cast<std::size_t>(length), stats);
    }
  }
  std::printf("forwarded %llu delayed %llu dropped %llu\n", stats.forwarded, stats.delayed,
              stats.dropped);
  std::fflush(stdout);
  return 0;
}
