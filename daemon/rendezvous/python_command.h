// python_command: what a job's command means when it runs a Python interpreter, for warm
// interpreters (JobSpec::warm). A warm slot keeps an interpreter started with the command's
// interpreter and options, torch imported, waiting; the next round hands it what the command
// would have run. So the command must have one of these shapes:
//   <python> [OPTION...] SCRIPT [ARG...]
//   <python> [OPTION...] -m MODULE [ARG...]
// where <python> is a path or name whose last component is python, pythonN or pythonN.M
// (a venv's bin/python3 qualifies), and OPTION is one of the interpreter flags that take no
// value (-b -bb -B -d -E -I -O -OO -P -q -s -S -u -v -vv) or -X VALUE / -W VALUE (also written
// -XVALUE, -WVALUE); "--" may end the options. Anything else (-c CODE, "-" for stdin, -x, flags
// this parser does not know) is refused with a sentence that says why; such a command still
// runs, only not with warm = true.
//
// Pure functions on values; no file is looked at (the script's existence is the worker's
// business, as for a cold start).
#pragma once

#include <string>
#include <vector>

#include "daemon/core/result.h"

namespace elastic::rendezvous {

struct PythonCommand {
  std::vector<std::string> interpreter;  // <python> and its options, as given
  bool module = false;                   // -m MODULE (else a script path)
  std::string target;                    // the script path or the module name
  std::vector<std::string> args;         // what follows the target
};

// The command split as above, or an Error naming what does not fit (one sentence).
Result<PythonCommand> parse_python_command(const std::vector<std::string>& command);

// Whether the last path component of `program` names a Python interpreter.
bool is_python_interpreter(const std::string& program);

}  // namespace elastic::rendezvous
