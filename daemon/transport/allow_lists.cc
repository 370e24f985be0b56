#include "daemon/transport/allow_lists.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include "daemon/transport/curve_keys.h"

namespace elastic::transport {
namespace {

bool same_time(const std::optional<timespec>& a, const std::optional<timespec>& b) {
  if (!a || !b) return !a && !b;
  return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

}  // namespace

std::optional<timespec> NodeAllowList::mtime() const {
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) return std::nullopt;
  return st.st_mtim;
}

Status NodeAllowList::load(TimePoint now) {
  loaded_ = now;
  mtime_ = mtime();
  timespec wall{};
  ::clock_gettime(CLOCK_REALTIME, &wall);
  racy_ = !mtime_ || wall.tv_sec - mtime_->tv_sec <= static_cast<time_t>(kNodeKeysReload.count());
  Result<std::map<std::string, std::string>> allowed = load_curve_allow_list(dir_);
  if (!allowed.ok()) return Error{allowed.error().message + " (transport.public_keys_dir)"};
  std::map<std::string, std::string> by_raw_key;
  for (const auto& [name, z85] : *allowed) {
    const std::optional<std::string> raw = curve_key_bytes(z85);
    if (!raw) {
      return Error{"The public key of node " + name + " in " + dir_ + " is not valid Z85."};
    }
    by_raw_key[*raw] = name;
  }
  public_keys_ = std::move(*allowed);
  by_raw_key_ = std::move(by_raw_key);
  return ok_status();
}

void NodeAllowList::refresh(bool unknown, TimePoint now) {
  const bool changed = racy_ || !same_time(mtime(), mtime_);
  if (!changed && (!unknown || now - loaded_ < kNodeKeysReload)) return;
  if (Status s = load(now); !s.ok()) {
    if (s.error().message != error_) {
      error_ = s.error().message;
      spdlog::error("keeping the previous node allow-list: {}", error_);
    }
  } else {
    error_.clear();
  }
}

std::string NodeAllowList::node_of(const std::string& raw, TimePoint now) {
  refresh(/*unknown=*/by_raw_key_.count(raw) == 0, now);
  const auto it = by_raw_key_.find(raw);
  return it == by_raw_key_.end() ? std::string() : it->second;
}

std::optional<std::string> NodeAllowList::public_key_of(const std::string& name, TimePoint now) {
  if (public_keys_.count(name) == 0) refresh(/*unknown=*/true, now);
  const auto it = public_keys_.find(name);
  if (it == public_keys_.end()) return std::nullopt;
  return it->second;
}

void ClientAllowList::set(const std::map<std::string, std::string>& keys) {
  users_.clear();
  for (const auto& [user, z85] : keys) {
    if (const std::optional<std::string> raw = curve_key_bytes(z85)) users_[*raw] = user;
  }
}

Status ClientAllowList::load(TimePoint now) {
  loaded_ = now;
  Result<std::map<std::string, std::string>> clients = load_curve_allow_list(dir_);
  if (!clients.ok()) return Error{clients.error().message + " (control.client_keys_dir)"};
  set(*clients);
  return ok_status();
}

std::string ClientAllowList::user_of(const std::string& raw, TimePoint now) {
  if (now - loaded_ >= kClientKeysReload) {
    loaded_ = now;
    Result<std::map<std::string, std::string>> clients = load_curve_allow_list(dir_);
    if (clients.ok()) {
      set(*clients);
      error_.clear();
    } else {
      users_.clear();
      if (clients.error().message != error_) {
        error_ = clients.error().message;
        spdlog::error("remote control refuses every client: {} (control.client_keys_dir)", error_);
      }
    }
  }
  const auto it = users_.find(raw);
  return it == users_.end() ? std::string() : it->second;
}

}  // namespace elastic::transport
