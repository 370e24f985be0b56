#include "trainer/dist.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#ifdef ELASTIC_HAVE_GLOO
#include <gloo/transport/pair.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace elastic::trainer {
namespace {

#ifdef USE_C10D_NCCL
c10::intrusive_ptr<Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                      int world_size, const DistOptions& options) {
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  nccl_options->timeout = options.timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, nccl_options);
}
#endif

// The local address this host uses to reach the master: Gloo must bind to an address peers can
// reach, and on a multi-homed host (or in a network namespace) the hostname may not resolve to
// it. A connected UDP socket sends nothing; it only asks the kernel for the route.
[[maybe_unused]] std::string local_address_towards(const std::string& master_addr, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(master_addr.c_str(), std::to_string(port == 0 ? 1 : port).c_str(), &hints,
                    &found) != 0 ||
      found == nullptr) {
    return master_addr;
  }
  std::string local = master_addr;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in self{};
    socklen_t len = sizeof self;
    char text[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0 &&
        ::inet_ntop(AF_INET, &self.sin_addr, text, sizeof text) != nullptr) {
      local = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return local;
}

#ifdef ELASTIC_HAVE_GLOO
// Whether two socket addresses are the same IPv4/IPv6 address and port.
bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

// A connected TCP socket of this process: its descriptor and both ends.
struct InetSocket {
  int fd = -1;
  sockaddr_storage local{};
  sockaddr_storage remote{};
};

// Every connected IPv4/IPv6 stream socket of this process (from /proc/self/fd).
std::vector<InetSocket> connected_inet_sockets() {
  std::vector<InetSocket> sockets;
  DIR* fds = ::opendir("/proc/self/fd");
  if (fds == nullptr) return sockets;
  while (const dirent* entry = ::readdir(fds)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(fds)) continue;
    InetSocket socket;
    socket.fd = static_cast<int>(fd);
    socklen_t length = sizeof socket.local, remote_length = sizeof socket.remote;
    int type = 0;
    socklen_t type_length = sizeof type;
    if (::getsockopt(socket.fd, SOL_SOCKET, SO_TYPE, &type, &type_length) != 0 ||
        type != SOCK_STREAM ||
        ::getsockname(socket.fd, reinterpret_cast<sockaddr*>(&socket.local), &length) != 0 ||
        (socket.local.ss_family != AF_INET && socket.local.ss_family != AF_INET6) ||
        ::getpeername(socket.fd, reinterpret_cast<sockaddr*>(&socket.remote), &remote_length) !=
            0) {
      continue;
    }
    sockets.push_back(socket);
  }
  ::closedir(fds);
  return sockets;
}

bool same_socket(const InetSocket& a, const InetSocket& b) {
  return a.fd == b.fd && same_endpoint(a.local, b.local) && same_endpoint(a.remote, b.remote);
}

// ProcessGroupGloo with an abort: its Gloo contexts are protected members (1.13 and 2.x alike).
class AbortableGloo final : public c10d::ProcessGroupGloo {
 public:
  using c10d::ProcessGroupGloo::ProcessGroupGloo;

  // The sockets the group's construction connected (its full mesh): the pairs this process
  // dialled have an ephemeral local address, not the pair's, so only this list finds them.
  void remember(std::vector<InetSocket> sockets) { sockets_ = std::move(sockets); }

  // Shuts down the socket of every connection of every context. Gloo's event loop then reads
  // an end of stream on each: the pair fails with "Connection closed by peer", which wakes every
  // send and receive posted on it, and the peer reads the same end of stream on its side. A
  // collective waiting on a live peer would otherwise wait out the whole timeout; pair->close()
  // would release the peer but strand this side's waiting operations.
  //
  // Gloo does not expose a pair's descriptor. Which sockets are the group's: those its
  // construction connected (remember(): every pair of the mesh, dialled or accepted), and any
  // socket bound to a pair's local address (its bytes begin with a sockaddr_storage; a pair that
  // accepted has its own listening port), in case a pair reconnected since. A remembered socket
  // counts only while it is still the same one (not closed and its number reused).
  void abort_connections() {
    std::vector<sockaddr_storage> endpoints;
    for (auto& context : contexts_) {
      if (!context) continue;
      for (int peer = 0; peer < context->size; ++peer) {
        if (peer == context->rank) continue;
        try {
          auto& pair = context->getPair(peer);
          if (!pair) continue;
          const std::vector<char> bytes = pair->address().bytes();
          if (bytes.size() < sizeof(sockaddr_storage)) continue;
          sockaddr_storage address{};
          std::memcpy(&address, bytes.data(), sizeof address);
          endpoints.push_back(address);
        } catch (const std::exception&) {
          // A pair that cannot be reached has nothing left to close.
        }
      }
    }
    for (const InetSocket& socket : connected_inet_sockets()) {
      const bool in_mesh = std::any_of(sockets_.begin(), sockets_.end(), [&](const InetSocket& m) {
        return same_socket(socket, m);
      });
      const bool on_a_pair =
          std::any_of(endpoints.begin(), endpoints.end(),
                      [&](const sockaddr_storage& e) { return same_endpoint(socket.local, e); });
      if (in_mesh || on_a_pair) ::shutdown(socket.fd, SHUT_RDWR);
    }
  }

