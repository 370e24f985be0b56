// python_command: which commands a warm interpreter can run, and how they split into the
// interpreter, the script or module, and its arguments.
#include "daemon/rendezvous/python_command.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/result_assertions.h"

namespace elastic::rendezvous {
namespace {

using Args = std::vector<std::string>;

TEST(PythonCommandTest, InterpreterNames) {
  for (const char* yes : {"python", "python3", "python3.11", "/usr/bin/python3",
                          "/home/a/venv/bin/python", "./python3.12"}) {
    EXPECT_TRUE(is_python_interpreter(yes)) << yes;
  }
  for (const char* no : {"", "py", "python3-config", "pythonw", "python3.", "python.3",
                         "/usr/bin/ipython", "torchrun", "/opt/python3/bin/env"}) {
    EXPECT_FALSE(is_python_interpreter(no)) << no;
  }
}

TEST(PythonCommandTest, ScriptsAndModulesSplit) {
  struct Case {
    Args command;
    Args interpreter;
    bool module;
    std::string target;
    Args args;
  };
  const std::vector<Case> cases = {
      {{"python3", "train.py"}, {"python3"}, false, "train.py", {}},
      {{"/v/bin/python", "-u", "-O", "t.py", "--lr", "-3"},
       {"/v/bin/python", "-u", "-O"},
       false,
       "t.py",
       {"--lr", "-3"}},
      {{"python3", "-X", "faulthandler", "-W", "ignore", "t.py", "-m", "x"},
       {"python3", "-X", "faulthandler", "-W", "ignore"},
       false,
       "t.py",
       {"-m", "x"}},
      {{"python3", "-Xdev", "-Wignore", "t.py"},
       {"python3", "-Xdev", "-Wignore"},
       false,
       "t.py",
       {}},
      {{"python3", "-m", "pkg.train", "--x", "1"}, {"python3"}, true, "pkg.train", {"--x", "1"}},
      {{"python3", "-u", "-mtrain"}, {"python3", "-u"}, true, "train", {}},
      {{"python3", "--", "-odd.py", "a"}, {"python3"}, false, "-odd.py", {"a"}},
  };
  for (const Case& c : cases) {
    Result<PythonCommand> got = parse_python_command(c.command);
    ASSERT_OK(got);
    EXPECT_EQ(got->interpreter, c.interpreter) << c.command[1];
    EXPECT_EQ(got->module, c.module) << c.command[1];
    EXPECT_EQ(got->target, c.target) << c.command[1];
    EXPECT_EQ(got->args, c.args) << c.command[1];
  }
}

TEST(PythonCommandTest, WhatAWarmInterpreterCannotRunIsNamed) {
  const std::vector<std::pair<Args, std::string>> cases = {
      {{},
       "the command must start with a Python interpreter (python, python3, python3.11 or a "
       "path to one), not nothing"},
      {{"bash", "t.py"},
       "the command must start with a Python interpreter (python, python3, "
       "python3.11 or a path to one), not 'bash'"},
      {{"python3"}, "the command must name a script or -m MODULE after the interpreter"},
      {{"python3", "-u"}, "the command must name a script or -m MODULE after the interpreter"},
      {{"python3", "-"}, "the command must name a script or -m MODULE after the interpreter"},
      {{"python3", "-m"}, "-m needs a module name"},
      {{"python3", "-X"}, "the interpreter option -X needs a value"},
      {{"python3", "-c", "print(1)"},
       "the interpreter option '-c' is not one a warm interpreter can take (a script or -m "
       "MODULE must follow only flags like -u, -O, -X VALUE or -W VALUE)"},
      {{"python3", "-x", "t.py"},
       "the interpreter option '-x' is not one a warm interpreter can take (a script or -m "
       "MODULE must follow only flags like -u, -O, -X VALUE or -W VALUE)"},
  };
  for (const auto& [command, message] : cases) {
    Result<PythonCommand> got = parse_python_command(command);
    ASSERT_FALSE(got.ok()) << (command.empty() ? "" : command.back());
    EXPECT_EQ(got.error().message, message);
  }
}

}  // namespace
}  // namespace elastic::rendezvous
