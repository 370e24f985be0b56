// Remote control client: elasticctl's end of control.remote_listen (a login node without a
// daemon talks to a daemon over CURVE).
//
// call_remote() opens a CURVE DEALER with the client's keypair (client_key_file, made by
// `elasticctl keygen --client USER`; mode 0600) and the daemon's public key (server_key_file,
// the daemon's transport <node>.pub), sends one frame holding the same JSON request as the
// local socket and returns the reply frame's JSON text. The daemon acts as the user named by
// the client key's file in its control.client_keys_dir, with the same rules as a local caller.
//
// Failures, one sentence each, with a kind so elasticctl can pick its exit code:
//  - kRefused: the daemon's ZAP handler refused the key (a ZMTP ERROR came back);
//  - kNoAnswer: nothing within `timeout`. CURVE may give a refused or non-CURVE peer no reply
//    at all, so this says "did not accept this client key (or did not answer) within N s";
//  - kBadSetup: unreadable or unsafe key files, a bad endpoint.
// Blocking, bounded by `timeout`. Thread safety: none needed (its own ZeroMQ context per call).
#pragma once

#include <chrono>
#include <string>

#include "daemon/control/protocol.h"
#include "daemon/core/result.h"

namespace elastic::transport {

struct RemoteControlClient {
  std::string endpoint;         // tcp://HOST:PORT (the daemon's control.remote_listen)
  std::string client_key_file;  // this client's secret key
  std::string server_key_file;  // the daemon's public key
};

enum class RemoteFailure { kNone, kRefused, kNoAnswer, kBadSetup };

Result<std::string> call_remote(const RemoteControlClient& client, const control::Request& request,
                                std::chrono::milliseconds timeout,
                                RemoteFailure* failure = nullptr);

}  // namespace elastic::transport
