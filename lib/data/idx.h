// IDX (MNIST / Fashion-MNIST) image-label datasets: loading with full
// validation, and seeded per-worker sharding.
//
// Files may be gzip-compressed or raw (zlib reads both). Every header field
// and length is checked; a corrupt, truncated or oversized file is an error
// naming the file and what is wrong, never a crash. Pure functions apart
// from file reads; thread-safe.
#ifndef HETPS_LIB_DATA_IDX_H_
#define HETPS_LIB_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hetps {

struct ImageDataset {
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint32_t num_classes = 0;
  // size() * rows * cols pixels, row-major per image, scaled to [0, 1].
  std::vector<float> pixels;
  std::vector<uint8_t> labels;

  size_t size() const { return labels.size(); }
  size_t pixels_per_image() const { return static_cast<size_t>(rows) * cols; }
};

struct IdxLimits {
  uint32_t images_max = 1'000'000;
  uint32_t side_max = 1024;
  uint32_t num_classes = 10;
};

// Loads an images file (magic 0x00000803, ubyte, N x rows x cols) and its
// labels file (magic 0x00000801, ubyte, N) and checks they match.
absl::StatusOr<ImageDataset> LoadIdxDataset(const std::string& images_path,
                                            const std::string& labels_path,
                                            const IdxLimits& limits = IdxLimits());

// Loads the Fashion-MNIST train or test split from `dir` (Debian's
// dataset-fashion-mnist installs it in /usr/share/datasets/fashion-mnist).
absl::StatusOr<ImageDataset> LoadFashionMnist(const std::string& dir, bool train);

// The indices of worker `worker` of `workers`: a permutation of [0, n)
// drawn from `seed`, cut into `workers` contiguous shards whose sizes differ
// by at most one. Deterministic across platforms for a given seed.
std::vector<uint32_t> ShardIndices(size_t n, uint32_t worker, uint32_t workers, uint64_t seed);

}  // namespace hetps

#endif  // HETPS_LIB_DATA_IDX_H_
