#include "lib/daemon/capabilities.h"

#include "lib/base/sysinfo.h"
#include "lib/gpu/gpu_probe.h"

namespace hetps {

Capabilities LocalCapabilities(std::string* gpu_note) {
  Capabilities c;
  c.hostname = Hostname();
  c.cpu_cores = UsableCpuCores();
  c.memory_bytes = PhysicalMemoryBytes();
  gpu::ProbeResult probe = gpu::Probe();
  c.nccl_version = static_cast<uint32_t>(probe.nccl_version);
  for (const gpu::Device& d : probe.devices) {
    c.gpus.push_back({static_cast<uint32_t>(d.index), d.name, d.memory_bytes,
                      static_cast<uint32_t>(d.compute_capability)});
  }
  if (gpu_note != nullptr) *gpu_note = probe.error;
  return c;
}

}  // namespace hetps
