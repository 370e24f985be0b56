// `elasticctl top`'s screen, without the terminal: what one refresh read from the daemon
// (TopSample: the replies to the same `status`, `nodes` and `jobs` requests those verbs make),
// the keys the view understands and the frame they give, as plain lines of text. ctl/top.cc is
// the terminal around it (raw mode, escapes, the refresh loop); keeping this part pure lets the
// unit tier check the frame, the sorting and every key without a terminal or a daemon.
//
// The frame: two header lines (cluster, this daemon, the time, the refresh interval; the leader
// and its term, members by state, jobs by state, slots in use), a line per request that failed,
// the NODES table (name, state, Raft part, slots, slots held by jobs, which jobs, drained, last
// heard, address), the JOBS table (id, state, round, nodes, world, restarts, time in its state,
// user, reason), a message line (an unknown key, say) and the keys as the last line. Each table
// is sorted by one of its columns (numbers by value, text in natural order so job-10 follows
// job-9; ties by the first column); its title says which.
//
// Keys (kTopKeysHelp, also in `elasticctl top --help`): q quits; n / j sort the nodes / jobs by
// their next column (wrapping around); N / J reverse that order; r, space or Ctrl-L refresh now.
// Any other key leaves everything as it was and sets one message naming it and the keys.
//
// Thread safety: values, owned by one thread. Replies are read without exceptions (missing or
// mistyped fields show as "-").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace elastic::ctl {

inline constexpr const char* kTopKeysHelp =
    "q quit | n/j sort nodes/jobs by the next column | N/J reverse | r refresh";

// What one refresh read. A reply is the daemon's object; when a request failed, its error is
// the sentence why (and the reply is null). The same requests as `status`, `nodes` and `jobs`.
struct TopSample {
  nlohmann::json status;
  std::string status_error;
  nlohmann::json nodes;
  std::string nodes_error;
  nlohmann::json jobs;
  std::string jobs_error;
  std::int64_t at_ms = 0;  // wall clock when it was read (ms since the epoch)
};

// Raw terminal input split into keys: one byte each, except an escape sequence (ESC [ or ESC O
// up to its final byte, as arrow and function keys send) which is one key.
std::vector<std::string> split_keys(std::string_view input);

class TopView {
 public:
  enum class Action { kNone, kQuit, kRefresh };

  // Applies one key (an element of split_keys()); says what the loop should do.
  Action press(std::string_view key);

  // The frame for `sample`, as lines without newlines. `width` cuts every line to that many
  // bytes and `height` fits the frame in that many lines (the tables give up rows first and say
  // how many they left out); 0 for either means no limit (one frame for a pipe).
  std::vector<std::string> render(const TopSample& sample, std::chrono::milliseconds interval,
                                  std::size_t width, std::size_t height) const;

  // The message line ("" when none): the last key not understood.
  const std::string& message() const { return message_; }

 private:
  struct Sort {
    std::size_t column = 0;
    bool descending = false;
  };
  Sort nodes_;
  Sort jobs_;
  std::string message_;
};

// Natural order: runs of digits compare by value ("job-9" < "job-10"), the rest byte by byte.
bool natural_less(std::string_view a, std::string_view b);

}  // namespace elastic::ctl
