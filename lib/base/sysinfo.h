// Facts about the local machine used as node capabilities. Reads the OS
// once per call; thread-safe.
#ifndef HETPS_LIB_BASE_SYSINFO_H_
#define HETPS_LIB_BASE_SYSINFO_H_

#include <cstdint>
#include <string>

namespace hetps {

// CPU cores this process may run on (affinity mask), at least 1.
uint32_t UsableCpuCores();
// Physical memory in bytes.
uint64_t PhysicalMemoryBytes();
std::string Hostname();

}  // namespace hetps

#endif  // HETPS_LIB_BASE_SYSINFO_H_
