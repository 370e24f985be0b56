#include "ctl/top_view.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <set>

#include "ctl/common.h"
#include "daemon/core/duration.h"

namespace elastic::ctl {
namespace {

// One table cell: its text, and its value where the column sorts by number.
struct Cell {
  std::string text;
  std::optional<double> number;
};
using Row = std::vector<Cell>;

struct Table {
  std::vector<std::string> columns;
  std::vector<Row> rows;
};

Cell text_cell(std::string text) { return {std::move(text), std::nullopt}; }

// A JSON number as a cell ("-" and sorted first when absent).
Cell number_cell(const json& j, const char* key) {
  const json& value = member(j, key);
  if (!value.is_number()) return {"-", std::nullopt};
  return {cell(j, key), value.get<double>()};
}

Cell count_cell(std::uint64_t n) { return {std::to_string(n), static_cast<double>(n)}; }

// "850ms", "12s", "3m20s", "2h5m": short, for AGE and LAST-HEARD.
std::string short_duration(double ms) {
  if (ms < 1000) return std::to_string(static_cast<std::int64_t>(ms)) + "ms";
  const auto seconds = static_cast<std::int64_t>(ms / 1000);
  if (seconds < 60) return std::to_string(seconds) + "s";
  if (seconds < 3600)
    return std::to_string(seconds / 60) + "m" + std::to_string(seconds % 60) + "s";
  return std::to_string(seconds / 3600) + "h" + std::to_string(seconds / 60 % 60) + "m";
}

bool is_active(const json& job) { return !is_terminal(str(job, "state")); }

const json& array_of(const json& reply, const char* key) {
  static const json kEmpty = json::array();
  const json& list = member(reply, key);
  return list.is_array() ? list : kEmpty;
}

Table nodes_table(const TopSample& sample) {
  Table table{
      {"NAME", "STATE", "RAFT", "SLOTS", "USED", "JOBS", "DRAINED", "LAST-HEARD", "ADDRESS"}, {}};
  // Slots held per node, and by which jobs, from the ranks of the jobs still running.
  std::map<std::string, std::uint64_t> used;
  std::map<std::string, std::set<std::string, decltype(&natural_less)>> holders;
  for (const json& job : array_of(sample.jobs, "jobs")) {
    if (!is_active(job)) continue;
    for (const json& rank : array_of(job, "ranks")) {
      const std::string node = str(rank, "node");
      used[node] += static_cast<std::uint64_t>(std::max<std::int64_t>(num(rank, "slots"), 0));
      holders.try_emplace(node, &natural_less).first->second.insert(str(job, "id", "?"));
    }
  }
  const std::string self = str(member(sample.nodes, "self"), "name");
  const json& raft = member(sample.status, "consensus");
  const std::string leader = str(raft, "leader");
  std::set<std::string> voters;
  for (const json& voter : array_of(raft, "voters")) {
    if (voter.is_string()) voters.insert(voter.get<std::string>());
  }
  for (const json& m : array_of(sample.nodes, "members")) {
    const std::string name = str(m, "name", "?");
    const bool is_self = name == self;
    // This daemon knows its own role (a candidate, say); of the others only who leads.
    std::string role = "-";
    if (is_self && flag(raft, "voter")) {
      role = str(raft, "role", "voter");
    } else if (name == leader) {
      role = "leader";
    } else if (voters.contains(name)) {
      role = "voter";
    }
    std::string jobs;
    if (const auto it = holders.find(name); it != holders.end()) {
      for (const std::string& id : it->second) jobs += (jobs.empty() ? "" : ",") + id;
    }
    const json& drained = member(m, "drained");
    const double heard = real(m, "last_heard_ms_ago", -1);
    table.rows.push_back({
        {name + (is_self ? " (self)" : ""), std::nullopt},
        text_cell(cell(m, "state")),
        text_cell(role),
        number_cell(m, "slots"),
        count_cell(used[name]),
        text_cell(jobs.empty() ? "-" : jobs),
        text_cell(drained.is_boolean() ? (drained.get<bool>() ? "yes" : "no") : "-"),
        {is_self || heard < 0 ? "-" : short_duration(heard), is_self ? -1 : heard},
        text_cell(cell(m, "address")),
    });
  }
  return table;
}

Table jobs_table(const TopSample& sample) {
  Table table{{"JOB", "STATE", "ROUND", "NODES", "WORLD", "RESTARTS", "AGE", "USER", "REASON"}, {}};
  for (const json& job : array_of(sample.jobs, "jobs")) {
    Cell age{"-", std::nullopt};
    if (member(job, "state_since_ms").is_number() && sample.at_ms > 0) {
      const double ms =
          std::max<double>(static_cast<double>(sample.at_ms - num(job, "state_since_ms")), 0);
      age = {short_duration(ms), ms};
    }
    table.rows.push_back({
        text_cell(cell(job, "id")),
        text_cell(cell(job, "state")),
        number_cell(job, "round"),
        count_cell(nodes_of(job)),
        count_cell(world_of(job)),
        number_cell(job, "restarts"),
        age,
        text_cell(cell(member(job, "spec"), "user")),
        text_cell(cell(job, "reason")),
    });
  }
  return table;
}

// Orders by the column (absent numbers first), ties by the first column, both ascending; then
// reversed as a whole when descending.
void sort_rows(Table& table, std::size_t column, bool descending) {
  const auto less = [column](const Row& a, const Row& b) {
    const Cell& x = a[column];
    const Cell& y = b[column];
    if (x.number.has_value() != y.number.has_value()) return !x.number.has_value();
    if (x.number && *x.number != *y.number) return *x.number < *y.number;
    if (!x.number && x.text != y.text) return natural_less(x.text, y.text);
    return natural_less(a[0].text, b[0].text);
  };
  std::stable_sort(table.rows.begin(), table.rows.end(), less);
  if (descending) std::reverse(table.rows.begin(), table.rows.end());
}

// The table's lines: its header and then `shown` of its rows (all when it has no more), the
// last of them replaced by a count of those left out when some are.
std::vector<std::string> table_lines(const Table& table, std::size_t shown) {
  std::vector<std::vector<std::string>> cells = {table.columns};
  for (const Row& row : table.rows) {
    std::vector<std::string> texts;
    for (const Cell& c : row) texts.push_back(c.text);
    cells.push_back(std::move(texts));
  }
  std::vector<std::string> lines = format_table(cells);
  if (shown < table.rows.size()) {
    const std::size_t kept = shown == 0 ? 0 : shown - 1;
    lines.resize(1 + kept);
    lines.push_back("... " + std::to_string(table.rows.size() - kept) +
                    " more (a taller terminal shows them)");
  }
  return lines;
}

std::string sort_title(const char* name, const Table& table, std::size_t column, bool descending) {
  return std::string(name) + " (" + std::to_string(table.rows.size()) + ")  sorted by " +
         table.columns[column] + (descending ? ", descending" : ", ascending");
}

std::string clock_time(std::int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(std::max<std::int64_t>(ms, 0) / 1000);
  std::tm parts{};
  ::localtime_r(&seconds, &parts);
  char text[16];
  std::strftime(text, sizeof(text), "%H:%M:%S", &parts);
  return text;
}

std::vector<std::string> header_lines(const TopSample& sample, std::chrono::milliseconds interval,
                                      const Table& nodes) {
  const json& self = member(sample.status, "self");
  const json& raft = member(sample.status, "consensus");
  const json& members = member(sample.status, "members");
  std::string first = "elasticctl top  cluster " + str(self, "cluster_id", "?") + "  via " +
                      str(self, "name", "?") + "  " + clock_time(sample.at_ms) + "  every " +
                      format_duration(interval);
  std::string leader = str(raft, "leader");
  std::string second = "leader " + (leader.empty() ? std::string("none") : leader);
  if (member(raft, "term").is_number()) second += " (term " + cell(raft, "term") + ")";
  if (members.is_object()) {
    second += "  members " + cell(members, "alive") + " alive, " + cell(members, "suspect") +
              " suspect, " + cell(members, "dead") + " dead, " + cell(members, "left") + " left";
  }
  if (sample.jobs.is_object()) {
    std::map<std::string, std::size_t> by_state;
    for (const json& job : array_of(sample.jobs, "jobs")) ++by_state[str(job, "state", "?")];
    std::string states;
    for (const auto& [state, count] : by_state) {
      states += (states.empty() ? "" : ", ") + std::to_string(count) + " " + state;
    }
    second += "  jobs " + (states.empty() ? std::string("none") : states);
  }
  if (!nodes.rows.empty()) {
    double slots = 0, used = 0;
    for (const Row& row : nodes.rows) {
      slots += row[3].number.value_or(0);
      used += row[4].number.value_or(0);
    }
    second += "  slots " + std::to_string(static_cast<std::int64_t>(used)) + "/" +
              std::to_string(static_cast<std::int64_t>(slots)) + " used";
  }
  std::vector<std::string> lines = {first, second};
  const std::pair<const char*, const std::string*> errors[] = {{"status", &sample.status_error},
                                                               {"nodes", &sample.nodes_error},
                                                               {"jobs", &sample.jobs_error}};
  for (const auto& [what, error] : errors) {
    if (!error->empty()) lines.push_back(std::string(what) + ": " + *error);
  }
  return lines;
}

// The name of a key for a message: printable as itself, control bytes as ^X, the rest in hex.
std::string key_name(std::string_view key) {
  std::string name;
  for (unsigned char c : key) {
    if (c == 0x1b) {
      name += "ESC";
    } else if (c < 0x20 || c == 0x7f) {
      name += '^';
      name += static_cast<char>(c ^ 0x40);
    } else if (c < 0x7f) {
      name += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      name += hex;
    }
  }
  return name;
}

}  // namespace

bool natural_less(std::string_view a, std::string_view b) {
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      std::size_t i_end = i, j_end = j;
      while (i_end < a.size() && is_digit(a[i_end])) ++i_end;
      while (j_end < b.size() && is_digit(b[j_end])) ++j_end;
      // Without leading zeros, a longer run is a larger number; equal lengths compare as text.
      std::string_view x = a.substr(i, i_end - i), y = b.substr(j, j_end - j);
      while (x.size() > 1 && x.front() == '0') x.remove_prefix(1);
      while (y.size() > 1 && y.front() == '0') y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i_end;
      j = j_end;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    ++i;
    ++j;
  }
  if ((a.size() - i) != (b.size() - j)) return a.size() - i < b.size() - j;
  return a < b;  // equal but for leading zeros: still a strict order
}

