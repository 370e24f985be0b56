// ZapHandler: the answers to ZAP requests (ZeroMQ RFC 27, the ZeroMQ Authentication Protocol)
// for the transport's CURVE server sockets, as logic without sockets: a request's frames in, a
// decision and the reply's frames out. The transport owns the ZAP socket (a REP bound to
// inproc://zeromq.zap.01 in its private context), reads each request, calls answer() and sends
// answer().reply back; libzmq then completes or refuses the handshake it had paused.
//
// A request is [version, request id, domain, address, identity, mechanism, credentials...].
// Each server socket names its domain (ZMQ_ZAP_DOMAIN); add_domain() says whose keys that
// domain accepts. It accepts (status "200", the key's name as the user id, which libzmq
// attaches to every message of that connection as "User-Id") only a request with version "1.0",
// mechanism "CURVE" with exactly one credentials frame holding a 32-byte public key, of an
// added domain, whose ZapKeys name that key. It refuses (status "400", empty user id) anything
// else: fewer than six frames or a CURVE request without exactly one 32-byte key (malformed),
// another version, another mechanism (NULL, PLAIN), a domain nobody added, a key its domain's
// ZapKeys do not name. Every reply echoes the request id (empty when the request has none) so
// libzmq can match it. answer() never throws or reads past a frame, whatever the bytes.
//
// Counts: each refusal adds one to the counter of the domain it named (add_domain), or to the
// constructor's counter when it named no added domain or had too few frames to name one; and
// logs it, the first refusal per counter and then every 100th, so a flood cannot fill the log.
// Thread safety: none; the transport's thread owns the handler, its ZapKeys and its counters.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/time.h"

namespace elastic::transport {

inline constexpr std::string_view kZapVersion = "1.0";
inline constexpr std::size_t kCurveKeyBytes = 32;

// Who a ZAP domain's CURVE keys belong to (an allow-list, allow_lists.h).
class ZapKeys {
 public:
  virtual ~ZapKeys() = default;
  // The name a raw 32-byte public key speaks for, or "" when it is not allowed. `now` says when
  // the list may be read again.
  virtual std::string name_of(const std::string& raw_key, TimePoint now) = 0;
};

enum class ZapVerdict {
  kAllowed,
  kMalformed,       // too few frames, or not exactly one 32-byte CURVE key
  kWrongVersion,    // not "1.0"
  kWrongMechanism,  // not CURVE
  kUnknownDomain,   // no add_domain() for it
  kUnknownKey,      // the domain's keys do not name it
};

struct ZapAnswer {
  ZapVerdict verdict = ZapVerdict::kMalformed;
  std::string user;  // the key's name when allowed, else ""
  // [version, request id, status code, status text, user id, metadata]
  std::array<std::string, 6> reply;

  bool allowed() const { return verdict == ZapVerdict::kAllowed; }
};

class ZapHandler {
 public:
  // Refusals that name no added domain count in `*refused_elsewhere`, which must outlive the
  // handler.
  explicit ZapHandler(std::uint64_t* refused_elsewhere) : refused_elsewhere_{refused_elsewhere} {}

  // Requests of `domain` are answered from `keys`; each refusal adds one to `*refused`. `keys`
  // and `refused` are not owned and must outlive the handler; `keys_dir` names where the keys
  // live in the log line about refusals. Adding a domain again replaces it.
  void add_domain(std::string domain, ZapKeys* keys, std::uint64_t* refused, std::string keys_dir);

  ZapAnswer answer(const std::vector<std::string_view>& request, TimePoint now);

 private:
  struct Domain {
    ZapKeys* keys;
    std::uint64_t* refused;
    std::string keys_dir;
    std::uint64_t refused_here = 0;  // for the 1-in-100 log line
  };
  ZapVerdict decide(const std::vector<std::string_view>& request, Domain* domain, TimePoint now,
                    std::string* user);
  void note_refusal(Domain* domain, std::string_view domain_name, ZapVerdict verdict);

  std::map<std::string, Domain, std::less<>> domains_;
  std::uint64_t* refused_elsewhere_;
  std::uint64_t refused_elsewhere_here_ = 0;
};

}  // namespace elastic::transport
