// GPU-tagged: needs a CUDA device. tools/test.sh excludes the "gpu" tag (and
// counts it as skipped) where no GPU exists.
#include <catch2/catch.hpp>

#include "lib/gpu/gpu_probe.h"

TEST_CASE("axpy kernel runs and matches the host on every device") {
  hetps::gpu::ProbeResult r = hetps::gpu::Probe();
  INFO(r.error);
  REQUIRE_FALSE(r.devices.empty());
  for (const auto& d : r.devices) {
    INFO("device " << d.index << " " << d.name);
    CHECK(hetps::gpu::SelfTest(d.index, 1 << 20) == "");
  }
}