std::vector<std::string> split_keys(std::string_view input) {
  std::vector<std::string> keys;
  std::size_t i = 0;
  while (i < input.size()) {
    std::size_t end = i + 1;
    if (input[i] == '\x1b' && end < input.size() && (input[end] == '[' || input[end] == 'O')) {
      // CSI and SS3 sequences end at a byte in 0x40..0x7e after their introducer.
      ++end;
      while (end < input.size() && !(input[end] >= 0x40 && input[end] <= 0x7e)) ++end;
      end = std::min(end + 1, input.size());
    }
    keys.emplace_back(input.substr(i, end - i));
    i = end;
  }
  return keys;
}

TopView::Action TopView::press(std::string_view key) {
  constexpr std::size_t kNodeColumns = 9;
  constexpr std::size_t kJobColumns = 9;
  message_.clear();
  if (key == "q" || key == "Q") return Action::kQuit;
  if (key == "r" || key == " " || key == "\x0c") return Action::kRefresh;
  if (key == "n") {
    nodes_.column = (nodes_.column + 1) % kNodeColumns;
  } else if (key == "N") {
    nodes_.descending = !nodes_.descending;
  } else if (key == "j") {
    jobs_.column = (jobs_.column + 1) % kJobColumns;
  } else if (key == "J") {
    jobs_.descending = !jobs_.descending;
  } else {
    message_ = "unknown key " + key_name(key) + " (keys: " + kTopKeysHelp + ")";
  }
  return Action::kNone;
}