 private:
  std::vector<InetSocket> sockets_;
};
#endif

}  // namespace

void abort_backend(Dist& dist) {
  if (!dist.backend) return;
#ifdef ELASTIC_HAVE_GLOO
  if (auto* gloo = dynamic_cast<AbortableGloo*>(dist.backend.get())) {
    gloo->abort_connections();
    return;
  }
#endif
#ifdef USE_C10D_NCCL
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(dist.backend.get())) {
    try {
      abort_nccl(*nccl);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "elastic-trainer: aborting the NCCL communicators: %s\n", e.what());
    }
  }
#endif
}

bool nccl_compiled_in() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

Result<Dist> init_dist(const WorkerEnv& env, const DistOptions& options) {
  Dist dist;
  const std::string endpoint = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0;
    store_options.numWorkers = env.world_size;
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    configure_store_options(store_options);
    auto tcp_store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    // Keys of one round never meet keys of another, even if a store outlives a round.
    dist.store = c10::make_intrusive<c10d::PrefixStore>(
        "elastic/" + env.job_id + "/" + std::to_string(env.round), tcp_store);
  } catch (const std::exception& e) {
    return Error{"cannot reach the c10d store at " + endpoint + " (rank " +
                 std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                 "): " + e.what()};
  }
  try {
    if (options.device.is_cuda()) {
#ifdef USE_C10D_NCCL
      dist.backend = make_nccl(dist.store, env.rank, env.world_size, options);
      dist.backend_name = "nccl";
#else
      return Error{"a CUDA device was asked for but this build has no NCCL support"};
#endif
    } else {
#ifdef ELASTIC_HAVE_GLOO
      auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
        gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else {
        gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(
            local_address_towards(env.master_addr, env.master_port)));
      }
      gloo_options->threads = 2;
      const std::vector<InetSocket> before = connected_inet_sockets();
      auto gloo =
          c10::make_intrusive<AbortableGloo>(dist.store, env.rank, env.world_size, gloo_options);
      std::vector<InetSocket> mesh = connected_inet_sockets();
      std::erase_if(mesh, [&](const InetSocket& socket) {
        return std::any_of(before.begin(), before.end(),
                           [&](const InetSocket& old) { return same_socket(old, socket); });
      });
      gloo->remember(std::move(mesh));
      dist.backend = gloo;
      dist.backend_name = "gloo";
#else
      return Error{
          "CPU training needs Gloo, which this build lacks (no Gloo headers were found "
          "when it was built); train on CUDA devices with NCCL instead"};
#endif
    }
  } catch (const std::exception& e) {
    return Error{"cannot create the process group through the store at " + endpoint + ": " +
                 e.what()};
  }
  return dist;
}

Result<double> warm_up_backend(const DistOptions& options) {
  if (!options.device.is_cuda()) return 0.0;  // Gloo: nothing to warm
#ifdef USE_C10D_NCCL
  const auto start = std::chrono::steady_clock::now();
  try {
    auto backend = make_nccl(c10::make_intrusive<c10d::HashStore>(), 0, 1, options);
    std::vector<at::Tensor> one{torch::ones({1}, torch::TensorOptions().device(options.device))};
    backend->allreduce(one)->wait();
    (void)one[0].cpu();  // the all-reduce ran on the device
    shutdown_backend(*backend);
  } catch (const std::exception& e) {
    return Error{std::string("warming up NCCL in a group of this process alone failed: ") +
                 e.what()};
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
#else
  return Error{"a CUDA device was asked for but this build has no NCCL support"};
#endif
}

}  // namespace elastic::trainer
