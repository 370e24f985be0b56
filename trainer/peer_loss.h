// Which failures of a distributed run mean "a peer or the store is gone", so the trainer exits
// 69 (README: "store, peer or collective failure") for every one of them, never 1.
//
// A peer that dies mid-collective shows up in a survivor in many forms, depending on where the
// kill lands: Gloo's transport raises gloo::IoException ("Connection closed by peer", "Read
// error ...: Connection reset by peer", "writev ...: Broken pipe", "Read timeout", "Timed out
// waiting ... for recv operation to complete"), which ProcessGroupGloo's wait() rethrows as it
// is (not as a c10::Error); c10d's store and NCCL raise c10::Error. main.cc maps the exception
// types it knows to 69 and asks this function about the text of any other exception, so a
// lost peer is classified by what it says, whichever library said it.
//
// Pure and LibTorch-free (unit-tested without LibTorch). Thread safety: none needed.
#pragma once

#include <string_view>

namespace elastic::trainer {

// Whether `what` (an exception's message) says a connection to a peer or the store was lost,
// reset, refused or timed out. Case-insensitive; false for anything else (a shape mismatch, an
// allocation failure, a bug).
bool says_a_peer_was_lost(std::string_view what);

}  // namespace elastic::trainer
