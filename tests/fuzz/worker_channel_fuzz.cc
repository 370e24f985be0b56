// libFuzzer target for the worker channel (daemon/worker_channel/messages.h, worker_link.h):
// the bytes a worker writes into its channel, split into reads at points the input chooses,
// through FrameReader and decode_worker_message into a WorkerLink, as the daemon's endpoint
// does; and the daemon's messages as a worker decodes them. Hostile bytes must never crash,
// throw, hang or allocate without bound; a message that decodes must re-encode to one that
// decodes to the same value. The first byte picks the direction; the rest is the input.
// Built with clang++ -fsanitize=fuzzer,address,undefined by tests/fuzz/CMakeLists.txt.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "daemon/worker_channel/messages.h"
#include "daemon/worker_channel/worker_link.h"

namespace {

using namespace elastic;
using namespace elastic::worker_channel;

[[noreturn]] void property_failed(const char* what) {
  std::fprintf(stderr, "property failed: %s\n", what);
  std::abort();
}

bool same(const WorkerMessage& a, const WorkerMessage& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<Hello>(&a)) {
    const auto& y = std::get<Hello>(b);
    return x->version == y.version && x->live == y.live;
  }
  if (const auto* x = std::get_if<Joined>(&a)) {
    const auto& y = std::get<Joined>(b);
    return x->round == y.round && x->term == y.term;
  }
  if (const auto* x = std::get_if<Alive>(&a)) {
    const auto& y = std::get<Alive>(b);
    return x->step == y.step && x->idle_ms == y.idle_ms && x->waiting == y.waiting;
  }
  return std::get<UnknownMessage>(a).type == std::get<UnknownMessage>(b).type;
}

// The worker's byte stream, read in pieces whose sizes come from the input itself (each
// piece's first byte), as a socket may deliver it.
void check_worker_stream(std::string_view bytes) {
  FrameReader reader;
  WorkerLink link(TimePoint{});
  TimePoint t{};
  RoundOffer round;
  round.job = "j";
  round.master_addr = "h";
  round.master_port = 1;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t piece =
        std::min<std::size_t>(bytes.size() - at, 1 + static_cast<unsigned char>(bytes[at]) % 64);
    reader.append(bytes.data() + at, piece);
    at += piece;
    t += std::chrono::milliseconds(1);
    while (true) {
      Result<std::optional<std::string>> frame = reader.next();
      if (!frame.ok()) {
        (void)describe(link.on_bad_frame(t, frame.error().message));
        break;
      }
      if (!frame->has_value()) break;
      if (reader.buffered() > 4 + kMaxFrameBytes + 64) property_failed("the reader holds too much");
      Result<WorkerMessage> message = decode_worker_message(**frame);
      if (!message.ok()) {
        (void)describe(link.on_bad_frame(t, message.error().message));
        continue;
      }
      Result<WorkerMessage> again = decode_worker_message(encode(*message));
      if (!again.ok()) property_failed("a re-encoded worker message does not decode");
      if (!same(*message, *again)) property_failed("a re-encoded worker message differs");
      (void)describe(link.on_message(t, *message));
      // Hostile steps and idle times through hang detection's arithmetic (UBSan: no overflow).
      if (const auto& liveness = link.liveness()) {
        (void)hang_reason(*liveness, hang_timeout(*liveness, Duration::zero()), t);
        (void)hang_due(*liveness, std::chrono::seconds(5));
      }
      // The daemon's side of the exchange, so every state sees hostile input.
      if (link.live()) {
        round.round += 1;
        (void)link.offer(t, round, std::chrono::milliseconds(5));
      }
      if (auto due = link.tick(t)) (void)describe(*due);
    }
  }
  (void)link.on_closed(t);
}

void check_daemon_message(std::string_view text) {
  Result<DaemonMessage> message = decode_daemon_message(text);
  if (!message.ok()) return;
  Result<DaemonMessage> again = decode_daemon_message(encode(*message));
  if (!again.ok()) property_failed("a re-encoded daemon message does not decode");
  if (encode(*again) != encode(*message)) property_failed("a re-encoded daemon message differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    check_worker_stream(rest);
  } else {
    check_daemon_message(rest);
  }
  return 0;
}
