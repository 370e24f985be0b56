#include "trainer/data/idx_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace elastic::data {
namespace {

constexpr std::uint8_t kTypeUnsignedByte = 0x08;
constexpr int kMaxDims = 4;
constexpr std::int64_t kMaxValues = std::int64_t{1} << 32;  // no real IDX file is bigger

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

Status read_exact(gzFile file, const std::string& path, void* out, std::size_t n,
                  const char* what) {
  auto* p = static_cast<unsigned char*>(out);
  std::size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
    const int got = gzread(file, p + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(file, &errnum);
      return Error{path + ": cannot read " + what + ": " +
                   (errnum == Z_ERRNO ? std::strerror(errno) : msg)};
    }
    if (got == 0) {
      return Error{path + ": file ends early while reading " + what + " (" + std::to_string(done) +
                   " of " + std::to_string(n) + " bytes)"};
    }
    done += static_cast<std::size_t>(got);
  }
  return ok_status();
}

}  // namespace

Result<IdxArray> read_idx(const std::string& path) {
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) return Error{path + ": cannot open: " + std::strerror(errno)};
  unsigned char magic[4];
  if (auto s = read_exact(file.get(), path, magic, sizeof magic, "the IDX header"); !s) {
    return s.error();
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return Error{path + ": not an IDX file (the magic number must start with two zero bytes)"};
  }
  if (magic[2] != kTypeUnsignedByte) {
    return Error{path + ": IDX element type " + std::to_string(magic[2]) +
                 " is not supported (only unsigned bytes, type 8)"};
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > kMaxDims) {
    return Error{path + ": IDX file has " + std::to_string(ndims) + " dimensions (1 to " +
                 std::to_string(kMaxDims) + " supported)"};
  }
  IdxArray array;
  std::int64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    unsigned char be[4];
    if (auto s = read_exact(file.get(), path, be, sizeof be, "the IDX dimensions"); !s) {
      return s.error();
    }
    const std::int64_t dim = (std::int64_t{be[0]} << 24) | (std::int64_t{be[1]} << 16) |
                             (std::int64_t{be[2]} << 8) | std::int64_t{be[3]};
    total *= dim;
    if (dim == 0 || total > kMaxValues) {
      return Error{path + ": IDX dimension " + std::to_string(i) + " has an implausible size " +
                   std::to_string(dim)};
    }
    array.dims.push_back(dim);
  }
  array.values.resize(static_cast<std::size_t>(total));
  if (auto s = read_exact(file.get(), path, array.values.data(), array.values.size(), "the data");
      !s) {
    return s.error();
  }
  return array;
}

Result<ImageSet> load_mnist_split(const std::string& dir, const std::string& split) {
  auto find = [&](const std::string& stem) {
    const std::string plain = dir + "/" + stem;
    struct stat st {};
    if (::stat((plain + ".gz").c_str(), &st) == 0) return plain + ".gz";
    return plain;
  };
  const std::string images_path = find(split + "-images-idx3-ubyte");
  const std::string labels_path = find(split + "-labels-idx1-ubyte");
  auto images = read_idx(images_path);
  if (!images) return images.error();
  auto labels = read_idx(labels_path);
  if (!labels) return labels.error();
  if (images->dims.size() != 3) {
    return Error{images_path + ": expected 3 dimensions (count, rows, cols), found " +
                 std::to_string(images->dims.size())};
  }
  if (labels->dims.size() != 1) {
    return Error{labels_path + ": expected 1 dimension (count), found " +
                 std::to_string(labels->dims.size())};
  }
  if (images->dims[0] != labels->dims[0]) {
    return Error{images_path + " holds " + std::to_string(images->dims[0]) + " images but " +
                 labels_path + " holds " + std::to_string(labels->dims[0]) + " labels"};
  }
  ImageSet set;
  set.count = images->dims[0];
  set.rows = images->dims[1];
  set.cols = images->dims[2];
  set.pixels = std::move(images->values);
  set.labels = std::move(labels->values);
  return set;
}

}  // namespace elastic::data
