// Who is calling the control API, and whether they may run admin verbs.
//
// A local caller is named by SO_PEERCRED on the unix socket (server.cc); a remote caller
// (control.remote_listen) by the file name of its CURVE client key, mapped to a uid/gid here
// with getpwnam_r. Either way the handler sees the same PeerCredentials, so owner and admin
// rules are the same locally and remotely. Nothing a client writes in its JSON is trusted for
// identity.
//
// Admin: uid 0, or a member of control.admin_group. SO_PEERCRED reports only the caller's
// primary gid, so membership also checks the user's supplementary groups from the group
// database (getgrouplist: /etc/group, and LDAP/sssd through NSS), not just the group's gr_mem
// list, which NSS backends may leave empty.
//
// Errors: user_credentials() returns one sentence naming the user. Thread safety: reentrant
// NSS calls only (getpwnam_r, getpwuid_r, getgrnam_r, getgrouplist).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "daemon/core/result.h"

namespace elastic::control {

struct PeerCredentials {
  pid_t pid = 0;  // 0 for a remote caller
  uid_t uid = 0;
  gid_t gid = 0;
  // The user named by a remote caller's client key; "" for the local socket.
  std::string remote_user;
};

// The uid and primary gid of `user` from the password database; an unknown user is an Error.
Result<PeerCredentials> user_credentials(const std::string& user);

// One password-database entry, as the daemon needs it (owner names, worker HOME/SHELL, groups).
struct Account {
  std::string name;
  gid_t gid = 0;
  std::string home;   // pw_dir as stored (may be "")
  std::string shell;  // pw_shell as stored (may be "")
};
// The entry of `uid` (getpwuid_r, the buffer grown on ERANGE); nullopt when it is unknown or the
// lookup fails.
std::optional<Account> account_of(uid_t uid);

// True for uid 0, or when admin_group is set and the caller's primary gid or one of the
// user's groups is that group. An unknown group means nobody but root.
bool is_admin(const PeerCredentials& peer, const std::string& admin_group);

}  // namespace elastic::control
