// TempDir: a fresh directory under $TMPDIR (or /tmp) for one test, removed with everything in it
// when the test ends. Header-only so every tier can use it without a library.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace elastic::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "elastic-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // The path of `name` inside the directory (nothing is created).
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string operator/(const std::string& name) const { return file(name); }
  // Lets other users reach `inside` (this directory or a path in it), e.g. a control socket for
  // an elasticctl run as another user: chmods `inside` and every directory between it and this
  // one (directories 0755, anything else 0666), and nothing above. A test never changes what it
  // did not create: walking up to /tmp once left /tmp 0755. The directories above
  // must let others through already (/tmp does); returns the first that does not ("" when all
  // do), for the test to skip with.
  std::string share_with_others(const std::string& inside) const {
    if (inside != path_ && inside.rfind(path_ + "/", 0) != 0) {
      throw std::invalid_argument(inside + " is not inside the test's directory " + path_);
    }
    std::error_code ignored;
    for (std::filesystem::path p = inside;; p = p.parent_path()) {
      ::chmod(p.c_str(), std::filesystem::is_directory(p, ignored) ? 0755 : 0666);
      if (p.string().size() <= path_.size()) break;  // this directory itself: done
    }
    for (std::filesystem::path p = std::filesystem::path(path_).parent_path();;
         p = p.parent_path()) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) return p.string();
      if (p == p.root_path()) return "";
    }
  }

  // Writes `content` to `name` inside the directory and returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    const std::string path = file(name);
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }

 private:
  std::string path_;
};

}  // namespace elastic::testing
