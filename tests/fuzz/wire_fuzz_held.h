// The round a member holds when the wire fuzzer reads RoundStart bodies in the delta form
// (daemon/node/round_codec.h): the corpus writer makes its delta start against this round, and
// the fuzzer resolves every body against it, so mutations of a readable delta are explored.
#pragma once

#include "daemon/node/round_codec.h"

inline elastic::node::HeldRound fuzz_held_round() {
  elastic::node::HeldRound held;
  held.round = 2;
  held.ranks = {{"n1", 1, 1, 0}, {"n2", 3, 2, 1}};
  held.spec.name = "fmnist";
  held.spec.command = {"elastic-trainer", "--model", "fmnist"};
  held.spec_digest = elastic::node::spec_digest(held.spec);
  return held;
}
