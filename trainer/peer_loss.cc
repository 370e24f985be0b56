#include "trainer/peer_loss.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace elastic::trainer {

bool says_a_peer_was_lost(std::string_view what) {
  // Gloo's transport (tcp/pair.cc), c10d's TCPStore and socket layer, and the strerror() texts
  // they append. "timed out"/"timeout": every wait of a collective or the store is bounded by
  // --timeout, and a peer that stopped answering is what exhausts it.
  static constexpr std::string_view kPhrases[] = {
      "connection closed", "connection reset", "connection refused",  "connection aborted",
      "broken pipe",       "socket closed",    "unexpectedly closed", "closed by peer",
      "timed out",         "timeout",          "no route to host",    "network is unreachable",
      "host is down",      "failed to recv",   "failed to send",      "got 0 bytes",
  };
  std::string lower(what);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::any_of(std::begin(kPhrases), std::end(kPhrases), [&](std::string_view phrase) {
    return lower.find(phrase) != std::string::npos;
  });
}

}  // namespace elastic::trainer
