#include "trainer/round_source.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

namespace elastic::trainer {

FileRoundSource::FileRoundSource(std::string path, EnvMap base)
    : path_(std::move(path)), base_(std::move(base)) {}

Result<WorkerEnv> FileRoundSource::parse(const std::string& text, const EnvMap& base) {
  if (text.size() > kMaxFileBytes) {
    return Error{"the round file holds " + std::to_string(text.size()) + " bytes, more than " +
                 std::to_string(kMaxFileBytes)};
  }
  EnvMap env = base;
  std::istringstream lines(text);
  int number = 0;
  bool names_round = false;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Error{"line " + std::to_string(number) + " of the round file is not KEY=VALUE: \"" +
                   line.substr(0, 80) + "\""};
    }
    const std::string key = line.substr(0, eq);
    names_round = names_round || key == "ELASTIC_ROUND";
    env[key] = line.substr(eq + 1);
  }
  // The round is what makes an announcement newer; one inherited from the environment is not.
  if (!names_round) {
    return Error{"the round file names no ELASTIC_ROUND"};
  }
  return parse_worker_env(env);
}

std::optional<WorkerEnv> FileRoundSource::poll(std::int64_t current_round) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return std::nullopt;
  const std::int64_t mtime_ns =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (st.st_ino != inode_ || mtime_ns != mtime_ns_ || st.st_size != size_) {
    inode_ = st.st_ino;
    mtime_ns_ = mtime_ns;
    size_ = st.st_size;
    last_.reset();
    std::ifstream in(path_, std::ios::binary);
    std::string text;
    if (in) {
      text.resize(kMaxFileBytes + 1);
      in.read(text.data(), static_cast<std::streamsize>(text.size()));
      text.resize(static_cast<std::size_t>(in.gcount()));
    }
    auto parsed = parse(text, base_);
    if (!parsed) {
      std::fprintf(stderr, "elastic-trainer: ignoring %s: %s\n", path_.c_str(),
                   parsed.error().message.c_str());
    } else {
      last_ = std::move(parsed).value();
    }
  }
  if (last_ && last_->round > current_round) return last_;
  return std::nullopt;
}

std::optional<WorkerEnv> FileRoundSource::wait(std::int64_t current_round,
                                               std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    if (auto next = poll(current_round)) return next;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // A file gives no notification; a short poll adds at most kWaitInterval to a recovery.
    std::this_thread::sleep_for(kWaitInterval);
  }
}

}  // namespace elastic::trainer