std::vector<std::string> TopView::render(const TopSample& sample,
                                         std::chrono::milliseconds interval, std::size_t width,
                                         std::size_t height) const {
  Table nodes = nodes_table(sample);
  Table jobs = jobs_table(sample);
  sort_rows(nodes, nodes_.column, nodes_.descending);
  sort_rows(jobs, jobs_.column, jobs_.descending);

  std::vector<std::string> lines = header_lines(sample, interval, nodes);
  // Header, then per table a blank line, its title and its column names; then the message
  // and the keys.
  const std::size_t fixed = lines.size() + 2 * 3 + 2;
  std::size_t node_rows = nodes.rows.size();
  std::size_t job_rows = jobs.rows.size();
  if (height > 0) {
    const std::size_t room = height > fixed ? height - fixed : 0;
    // Each table gets half the room, and what the other leaves of its half.
    node_rows = std::min(node_rows, std::max(room / 2, room - std::min(room, job_rows)));
    job_rows = std::min(job_rows, room - node_rows);
  }
  lines.push_back("");
  lines.push_back(sort_title("NODES", nodes, nodes_.column, nodes_.descending));
  for (std::string& line : table_lines(nodes, node_rows)) lines.push_back(std::move(line));
  lines.push_back("");
  lines.push_back(sort_title("JOBS", jobs, jobs_.column, jobs_.descending));
  for (std::string& line : table_lines(jobs, job_rows)) lines.push_back(std::move(line));
  if (height > 0) {
    // Padded or cut so that the keys stay on the terminal's last line.
    lines.resize(height - std::min<std::size_t>(height, 2));
  }
  lines.push_back(message_);
  lines.push_back(std::string("keys: ") + kTopKeysHelp);
  if (width > 0) {
    for (std::string& line : lines) {
      if (line.size() > width) line.resize(width);
    }
  }
  if (height > 0 && lines.size() > height) lines.erase(lines.begin(), lines.end() - height);
  return lines;
}

}  // namespace elastic::ctl
