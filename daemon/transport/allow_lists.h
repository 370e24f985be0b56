// The CURVE allow-lists the transport's ZAP handler consults, kept fresh while the daemon runs.
//
// NodeAllowList (transport.public_keys_dir, every <node>.pub): which node a client key belongs
// to, and the server key to dial a node with. The directory is re-read on a lookup when its
// mtime changed (a key file added, removed or renamed into place), and at most once per
// kNodeKeysReload for an unknown key or name; so a node added to the directory joins without
// restarting the others, and a removed one is refused from its next handshake. An mtime younger
// than kNodeKeysReload at the last read may hide a change made in the same clock tick
// (timestamps are coarse), so until the directory is that old every lookup re-reads it (git's
// "racily clean" index entries, the same problem). A failed re-read keeps the last good list
// (the cluster keeps running; a tampered directory adds no one) and is logged once per distinct
// error. Anyone can present an unknown key; only the directory's writers can change the list.
//
// ClientAllowList (control.client_keys_dir, every <user>.pub): which user a remote-control
// client key speaks for. Re-read at most once per kClientKeysReload on a lookup; a failed
// re-read refuses every client until the directory is safe again (it may have been tampered
// with), logged once per distinct error.
//
// Both are the ZapKeys of a ZAP domain (zap_handler.h): name_of() is node_of() and user_of().
// Both refuse unsafe directories and files as load_curve_allow_list() does (curve_keys.h).
// Keys are compared raw (32 bytes, as ZAP hands them over). Thread safety: none; the
// transport's thread owns them. Errors: load() returns one sentence naming the directory's
// config key.
#pragma once

#include <time.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "daemon/core/result.h"
#include "daemon/core/time.h"
#include "daemon/transport/zap_handler.h"

namespace elastic::transport {

inline constexpr std::chrono::seconds kNodeKeysReload{1};
inline constexpr std::chrono::seconds kClientKeysReload{1};

class NodeAllowList final : public ZapKeys {
 public:
  explicit NodeAllowList(std::string dir) : dir_(std::move(dir)) {}

  // The first read; an error leaves the list empty.
  Status load(TimePoint now);
  // The node a raw client key belongs to, or "" (refused).
  std::string node_of(const std::string& raw_key, TimePoint now);
  std::string name_of(const std::string& raw_key, TimePoint now) override {
    return node_of(raw_key, now);
  }
  // The Z85 public key of node `name` (to dial it), or nullopt when it has none.
  std::optional<std::string> public_key_of(const std::string& name, TimePoint now);
  const std::string& dir() const { return dir_; }

 private:
  void refresh(bool unknown, TimePoint now);
  std::optional<timespec> mtime() const;

  std::string dir_;
  std::map<std::string, std::string> public_keys_;  // node name -> Z85 public key
  std::map<std::string, std::string> by_raw_key_;   // raw 32-byte key -> node name
  TimePoint loaded_{};
  std::optional<timespec> mtime_;  // at the last read
  bool racy_ = false;              // that mtime was too recent to trust (above)
  std::string error_;              // the last failed re-read, logged once
};

class ClientAllowList final : public ZapKeys {
 public:
  explicit ClientAllowList(std::string dir) : dir_(std::move(dir)) {}

  Status load(TimePoint now);
  // The user a raw client key speaks for, or "" (refused).
  std::string user_of(const std::string& raw_key, TimePoint now);
  std::string name_of(const std::string& raw_key, TimePoint now) override {
    return user_of(raw_key, now);
  }
  std::size_t size() const { return users_.size(); }
  const std::string& dir() const { return dir_; }

 private:
  void set(const std::map<std::string, std::string>& keys);

  std::string dir_;
  std::map<std::string, std::string> users_;  // raw 32-byte key -> user name
  TimePoint loaded_{};
  std::string error_;  // the last failed re-read, logged once
};

}  // namespace elastic::transport
