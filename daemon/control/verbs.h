// The verbs of the control protocol, in one table: each verb's name, where it is served and who
// may call it. The daemon dispatches from it (Node::handle_control), forwards the verbs it names
// as the leader's (is_leader_verb), refuses a non-admin caller of an admin verb before doing
// anything, and names every verb in the answer to an unknown one, so the list cannot drift
// from what is served.
//
// Where a verb is served (Route):
//   kLocal   the daemon that received it answers from its own state
//   kLeader  forwarded to the Raft leader, which answers from the replicated job table (with
//            the caller's uid, gid and admin flag, so the leader applies the same rules)
//   kNode    the node named in the request's "node" field answers (this one when empty)
// Who may call it (Caller):
//   kAnyone  any user of the control socket (and any remote-control client); what the answer
//            shows may still depend on who asks (other users' environments are hidden, logs,
//            cancel, priority, suspend and resume are limited to the job's owner unless the
//            caller is an admin, a priority above limits.priority_ceiling and changing the
//            voters need an admin: those rules sit with the data they protect)
//   kAdmin   root or a member of control.admin_group; anyone else gets admin_only_message()
//            from the daemon that received the request (the leader checks again)
//   kWorker  a process of a job this daemon runs (the supervisor matches the caller's uid to a
//            running worker's)
//
// Thread safety: the table is constant. Errors: none.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace elastic::control {

enum class Route : std::uint8_t { kLocal, kLeader, kNode };
enum class Caller : std::uint8_t { kAnyone, kAdmin, kWorker };

struct Verb {
  std::string_view name;
  Route route;
  Caller caller;
  std::string_view action;  // what it does, as in "may <action>"
};

// Every verb, in the order `elasticctl --help` lists their commands.
std::span<const Verb> verbs();

// The verb called `name`, or nullptr.
const Verb* find_verb(std::string_view name);

// True for the verbs the Raft leader serves (Route::kLeader).
bool is_leader_verb(std::string_view name);

// `Unknown request "x"; this daemon answers "status", "nodes", ... and "reload".`
std::string unknown_verb_message(std::string_view name);

// `Only root or members of control.admin_group may <action>.`
std::string admin_only_message(const Verb& verb);

}  // namespace elastic::control
