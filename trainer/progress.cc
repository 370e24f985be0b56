#include "trainer/progress.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace elastic::trainer {
namespace {

std::string get(const std::map<std::string, std::string>& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

std::int64_t number(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == nullptr || *end != '\0') return 0;
  return value;
}

// A JSON string literal (job ids are [A-Za-z0-9._-], but the environment is not ours to trust).
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

bool read_all(int fd, char* buffer, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::recv(fd, buffer + done, size - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

ProgressReporter::ProgressReporter(const std::map<std::string, std::string>& env,
                                   std::chrono::steady_clock::duration step_interval)
    : socket_(get(env, "ELASTIC_CONTROL_SOCKET")),
      job_(get(env, "ELASTIC_JOB_ID")),
      round_(number(get(env, "ELASTIC_ROUND"))),
      rank_(number(get(env, "RANK"))),
      step_interval_(step_interval) {}

std::string ProgressReporter::frame_json(const std::string& event, std::int64_t step,
                                         std::int64_t resumed_from, bool first,
                                         std::int64_t samples,
                                         std::optional<double> loss) const {
  std::string json = "{\"verb\":\"progress\",\"job\":" + quoted(job_) +
                     ",\"round\":" + std::to_string(round_) + ",\"rank\":" + std::to_string(rank_) +
                     ",\"event\":" + quoted(event) + ",\"step\":" + std::to_string(step);
  if (event == "step") {
    json += ",\"resumed_from\":" + std::to_string(resumed_from) +
            ",\"first\":" + (first ? "true" : "false");
    if (samples >= 0) json += ",\"samples\":" + std::to_string(samples);
    if (loss && std::isfinite(*loss)) {
      char text[40];
      std::snprintf(text, sizeof text, "%.9g", *loss);
      json += std::string(",\"loss\":") + text;
    }
  }
  return json + "}";
}

void ProgressReporter::step(std::int64_t step, std::int64_t resumed_from, std::int64_t samples,
                            std::optional<double> loss) {
  if (!enabled()) return;
  const auto now = std::chrono::steady_clock::now();
  const bool first = !first_sent_;
  if (!first && now < next_step_) return;
  first_sent_ = true;
  next_step_ = now + step_interval_;
  (void)send(frame_json("step", step, resumed_from, first, samples, loss));
}

void ProgressReporter::checkpoint(std::int64_t step) {
  if (!enabled()) return;
  (void)send(frame_json("checkpoint", step, -1, false));
}

bool ProgressReporter::send(const std::string& json) {
  const auto now = std::chrono::steady_clock::now();
  if (now < paused_until_) return false;
  std::string failure;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    failure = std::string("socket: ") + std::strerror(errno);
  } else {
    // The timeouts bound connect (a full backlog), the write and the reply.
    timeval tv{};
    tv.tv_usec = static_cast<suseconds_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(kTimeout).count());
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (socket_.size() >= sizeof(address.sun_path)) {
      failure = "the socket path is too long";
    } else {
      std::memcpy(address.sun_path, socket_.c_str(), socket_.size() + 1);
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        failure = std::string("connect: ") + std::strerror(errno);
      }
    }
    if (failure.empty()) {
      const auto length = static_cast<std::uint32_t>(json.size());
      std::string frame = {static_cast<char>(length >> 24), static_cast<char>(length >> 16),
                           static_cast<char>(length >> 8), static_cast<char>(length)};
      frame += json;
      char header[4];
      if (!write_all(fd, frame)) {
        failure = std::string("send: ") + std::strerror(errno);
      } else if (!read_all(fd, header, sizeof header)) {
        failure = "no reply within " + std::to_string(kTimeout.count()) + " ms";
      } else {
        const std::uint32_t size = (std::uint32_t{static_cast<unsigned char>(header[0])} << 24) |
                                   (std::uint32_t{static_cast<unsigned char>(header[1])} << 16) |
                                   (std::uint32_t{static_cast<unsigned char>(header[2])} << 8) |
                                   std::uint32_t{static_cast<unsigned char>(header[3])};
        std::string reply(std::min<std::uint32_t>(size, 4096), '\0');
        if (!read_all(fd, reply.data(), reply.size())) {
          failure = "a truncated reply";
        } else if (reply.find("\"ok\":true") == std::string::npos) {
          failure = "refused: " + reply;
        }
      }
    }
    ::close(fd);
  }
  if (failure.empty()) return true;
  paused_until_ = now + kBackoff;
  if (!logged_) {
    logged_ = true;
    std::fprintf(stderr,
                 "elastic-trainer: progress report to %s failed (%s); training goes on, and "
                 "further failures are not logged\n",
                 socket_.c_str(), failure.c_str());
  }
  return false;
}

}  // namespace elastic::trainer
