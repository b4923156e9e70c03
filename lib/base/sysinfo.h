// Facts about the local machine used as node capabilities, and pinning to
// its CPUs. Reads the OS once per call; thread-safe.
#ifndef HETPS_LIB_BASE_SYSINFO_H_
#define HETPS_LIB_BASE_SYSINFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hetps {

// CPU cores this process may run on (affinity mask), at least 1.
uint32_t UsableCpuCores();
// Physical memory in bytes.
uint64_t PhysicalMemoryBytes();
std::string Hostname();

// CPUs numbered as the kernel does (0 .. kCpuMax - 1).
inline constexpr int kCpuMax = 1024;
// A Linux CPU list ("0-3,8,10-11", as in taskset -c and cpuset files):
// sorted, without repeats; refused when empty, malformed or out of range.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view list);
// The list's CPUs as "0-3,8" (the inverse of ParseCpuList).
std::string FormatCpuList(const std::vector<int>& cpus);
// Confines the calling thread, and so every thread it creates from now on,
// to `cpus`; each must be one this process may run on now (a container's
// or systemd unit's mask is respected, not widened).
absl::Status PinToCpus(const std::vector<int>& cpus);

}  // namespace hetps

#endif  // HETPS_LIB_BASE_SYSINFO_H_
