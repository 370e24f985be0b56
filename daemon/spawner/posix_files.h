// Small POSIX file helpers that the spawner's parts share (worker logs, leftover records,
// worker cgroups). Plain functions on paths and descriptors, no state; thread safety is that of
// the system calls. They report errno through `*error` and never throw.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace elastic::spawner {

// strerror(error) as a std::string, for the sentences of Errors and warnings.
std::string errno_text(int error);

// mkdir -p: creates each missing directory of `dir` with mode 0755 and checks that `dir` is a
// directory at the end. "" is nothing to do.
bool make_dirs(const std::string& dir, int* error);

// write() until all `size` bytes are written (retrying EINTR); false with errno set otherwise.
bool write_all(int fd, const char* data, std::size_t size);

// Creates or truncates `path` (0644) and writes `content` into it.
bool write_file(const std::string& path, std::string_view content, int* error);

// Writes "1" to <cgroup>/cgroup.kill, which SIGKILLs every process in the cgroup (kernel
// >= 5.14; on older kernels the file is missing and nothing happens: the process-group kill
// that callers also send still runs).
void cgroup_kill(const std::string& cgroup);

}  // namespace elastic::spawner
