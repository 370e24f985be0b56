// Logging setup for elasticd: spdlog configured from config::LoggingConfig.
//
// level: trace..error. format: text (`[time] [level] message`, for people) or json (one JSON
// object per line: {"time", "level", "logger", "msg"}, the message escaped, for log shippers).
// file: "" = stderr (journald under systemd), else appended to that file (parent must exist).
//
// Errors: an unopenable log file is an Error naming it. Thread safety: call once from main()
// before other threads start; spdlog's loggers are thread safe afterwards.
#pragma once

#include "daemon/config/config.h"
#include "daemon/core/result.h"

namespace elastic::node {

Status setup_logging(const config::LoggingConfig& config);

}  // namespace elastic::node
