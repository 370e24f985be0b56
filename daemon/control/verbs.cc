#include "daemon/control/verbs.h"

#include <algorithm>
#include <array>

namespace elastic::control {
namespace {

constexpr std::array kVerbs = {
    Verb{"submit", Route::kLeader, Caller::kAnyone, "submit jobs"},
    Verb{"status", Route::kLocal, Caller::kAnyone, "read this daemon's status"},
    Verb{"jobs", Route::kLeader, Caller::kAnyone, "list jobs"},
    Verb{"job", Route::kLeader, Caller::kAnyone, "read a job"},
    Verb{"nodes", Route::kLocal, Caller::kAnyone, "list nodes"},
    Verb{"logs", Route::kNode, Caller::kAnyone, "read worker logs"},
    Verb{"log_files", Route::kNode, Caller::kAnyone, "list worker log files"},
    Verb{"cancel", Route::kLeader, Caller::kAnyone, "cancel jobs"},
    Verb{"priority", Route::kLeader, Caller::kAnyone, "change a job's priority"},
    Verb{"suspend", Route::kLeader, Caller::kAnyone, "suspend jobs"},
    Verb{"resume", Route::kLeader, Caller::kAnyone, "resume jobs"},
    Verb{"events", Route::kLeader, Caller::kAnyone, "read events"},
    Verb{"drain", Route::kLeader, Caller::kAdmin, "drain nodes"},
    Verb{"undrain", Route::kLeader, Caller::kAdmin, "undrain nodes"},
    Verb{"drained", Route::kLeader, Caller::kAnyone, "list drained nodes"},
    Verb{"voters", Route::kLeader, Caller::kAnyone, "list the voters"},
    Verb{"topology", Route::kLocal, Caller::kAnyone, "read this host's topology"},
    Verb{"reload", Route::kLocal, Caller::kAdmin, "reload the configuration"},
    Verb{"progress", Route::kLocal, Caller::kWorker, "report a worker's progress"},
};

}  // namespace

std::span<const Verb> verbs() { return kVerbs; }

const Verb* find_verb(std::string_view name) {
  const auto it = std::find_if(kVerbs.begin(), kVerbs.end(),
                               [&](const Verb& verb) { return verb.name == name; });
  return it == kVerbs.end() ? nullptr : &*it;
}

bool is_leader_verb(std::string_view name) {
  const Verb* verb = find_verb(name);
  return verb != nullptr && verb->route == Route::kLeader;
}

std::string unknown_verb_message(std::string_view name) {
  std::string message = "Unknown request \"" + std::string(name) + "\"; this daemon answers ";
  for (std::size_t i = 0; i < kVerbs.size(); ++i) {
    if (i > 0) message += i + 1 == kVerbs.size() ? " and " : ", ";
    message += "\"" + std::string(kVerbs[i].name) + "\"";
  }
  return message + ".";
}

std::string admin_only_message(const Verb& verb) {
  return "Only root or members of control.admin_group may " + std::string(verb.action) + ".";
}

}  // namespace elastic::control
