// Worker log files: the file a worker's stdout and stderr go to, and the lines the daemon
// writes into it (see "Logs" in spawner.h for what a user sees).
//
// Contract:
//  - Opening: LogFiles::open(path) creates the parent directories (0755) and the file (0644,
//    O_APPEND), owned by the daemon. Workers whose logs have the same path share one LogFile
//    (one descriptor, one size count, one line state) for as long as any of them holds it.
//  - Rotation: an append that would make the file exceed max_bytes (when the file is not empty)
//    first renames path.(keep-1) -> path.keep ... path.1 -> path.2, path -> path.1 and reopens
//    path; with keep <= 0 the file is truncated instead. One append larger than max_bytes is
//    written in chunks of max_bytes, rotating before each. max_bytes 0 = never rotate. The
//    limits are arguments of each append so that a configuration reload applies at once.
//  - Errors never stop a worker: a failed write drops that output, a failed rotation keeps
//    writing into the file it has; each LogFile warns once in the daemon's log, so a full disk
//    does not flood it.
//  - Stamps: the two line formats live here (daemon_line, output_stamp); where a stamp goes
//    stays with the Spawner (Spawner::write_output, note), because it follows the line state of
//    each writer while at_line_start() here is the shared file's.
//
// Thread safety: none; the Spawner's thread owns its LogFiles and every LogFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace elastic::spawner {

class LogFile {
 public:
  // Takes `fd` (open for appending to `path`, `size` bytes long); closes it when destroyed.
  LogFile(std::string path, int fd, std::uint64_t size);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Appends n bytes, rotating first as the contract says.
  void append(const char* data, std::size_t n, std::uint64_t max_bytes, int keep);
  // The last byte appended (by any writer) ended a line, or nothing was appended yet.
  bool at_line_start() const { return at_line_start_; }

 private:
  void rotate(int keep);
  void warn(const char* what, int error);

  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  bool at_line_start_ = true;
  bool warned_ = false;
};

// The open log files, by path.
class LogFiles {
 public:
  // The LogFile of `path`: the one a worker still holds, or a newly opened one. nullptr with
  // *error set to a sentence without its final period ("opening the log file <path> failed:
  // <strerror>", "creating the log directory <dir> failed: <strerror>").
  std::shared_ptr<LogFile> open(const std::string& path, std::string* error);

 private:
  std::map<std::string, std::weak_ptr<LogFile>> files_;
};

// "[elasticd <UTC time>] <line>\n": a line the daemon writes into a worker's log.
std::string daemon_line(std::string_view line);

// "2026-11-26T21:47:31.123Z ": the wall time, to the millisecond, that starts each line of
// worker output (SpawnerConfig::log_timestamps).
std::string output_stamp();

}  // namespace elastic::spawner
