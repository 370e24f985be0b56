#include "daemon/rendezvous/placeholders.h"

namespace elastic::rendezvous {
namespace {

constexpr const char* kKnown =
    "the placeholders are {job_id}, {checkpoint_dir} and {round}; write {{ and }} for literal "
    "braces";

// A name from user text, printable and bounded (a hostile 16 KiB "{...}" stays one line).
std::string shown_name(std::string_view name) {
  constexpr std::size_t kShown = 64;
  std::string out;
  for (char c : name.substr(0, kShown)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (name.size() > kShown) out += "...";
  return out;
}

// One pass over `text`: checks it and, when `values` is given, writes the expansion to *out.
// Returns the problem ("" = none).
std::string scan(std::string_view text, const PlaceholderValues* values, std::string* out) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '}') {
      if (i + 1 < text.size() && text[i + 1] == '}') {
        ++i;
        if (out != nullptr) *out += '}';
        continue;
      }
      return std::string("has a } that closes no placeholder (") + kKnown + ")";
    }
    if (c != '{') {
      if (out != nullptr) *out += c;
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '{') {
      ++i;
      if (out != nullptr) *out += '{';
      continue;
    }
    const std::size_t close = text.find('}', i + 1);
    if (close == std::string_view::npos) {
      return std::string("has a { that is never closed (") + kKnown + ")";
    }
    const std::string_view name = text.substr(i + 1, close - i - 1);
    if (name != "job_id" && name != "checkpoint_dir" && name != "round") {
      return "uses {" + shown_name(name) + "}, which is not a placeholder (" + kKnown + ")";
    }
    i = close;
    if (values == nullptr) continue;
    if (name == "job_id") {
      *out += values->job_id;
    } else if (name == "round") {
      *out += std::to_string(values->round);
    } else if (values->checkpoint_dir) {
      *out += *values->checkpoint_dir;
    } else {
      return "uses {checkpoint_dir}, but neither the job's checkpoint_root nor this node's "
             "checkpoint.root is set";
    }
  }
  return "";
}

}  // namespace

std::string placeholder_problem(std::string_view text) {
  if (text.find_first_of("{}") == std::string_view::npos) return "";
  return scan(text, nullptr, nullptr);
}

Result<std::string> expand_placeholders(std::string_view text, const PlaceholderValues& values) {
  std::string out;
  out.reserve(text.size());
  if (std::string problem = scan(text, &values, &out); !problem.empty()) {
    return Error{std::move(problem)};
  }
  return out;
}

Result<JobText> expand_job_text(const JobSpec& spec, const PlaceholderValues& values) {
  JobText text;
  for (std::size_t i = 0; i < spec.command.size(); ++i) {
    if (i == 0) {
      text.command.push_back(spec.command[0]);
      continue;
    }
    Result<std::string> arg = expand_placeholders(spec.command[i], values);
    if (!arg.ok()) return Error{"argument " + std::to_string(i) + " " + arg.error().message};
    text.command.push_back(std::move(*arg));
  }
  for (const auto& [name, value] : spec.env) {
    Result<std::string> expanded = expand_placeholders(value, values);
    if (!expanded.ok()) return Error{"the value of " + name + " " + expanded.error().message};
    text.env.emplace(name, std::move(*expanded));
  }
  return text;
}

}  // namespace elastic::rendezvous
