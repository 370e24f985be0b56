// store_worker: a worker for the integration tests that does what rank 0's c10d store does
// first: bind MASTER_PORT on the wildcard address (IPv6 dual-stack, SO_REUSEADDR) and listen.
// Rank 0 exits 1 naming the error when that fails; every rank then holds on for argv[1]
// seconds (default: until killed) and exits 0.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  const char* rank = std::getenv("RANK");
  const char* port_text = std::getenv("MASTER_PORT");
  if (rank == nullptr || port_text == nullptr) {
    std::fprintf(stderr, "store_worker: RANK and MASTER_PORT must be set\n");
    return 2;
  }
  int fd = -1;
  if (std::strcmp(rank, "0") == 0) {
    fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int on = 1;
    const int off = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_any;
    address.sin6_port = htons(static_cast<std::uint16_t>(std::atoi(port_text)));
    if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
        ::listen(fd, 16) != 0) {
      std::fprintf(stderr, "store_worker: the store cannot listen on port %s: %s\n", port_text,
                   std::strerror(errno));
      return 1;
    }
    std::printf("store listening on port %s\n", port_text);
    std::fflush(stdout);
  }
  if (argc > 1) {
    ::sleep(static_cast<unsigned>(std::atoi(argv[1])));
  } else {
    while (true) ::pause();
  }
  if (fd >= 0) ::close(fd);
  return 0;
}
