// CURVE key files: generate, write and load node keypairs and the allow-list of public keys.
//
// Each node has its own keypair (research §4.10). Files, both holding one Z85 line (40 chars)
// after optional `#` comment lines:
//   <dir>/<name>.key  the secret key, mode 0600; the public key is derived from it
//   <dir>/<name>.pub  the public key, mode 0644
// The allow-list is every `<name>.pub` in transport.public_keys_dir: the file name is the node
// name, which is how a DEALER finds the server key of the peer it dials and how the ZAP
// handler names an authenticated client. Distribute the .pub files with configuration
// management (`elasticctl keygen` writes a pair).
//
// A secret key file readable by group or others, or not owned by the process's user, is
// refused: a leaked key lets anyone join the cluster and inject messages. An allow-list
// directory or .pub file writable by group or others, or owned by someone other than root or
// the process's user, is refused too: whoever can add a .pub file joins the cluster (or, for
// control.client_keys_dir, acts as any user).
// Errors: every failure returns one sentence naming the file. Thread safety: pure functions
// apart from the files they read or write.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "daemon/core/result.h"

namespace elastic::transport {

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// A fresh keypair from libzmq's CSPRNG (zmq_curve_keypair).
Result<CurveKeyPair> generate_curve_keypair();

// The 32 raw bytes of a Z85 key (40 characters), as ZAP hands keys over; nullopt when it is not
// one.
std::optional<std::string> curve_key_bytes(const std::string& z85);

// Writes <dir>/<name>.key (0600) and <dir>/<name>.pub (0644), creating dir. Refuses to
// overwrite an existing secret key file.
Status write_curve_keypair(const std::string& dir, const std::string& name,
                           const CurveKeyPair& keys);

// Loads a secret key file and derives its public key. Refuses a file readable by group or
// others (naming the file and its mode) or owned by another user.
Result<CurveKeyPair> load_curve_secret_key(const std::string& path);

// Loads one public key file.
Result<std::string> load_curve_public_key(const std::string& path);

// OK when `path` is owned by root or the process's user and not writable by group or others;
// else one sentence naming `what`, the path and the fix.
Status check_trusted_path(const std::string& path, const char* what);

// Node name -> Z85 public key for every `*.pub` in dir (dir and files checked with
// check_trusted_path). An unreadable or invalid file is an
// error (a silently skipped node would fail to join with a confusing symptom).
Result<std::map<std::string, std::string>> load_curve_allow_list(const std::string& dir);

}  // namespace elastic::transport
