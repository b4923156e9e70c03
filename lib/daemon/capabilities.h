// What this machine offers (cores, memory, GPUs), as reported in Register.
#ifndef HETPS_LIB_DAEMON_CAPABILITIES_H_
#define HETPS_LIB_DAEMON_CAPABILITIES_H_

#include <string>

#include "lib/membership/membership.h"

namespace hetps {

// Probes the local machine. `gpu_note` receives why no GPU is usable, if none.
Capabilities LocalCapabilities(std::string* gpu_note);

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_CAPABILITIES_H_
