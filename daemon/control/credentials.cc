#include "daemon/control/credentials.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace elastic::control {

namespace {

// Buffer for the *_r lookups: sysconf's hint, grown on ERANGE (large LDAP groups).
std::vector<char> lookup_buffer(int name) {
  const long hint = ::sysconf(name);
  return std::vector<char>(hint > 0 ? static_cast<std::size_t>(hint) : 16384);
}

}  // namespace

std::optional<Account> account_of(uid_t uid) {
  std::vector<char> buffer = lookup_buffer(_SC_GETPW_R_SIZE_MAX);
  passwd entry{};
  passwd* found = nullptr;
  int rc = 0;
  while ((rc = ::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found)) == ERANGE &&
         buffer.size() < (1u << 24)) {
    buffer.resize(buffer.size() * 2);
  }
  if (rc != 0 || found == nullptr) return std::nullopt;
  return Account{.name = entry.pw_name,
                 .gid = entry.pw_gid,
                 .home = entry.pw_dir != nullptr ? entry.pw_dir : "",
                 .shell = entry.pw_shell != nullptr ? entry.pw_shell : ""};
}

Result<PeerCredentials> user_credentials(const std::string& user) {
  if (user.empty()) return Error{"The client key names no user."};
  std::vector<char> buffer = lookup_buffer(_SC_GETPW_R_SIZE_MAX);
  passwd entry{};
  passwd* found = nullptr;
  int rc = 0;
  while ((rc = ::getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found)) ==
             ERANGE &&
         buffer.size() < (1u << 24)) {
    buffer.resize(buffer.size() * 2);
  }
  if (rc != 0) {
    return Error{"Cannot look up the user \"" + user + "\": " + std::strerror(rc) + "."};
  }
  if (found == nullptr) {
    return Error{"The user \"" + user +
                 "\" named by this client key is not known on this node; its key file in "
                 "control.client_keys_dir must be named after an existing user."};
  }
  return PeerCredentials{.pid = 0, .uid = entry.pw_uid, .gid = entry.pw_gid, .remote_user = user};
}

bool is_admin(const PeerCredentials& peer, const std::string& admin_group) {
  if (peer.uid == 0) return true;
  if (admin_group.empty()) return false;
  std::vector<char> buffer = lookup_buffer(_SC_GETGR_R_SIZE_MAX);
  group entry{};
  group* found = nullptr;
  int rc = 0;
  while ((rc = ::getgrnam_r(admin_group.c_str(), &entry, buffer.data(), buffer.size(), &found)) ==
             ERANGE &&
         buffer.size() < (1u << 24)) {
    buffer.resize(buffer.size() * 2);
  }
  if (rc != 0 || found == nullptr) return false;
  const gid_t admins = entry.gr_gid;
  if (peer.gid == admins) return true;

  const std::optional<Account> user = account_of(peer.uid);
  if (!user) return false;
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 8; ++attempt) {
    int count = static_cast<int>(groups.size());
    if (::getgrouplist(user->name.c_str(), user->gid, groups.data(), &count) >= 0) {
      groups.resize(static_cast<std::size_t>(count));
      return std::find(groups.begin(), groups.end(), admins) != groups.end();
    }
    // -1: `count` now holds the number needed.
    groups.resize(std::max<std::size_t>(static_cast<std::size_t>(count), groups.size() * 2));
  }
  return false;
}

}  // namespace elastic::control
