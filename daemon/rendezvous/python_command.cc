#include "daemon/rendezvous/python_command.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

namespace elastic::rendezvous {

namespace {

// Interpreter flags that take no value and do not change what runs (see the header).
constexpr std::array<std::string_view, 15> kPlainFlags = {
    "-b", "-bb", "-B", "-d", "-E", "-I", "-O", "-OO", "-P", "-q", "-s", "-S", "-u", "-v", "-vv"};

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

}  // namespace

bool is_python_interpreter(const std::string& program) {
  const auto slash = program.rfind('/');
  std::string_view name = program;
  if (slash != std::string::npos) name.remove_prefix(slash + 1);
  if (name.rfind("python", 0) != 0) return false;
  name.remove_prefix(6);
  if (name.empty()) return true;
  const auto dot = name.find('.');
  if (dot == std::string_view::npos) return all_digits(name);
  return all_digits(name.substr(0, dot)) && all_digits(name.substr(dot + 1));
}

Result<PythonCommand> parse_python_command(const std::vector<std::string>& command) {
  if (command.empty() || !is_python_interpreter(command[0])) {
    return Error{
        "the command must start with a Python interpreter (python, python3, "
        "python3.11 or a path to one), not " +
        (command.empty() ? std::string("nothing") : "'" + command[0] + "'")};
  }
  PythonCommand out;
  out.interpreter.push_back(command[0]);
  std::size_t i = 1;
  for (; i < command.size(); ++i) {
    const std::string& arg = command[i];
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") break;
    if (std::find(kPlainFlags.begin(), kPlainFlags.end(), arg) != kPlainFlags.end()) {
      out.interpreter.push_back(arg);
      continue;
    }
    if (arg == "-X" || arg == "-W") {
      if (i + 1 >= command.size()) return Error{"the interpreter option " + arg + " needs a value"};
      out.interpreter.push_back(arg);
      out.interpreter.push_back(command[++i]);
      continue;
    }
    if (arg.rfind("-X", 0) == 0 || arg.rfind("-W", 0) == 0) {
      out.interpreter.push_back(arg);
      continue;
    }
    if (arg == "-m") {
      if (i + 1 >= command.size() || command[i + 1].empty()) {
        return Error{"-m needs a module name"};
      }
      out.module = true;
      out.target = command[i + 1];
      out.args.assign(command.begin() + static_cast<std::ptrdiff_t>(i) + 2, command.end());
      return out;
    }
    if (arg.rfind("-m", 0) == 0) {  // -mMODULE
      out.module = true;
      out.target = arg.substr(2);
      out.args.assign(command.begin() + static_cast<std::ptrdiff_t>(i) + 1, command.end());
      return out;
    }
    return Error{"the interpreter option '" + arg +
                 "' is not one a warm interpreter can take (a script or -m MODULE must follow "
                 "only flags like -u, -O, -X VALUE or -W VALUE)"};
  }
  if (i < command.size() && command[i] == "--") ++i;
  if (i >= command.size() || command[i].empty() || command[i] == "-") {
    return Error{"the command must name a script or -m MODULE after the interpreter"};
  }
  out.target = command[i];
  out.args.assign(command.begin() + static_cast<std::ptrdiff_t>(i) + 1, command.end());
  return out;
}

}  // namespace elastic::rendezvous
