// Notifier: the systemd notification protocol (sd_notify(3)) for a Type=notify service, spoken
// directly: one AF_UNIX SOCK_DGRAM datagram of "KEY=VALUE\n" lines to the socket named by
// $NOTIFY_SOCKET (a path, or "@name" for the abstract namespace). Written here rather than
// linked from libsystemd because the protocol is a dozen lines and the daemon then needs no
// extra library on hosts that run it under Slurm without systemd.
//
// What elasticd sends (node.h, "Lifecycle", says when):
//   READY=1                          config valid, sockets bound, the node joined
//   STATUS=<one line>                the daemon's state; sent only when the text changes
//   RELOADING=1 + MONOTONIC_USEC=<n> a SIGHUP reload begins (systemd >= 253 wants the clock;
//                                    252 ignores it), followed by READY=1 when it is done
//   STOPPING=1                       SIGTERM/SIGINT: the drain begins
//   WATCHDOG=1                       every half of $WATCHDOG_USEC when the unit sets WatchdogSec
// MAINPID is implicit: the daemon itself sends, so systemd knows the sender's pid.
//
// Without $NOTIFY_SOCKET (started by hand, by a Slurm prolog, by tests) every call is a no-op
// that succeeds. from_environment() unsets NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID, so no
// child process (a worker) can talk to systemd on the daemon's behalf.
//
// Errors: a failed send returns an Error naming the socket; the caller logs it and carries on
// (systemd then times the start out, which is the right outcome when it cannot be told).
// Thread safety: none; the node's loop thread owns it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/core/result.h"

namespace elastic::node {

class Notifier {
 public:
  // Reads (and unsets) $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID of this process.
  static Notifier from_environment();
  // A notifier for `socket_path` ("" = disabled) and an optional watchdog interval (tests).
  explicit Notifier(std::string socket_path = "",
                    std::optional<std::chrono::microseconds> watchdog = std::nullopt);

  bool enabled() const { return !socket_path_.empty(); }
  const std::string& socket_path() const { return socket_path_; }

  // Sends `state` ("KEY=VALUE" lines) as one datagram; Ok and nothing sent when disabled.
  Status send(std::string_view state) const;
  Status ready() const { return send("READY=1"); }
  Status stopping() const { return send("STOPPING=1"); }
  // RELOADING=1 with MONOTONIC_USEC = CLOCK_MONOTONIC now.
  Status reloading() const;
  // STATUS=<text> when it differs from the last one sent (newlines become spaces).
  Status status(const std::string& text);

  // How often to send WATCHDOG=1 (half of $WATCHDOG_USEC), when the unit asked for it.
  std::optional<std::chrono::microseconds> watchdog_interval() const;
  Status watchdog() const { return send("WATCHDOG=1"); }

 private:
  std::string socket_path_;
  std::optional<std::chrono::microseconds> watchdog_;
  std::string last_status_;
};

}  // namespace elastic::node
