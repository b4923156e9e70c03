// Runs everywhere: without a GPU, Probe() must say why and report no devices.
#include "lib/gpu/gpu_probe.h"

#include <catch2/catch.hpp>

TEST_CASE("Probe reports devices or a reason for none") {
  hetps::gpu::ProbeResult r = hetps::gpu::Probe();
  if (r.devices.empty()) {
    REQUIRE_FALSE(r.error.empty());
  } else {
    for (const auto& d : r.devices) {
      CHECK(d.memory_bytes > 0);
      CHECK(d.compute_capability >= 75);  // CUDA 13 supports sm_75 and newer
    }
  }
  // NCCL is linked from /usr/local/cuda; its version is known without a GPU.
  CHECK(r.nccl_version > 0);
}
