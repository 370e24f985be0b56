#include "daemon/transport/zap_handler.h"

#include <spdlog/spdlog.h>

namespace elastic::transport {
namespace {

// Request frames (RFC 27); credentials follow the mechanism.
constexpr std::size_t kRequestId = 1;
constexpr std::size_t kDomain = 2;
constexpr std::size_t kMechanism = 5;
constexpr std::size_t kCredentials = 6;

// The status text RFC 27 carries beside the code; libzmq only logs it.
std::string_view status_text(ZapVerdict verdict) {
  switch (verdict) {
    case ZapVerdict::kAllowed:
      return "OK";
    case ZapVerdict::kMalformed:
      return "malformed ZAP request";
    case ZapVerdict::kWrongVersion:
      return "ZAP version not 1.0";
    case ZapVerdict::kWrongMechanism:
      return "mechanism not CURVE";
    case ZapVerdict::kUnknownDomain:
      return "unknown ZAP domain";
    case ZapVerdict::kUnknownKey:
      return "key not in the allow-list";
  }
  return "refused";
}

}  // namespace

void ZapHandler::add_domain(std::string domain, ZapKeys* keys, std::uint64_t* refused,
                            std::string keys_dir) {
  domains_.insert_or_assign(
      std::move(domain), Domain{.keys = keys, .refused = refused, .keys_dir = std::move(keys_dir)});
}

ZapAnswer ZapHandler::answer(const std::vector<std::string_view>& request, TimePoint now) {
  const std::string_view domain_name =
      request.size() > kDomain ? request[kDomain] : std::string_view();
  Domain* domain = nullptr;
  if (request.size() > kDomain) {
    auto it = domains_.find(domain_name);
    if (it != domains_.end()) domain = &it->second;
  }
  ZapAnswer answer;
  answer.verdict = decide(request, domain, now, &answer.user);
  if (!answer.allowed()) {
    answer.user.clear();
    note_refusal(domain, domain_name, answer.verdict);
  }
  answer.reply = {std::string(kZapVersion),
                  std::string(request.size() > kRequestId ? request[kRequestId] : ""),
                  answer.allowed() ? "200" : "400",
                  std::string(status_text(answer.verdict)),
                  answer.user,
                  ""};
  return answer;
}

ZapVerdict ZapHandler::decide(const std::vector<std::string_view>& request, Domain* domain,
                              TimePoint now, std::string* user) {
  if (request.size() <= kMechanism) return ZapVerdict::kMalformed;
  if (request[0] != kZapVersion) return ZapVerdict::kWrongVersion;
  if (request[kMechanism] != "CURVE") return ZapVerdict::kWrongMechanism;
  if (request.size() != kCredentials + 1 || request[kCredentials].size() != kCurveKeyBytes) {
    return ZapVerdict::kMalformed;
  }
  if (domain == nullptr) return ZapVerdict::kUnknownDomain;
  *user = domain->keys->name_of(std::string(request[kCredentials]), now);
  return user->empty() ? ZapVerdict::kUnknownKey : ZapVerdict::kAllowed;
}

void ZapHandler::note_refusal(Domain* domain, std::string_view domain_name, ZapVerdict verdict) {
  std::uint64_t& counted = domain ? domain->refused_here : refused_elsewhere_here_;
  ++*(domain ? domain->refused : refused_elsewhere_);
  // The first refusal, then every 100th (a flood must not fill the log).
  if (++counted % 100 != 1) return;
  if (domain == nullptr) {
    // The name is not logged: it did not come from one of our sockets' settings.
    spdlog::warn("ZAP: refused a handshake outside the known domains: {} ({} refused so far)",
                 status_text(verdict), counted);
  } else if (verdict == ZapVerdict::kUnknownKey) {
    spdlog::warn("ZAP domain {}: refused a CURVE key that is not in {} ({} refused so far)",
                 domain_name, domain->keys_dir, counted);
  } else {
    spdlog::warn("ZAP domain {}: refused a handshake: {} ({} refused so far)", domain_name,
                 status_text(verdict), counted);
  }
}

}  // namespace elastic::transport
