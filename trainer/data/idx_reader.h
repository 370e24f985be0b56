// Readers for IDX files (the MNIST / Fashion-MNIST format), gzipped or plain.
//
// Debian's dataset-fashion-mnist ships /usr/share/datasets/fashion-mnist/*-idx?-ubyte.gz; they
// are read directly (zlib reads plain files too). Only unsigned-byte IDX files are supported.
// Errors name the file and what is wrong with it. Thread safety: free functions, no state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/result.h"

namespace elastic::data {

struct IdxArray {
  std::vector<std::int64_t> dims;  // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<std::uint8_t> values;
};

Result<IdxArray> read_idx(const std::string& path);

// Images and labels of one split of an MNIST-like data set.
struct ImageSet {
  std::int64_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // count * rows * cols, row-major
  std::vector<std::uint8_t> labels;  // count
};

// Loads `<dir>/<split>-images-idx3-ubyte[.gz]` and `<dir>/<split>-labels-idx1-ubyte[.gz]`,
// split being "train" or "t10k", and checks that they agree.
Result<ImageSet> load_mnist_split(const std::string& dir, const std::string& split);

}  // namespace elastic::data
