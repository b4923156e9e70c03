// The hetps release version, reported in build_info metrics, Register and
// GetStatus. Bumped by hand on release.
#ifndef HETPS_LIB_BASE_VERSION_H_
#define HETPS_LIB_BASE_VERSION_H_

namespace hetps {
inline constexpr char kVersion[] = "0.1.0";
}  // namespace hetps

#endif  // HETPS_LIB_BASE_VERSION_H_
