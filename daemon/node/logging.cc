#include "daemon/node/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

namespace elastic::node {

namespace {

spdlog::level::level_enum to_spdlog(config::LogLevel level) {
  switch (level) {
    case config::LogLevel::kTrace:
      return spdlog::level::trace;
    case config::LogLevel::kDebug:
      return spdlog::level::debug;
    case config::LogLevel::kInfo:
      return spdlog::level::info;
    case config::LogLevel::kWarn:
      return spdlog::level::warn;
    case config::LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::info;
}

// The `%*` flag: the message as the inside of a JSON string (quotes, backslashes and control
// characters escaped), so a member name or peer text can never break the line's JSON.
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& message, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    for (const char c : message.payload) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        case '\r':
          dest.append(std::string_view("\\r"));
          break;
        case '\t':
          dest.append(std::string_view("\\t"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
            dest.append(std::string_view(escaped));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<spdlog::custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

}  // namespace

Status setup_logging(const config::LoggingConfig& config) {
  spdlog::sink_ptr sink;
  if (config.file.empty()) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    try {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(config.file, /*truncate=*/false);
    } catch (const spdlog::spdlog_ex& e) {
      return Error{"Cannot open the log file " + config.file + " (logging.file): " + e.what() +
                   "."};
    }
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (config.format == config::LogFormat::kJson) {
    formatter->add_flag<JsonEscapedMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","logger":"%n","msg":"%*"})");
  } else {
    formatter->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  }
  sink->set_formatter(std::move(formatter));
  auto logger = std::make_shared<spdlog::logger>("elasticd", sink);
  logger->set_level(to_spdlog(config.level));
  // Info and above reach the file at once (low volume): a daemon killed with -9 keeps its last
  // words, and whoever waits for the readiness line sees it.
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return ok_status();
}

}  // namespace elastic::node
