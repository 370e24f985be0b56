#include "trainer/dist.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#ifdef ELASTIC_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace elastic::trainer {
namespace {

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

}  // namespace

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
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = options.timeout;
      dist.backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(dist.store, env.rank,
                                                                 env.world_size, nccl_options);
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
      dist.backend = c10::make_intrusive<c10d::ProcessGroupGloo>(dist.store, env.rank,
                                                                 env.world_size, gloo_options);
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

}  // namespace elastic::trainer
