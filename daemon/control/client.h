// Client: elasticctl's end of the local control socket (protocol in daemon/control/protocol.h).
//
// call() connects to the daemon's AF_UNIX socket, sends one framed request and returns the
// reply's JSON text. Errors are one sentence naming the socket path: no daemon there (the file
// is missing or nobody accepts), permission denied, a timeout, or a malformed reply frame.
// Blocking, with `timeout` applied to connect, send and receive. Thread safety: none needed (no
// shared state).
#pragma once

#include <chrono>
#include <string>

#include "daemon/control/protocol.h"
#include "daemon/core/result.h"

namespace elastic::control {

Result<std::string> call(const std::string& socket_path, const Request& request,
                         std::chrono::milliseconds timeout);

}  // namespace elastic::control
