#include "trainer/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace elastic::trainer {
namespace {

constexpr auto kKillGrace = std::chrono::seconds(10);

std::atomic<int> forwarded_signal{0};

void remember_signal(int sig) { forwarded_signal.store(sig); }

// A free loopback port. Between closing it here and rank 0 binding it another process could
// take it; acceptable for a local launcher (the run then fails loudly and can be retried).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int run_standalone(int ranks, const std::vector<std::string>& child_args) {
  const int port = free_port();
  if (port < 0) {
    std::fprintf(stderr, "elastic-trainer: cannot find a free loopback port: %s\n",
                 std::strerror(errno));
    return 69;
  }
  struct sigaction action {};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  const pid_t launcher = ::getpid();
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<std::string> env;
    static const char* kOverridden[] = {
        "RANK=",       "LOCAL_RANK=",  "WORLD_SIZE=", "LOCAL_WORLD_SIZE=",
        "GROUP_RANK=", "MASTER_ADDR=", "MASTER_PORT="};
    for (char** e = environ; *e != nullptr; ++e) {
      bool keep = true;
      for (const char* prefix : kOverridden)
        keep = keep && std::strncmp(*e, prefix, std::strlen(prefix)) != 0;
      if (keep) env.emplace_back(*e);
    }
    const std::string r = std::to_string(rank), n = std::to_string(ranks);
    for (const std::string& kv :
         {"RANK=" + r, "LOCAL_RANK=" + r, "WORLD_SIZE=" + n, "LOCAL_WORLD_SIZE=" + n,
          std::string("GROUP_RANK=0"), std::string("MASTER_ADDR=127.0.0.1"),
          "MASTER_PORT=" + std::to_string(port)}) {
      env.push_back(kv);
    }
    std::vector<char*> envp, argv;
    for (auto& kv : env) envp.push_back(kv.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe";
    std::vector<std::string> args = child_args;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "elastic-trainer: fork failed: %s\n", std::strerror(errno));
      for (pid_t c : children) ::kill(c, SIGKILL);
      return 71;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(127);  // the launcher died before prctl
      ::execve(self.c_str(), argv.data(), envp.data());
      std::fprintf(stderr, "elastic-trainer: cannot exec %s: %s\n", self.c_str(),
                   std::strerror(errno));
      ::_exit(127);
    }
    children.push_back(pid);
  }

  int result = 0;
  std::size_t alive = children.size();
  bool stopping = false;
  auto kill_deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    if (const int sig = forwarded_signal.exchange(0); sig != 0) {
      for (pid_t c : children) {
        if (c > 0) ::kill(c, sig);
      }
    }
    if (std::chrono::steady_clock::now() >= kill_deadline) {
      for (pid_t c : children) {
        if (c > 0) ::kill(c, SIGKILL);
      }
      kill_deadline = std::chrono::steady_clock::time_point::max();
    }
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, WNOHANG);
    if (done <= 0) {
      ::poll(nullptr, 0, 20);  // nothing exited yet; look again shortly
      continue;
    }
    for (auto& c : children) {
      if (c != done) continue;
      c = -1;
      --alive;
      const int code = exit_code_of(status);
      if (code != 0 && result == 0) result = code;
      if (code != 0 && !stopping) {
        // One rank failed: the others would wait for it until their collective timeout.
        stopping = true;
        for (pid_t other : children) {
          if (other > 0) ::kill(other, SIGTERM);
        }
        kill_deadline = std::chrono::steady_clock::now() + kKillGrace;
      }
    }
  }
  return result;
}

}  // namespace elastic::trainer
