// libFuzzer target for the control-plane decoders that read untrusted JSON: control requests
// (local socket and remote control) and the typed arguments of every verb
// (daemon/control/requests.h), the nodes/status replies elasticctl decodes, and job specs
// (submit's "spec", daemon/rendezvous/job_spec.h) with their validation and binary encoding.
// Hostile bytes must never crash, throw, hang or allocate without bound; a request or spec that
// decodes must re-encode to one that decodes to the same value. The first byte picks the
// decoder; the rest is the input. (Round reports are MessagePack now: wire_fuzz.cc.) Built with
// clang++
// -fsanitize=fuzzer,address,undefined by tests/fuzz/CMakeLists.txt.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "daemon/control/protocol.h"
#include "daemon/control/requests.h"
#include "daemon/rendezvous/job_spec.h"

namespace {

using namespace elastic;

[[noreturn]] void property_failed(const char* what) {
  std::fprintf(stderr, "round-trip property failed: %s\n", what);
  std::abort();
}

void check_request(const std::string& text) {
  Result<control::Request> request = control::decode_request(text);
  if (!request.ok()) return;
  Result<control::Request> again = control::decode_request(control::encode_request(*request));
  if (!again.ok()) property_failed("a re-encoded request does not decode");
  if (again->verb != request->verb) property_failed("a re-encoded request has another verb");
  // What handlers do next with a request's text: a spec inside it.
  (void)control::pretty_json(request->text);
}

// Every verb's argument decoder on the same text: an Error or a value, never an exception
// (libFuzzer reports an escaping exception as a crash).
void check_request_args(const std::string& text) {
  (void)control::decode_job_request("job", text);
  (void)control::decode_submit_request(text);
  (void)control::decode_events_request(text);
  (void)control::decode_voters_request(text);
  (void)control::decode_drain_request("drain", text);
  (void)control::decode_priority_request(text);
  (void)control::decode_logs_request(text);
  (void)control::decode_log_files_request(text);
}

void check_spec(std::string_view text) {
  Result<rendezvous::JobSpec> spec = rendezvous::job_spec_from_json(text);
  if (!spec.ok()) return;
  (void)rendezvous::is_daemon_owned_env(spec->name);
  Result<rendezvous::JobSpec> again = rendezvous::job_spec_from_json(rendezvous::to_json(*spec));
  if (!again.ok()) property_failed("a re-encoded spec does not decode");
  if (!(*again == *spec)) property_failed("a re-encoded spec decodes to another value");
  // The binary form travels only after validation (job_service validates every submitted spec
  // before it is proposed), and its decoder enforces the same bounds: every spec that validates
  // must survive the round trip; an invalid one (a 300-byte name) may be refused by the decoder.
  if (!rendezvous::validate(*spec).ok()) return;
  Result<rendezvous::JobSpec> binary =
      rendezvous::decode_job_spec(rendezvous::encode_job_spec(*spec));
  if (!binary.ok()) property_failed("a valid spec's binary form does not decode");
  if (!(*binary == *spec)) property_failed("a valid spec's binary round trip differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  // 0-4: requests, specs, replies; 5: every verb's arguments.
  const std::uint8_t selector = data[0] % 6;
  switch (selector) {
    case 0:
      check_request(text);
      break;
    case 1:
      check_spec(text);
      break;
    case 2:
      (void)control::decode_nodes_reply(text);
      break;
    case 3:
      (void)control::decode_status_reply(text);
      break;
    case 4:
      (void)rendezvous::decode_job_spec(text);
      break;
    case 5:
      check_request_args(text);
      break;
  }
  return 0;
}
