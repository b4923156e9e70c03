#include "lib/data/idx.h"

#include <zlib.h>

#include <random>

#include "absl/strings/str_cat.h"

namespace hetps {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

// Reads a whole (possibly gzip-compressed) file, refusing more than
// `bytes_max` bytes of decompressed content.
absl::StatusOr<std::string> ReadAll(const std::string& path, size_t bytes_max) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  }
  std::string data;
  char buf[1 << 16];
  while (true) {
    int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      return absl::DataLossError(absl::StrCat("'", path, "': corrupt compressed data: ", msg));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > bytes_max) {
      gzclose(f);
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "': larger than the ", bytes_max, "-byte limit"));
    }
  }
  gzclose(f);
  return data;
}

uint32_t BigEndian32(const std::string& d, size_t at) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(d[at])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(d[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(d[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<uint8_t>(d[at + 3]));
}

absl::Status Header(const std::string& path, const std::string& d, uint32_t magic,
                    size_t header_bytes) {
  if (d.size() < header_bytes) {
    return absl::DataLossError(absl::StrCat("'", path, "': truncated header (", d.size(), " of ",
                                            header_bytes, " bytes)"));
  }
  uint32_t got = BigEndian32(d, 0);
  if (got != magic) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "': bad magic 0x", absl::Hex(got), ", want 0x", absl::Hex(magic)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageDataset> LoadIdxDataset(const std::string& images_path,
                                            const std::string& labels_path,
                                            const IdxLimits& limits) {
  const size_t image_bytes_max =
      16 + static_cast<size_t>(limits.images_max) * limits.side_max * limits.side_max;
  absl::StatusOr<std::string> img = ReadAll(images_path, image_bytes_max);
  if (!img.ok()) return img.status();
  absl::Status s = Header(images_path, *img, kImagesMagic, 16);
  if (!s.ok()) return s;
  uint32_t n = BigEndian32(*img, 4), rows = BigEndian32(*img, 8), cols = BigEndian32(*img, 12);
  if (n == 0 || n > limits.images_max || rows == 0 || rows > limits.side_max || cols == 0 ||
      cols > limits.side_max) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", images_path, "': implausible shape ", n, " x ", rows, " x ", cols));
  }
  size_t want = 16 + static_cast<size_t>(n) * rows * cols;
  if (img->size() != want) {
    return absl::DataLossError(absl::StrCat(
        "'", images_path, "': ", img->size(), " bytes, want ", want, " for ", n, " images of ",
        rows, "x", cols, img->size() < want ? " (truncated)" : " (trailing data)"));
  }
  absl::StatusOr<std::string> lab =
      ReadAll(labels_path, 8 + static_cast<size_t>(limits.images_max));
  if (!lab.ok()) return lab.status();
  s = Header(labels_path, *lab, kLabelsMagic, 8);
  if (!s.ok()) return s;
  uint32_t ln = BigEndian32(*lab, 4);
  if (ln != n) {
    return absl::InvalidArgumentError(absl::StrCat("'", labels_path, "' has ", ln, " labels but '",
                                                   images_path, "' has ", n, " images"));
  }
  if (lab->size() != 8 + static_cast<size_t>(n)) {
    return absl::DataLossError(absl::StrCat("'", labels_path, "': ", lab->size(), " bytes, want ",
                                            8 + static_cast<size_t>(n)));
  }
  ImageDataset ds;
  ds.rows = rows;
  ds.cols = cols;
  ds.num_classes = limits.num_classes;
  ds.labels.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint8_t l = static_cast<uint8_t>((*lab)[8 + i]);
    if (l >= limits.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat("'", labels_path, "': label ", l,
                                                     " of sample ", i, " is not below ",
                                                     limits.num_classes));
    }
    ds.labels[i] = l;
  }
  ds.pixels.resize(static_cast<size_t>(n) * rows * cols);
  const unsigned char* p = reinterpret_cast<const unsigned char*>(img->data()) + 16;
  for (size_t i = 0; i < ds.pixels.size(); ++i) ds.pixels[i] = p[i] * (1.0f / 255.0f);
  return ds;
}

absl::StatusOr<ImageDataset> LoadFashionMnist(const std::string& dir, bool train) {
  const char* split = train ? "train" : "t10k";
  std::string images = absl::StrCat(dir, "/", split, "-images-idx3-ubyte");
  std::string labels = absl::StrCat(dir, "/", split, "-labels-idx1-ubyte");
  // Debian ships them gzip-compressed; accept unpacked copies too.
  gzFile probe = gzopen((images + ".gz").c_str(), "rb");
  if (probe != nullptr) {
    gzclose(probe);
    images += ".gz";
    labels += ".gz";
  }
  return LoadIdxDataset(images, labels);
}

std::vector<uint32_t> ShardIndices(size_t n, uint32_t worker, uint32_t workers, uint64_t seed) {
  std::vector<uint32_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = static_cast<uint32_t>(i);
  // Fisher-Yates with mt19937_64 (its output is fixed by the standard;
  // std::shuffle's use of it is not).
  std::mt19937_64 rng(seed);
  for (size_t i = n; i > 1; --i) {
    size_t j = static_cast<size_t>(rng() % i);
    std::swap(perm[i - 1], perm[j]);
  }
  if (workers == 0 || worker >= workers) return {};
  size_t begin = n * worker / workers;
  size_t end = n * (worker + 1) / workers;
  return std::vector<uint32_t>(perm.begin() + begin, perm.begin() + end);
}

}  // namespace hetps
