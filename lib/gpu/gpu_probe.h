// GPU discovery and a self-test kernel. Compiled by nvcc (see BUILD.bazel);
// callable from plain C++ on machines with or without a GPU or driver: with
// none, Probe() returns no devices and says why in `error`.
// Thread-safe (CUDA runtime calls only).
#ifndef HETPS_LIB_GPU_GPU_PROBE_H_
#define HETPS_LIB_GPU_GPU_PROBE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace hetps {
namespace gpu {

struct Device {
  int index = 0;
  std::string name;
  uint64_t memory_bytes = 0;
  int compute_capability = 0;  // major * 10 + minor
};

struct ProbeResult {
  std::vector<Device> devices;
  int nccl_version = 0;  // 0 when NCCL is unavailable
  std::string error;     // why no device is usable, when none is
};

ProbeResult Probe();

// Runs y = a*x + y on `device` over `n` elements and checks the result on the
// host. Returns "" on success, else the failure (CUDA error name or mismatch).
std::string SelfTest(int device, int n);

}  // namespace gpu
}  // namespace hetps

#endif  // HETPS_LIB_GPU_GPU_PROBE_H_
