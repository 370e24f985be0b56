// The seed files of a fuzzer's corpus generator: seed-0, seed-1, ... in the directory its one
// argument names, each the selector byte its fuzzer reads first and then the input.
// Header-only. Errors: a wrong command line is reported on stderr (exit code 64).
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

namespace elastic::fuzz {

class SeedWriter {
 public:
  // False (after a usage line on stderr) unless the command line is `<program> <dir>`.
  bool open(int argc, char** argv) {
    if (argc != 2) {
      std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
      return false;
    }
    dir_ = argv[1];
    return true;
  }
  void write(char selector, const std::string& body) {
    std::ofstream out(dir_ + "/seed-" + std::to_string(n_++), std::ios::binary);
    out << selector << body;
  }

 private:
  std::string dir_;
  int n_ = 0;
};

}  // namespace elastic::fuzz
