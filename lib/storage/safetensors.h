// Safetensors files of float32 tensors: the trained model out of hetps and
// back in (readable by Python's `safetensors`, by numpy from the header
// alone, and by hand). Layout: an 8-byte little-endian header length N, N
// bytes of JSON ({"__metadata__": {string: string}, name: {"dtype": "F32",
// "shape": [...], "data_offsets": [begin, end]}, ...}, padded with spaces
// to a multiple of 8), then the tensors' bytes, little-endian, at their
// offsets from the end of the header.
//
// Reading treats the file as hostile: the header length, every shape and
// offset are checked against the file before anything is allocated from
// them; tensors must be F32, lie inside the data, not overlap, and have
// as many bytes as their shape says.
#ifndef HETPS_LIB_STORAGE_SAFETENSORS_H_
#define HETPS_LIB_STORAGE_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace hetps {
namespace storage {

constexpr uint64_t kSafetensorsHeaderMax = 16 << 20;
constexpr uint64_t kSafetensorsBytesMax = uint64_t(64) << 30;

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // product(shape) values, row-major
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<NamedTensor> tensors;  // in the order of their offsets
};

// Writes `f` to `path` atomically (a temporary beside it, fsynced, then
// renamed). InvalidArgument for a tensor whose data does not match its
// shape, or a duplicate or empty name.
absl::Status WriteSafetensors(const std::string& path, const SafetensorsFile& f);

// Reads `path`: NotFound, or InvalidArgument naming what is wrong.
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

}  // namespace storage
}  // namespace hetps

#endif  // HETPS_LIB_STORAGE_SAFETENSORS_H_
