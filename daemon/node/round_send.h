// RoundSend: one message out of a half of round handling (round_leader.h, round_member.h).
//
// `to` names a daemon. When it names the daemon itself, the message is for its other half
// (the leader half's RoundStart or lease grant for its own member half, the member half's
// report or lease request for its own leader half): RoundService (round_service.h) hands it
// over before the next message of the same batch, as the one-object service used to call
// itself, so the order of what leaves the daemon stays the same. Every other message goes to
// the transport.
#pragma once

#include <optional>
#include <string>

#include "daemon/node/round_report.h"
#include "daemon/wire/messages.h"

namespace elastic::node {

struct RoundSend {
  std::string to;
  std::string address;  // where `to` is reached; "" = its last known address
  wire::Envelope envelope;
  // Set instead of `envelope` for the member half's report to its own leader half: handed over
  // as it is (encoding and decoding it again would bound its texts as a peer's report is).
  std::optional<RoundReport> report;
};

}  // namespace elastic::node
