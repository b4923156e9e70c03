// RunDaemon: the whole life of a daemon process, so each main() is one call.
//   1. declare config keys, parse --config FILE and flags (flag > file >
//      default); --help and --print-config print and exit 0; a config error
//      prints one line "<daemon>: config error: ..." and exits 2;
//   2. pin to cpu_affinity's CPUs (a bad list is a config error), block
//      SIGTERM/SIGINT (taken with sigwait): both before any thread starts,
//      so every thread inherits them;
//   3. Create + Start the daemon; a start-up error (port in use, ...) prints
//      one line "<daemon>: ..." and exits 2;
//   4. wait for SIGTERM/SIGINT or an Admin.Drain request; then Shutdown()
//      (graceful: leave the cluster, finish in-flight RPCs) and exit 0; or
//      for a NodeRuntime::Fatal condition: Shutdown, its message, exit 2.
#ifndef HETPS_LIB_DAEMON_DAEMON_MAIN_H_
#define HETPS_LIB_DAEMON_DAEMON_MAIN_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/daemon/common_config.h"
#include "lib/daemon/node_runtime.h"

namespace hetps {

class Daemon {
 public:
  virtual ~Daemon() = default;
  virtual absl::Status Start() = 0;
  // Graceful and idempotent.
  virtual void Shutdown() = 0;
  virtual NodeRuntime& runtime() = 0;
};

struct DaemonSpec {
  const char* name;
  // Declares the config keys, binding them to the daemon's config struct.
  std::function<void(ConfigSchema*)> declare_config;
  // Validates cross-key constraints of the parsed config.
  std::function<absl::Status()> validate_config;
  std::function<absl::StatusOr<std::unique_ptr<Daemon>>(const DaemonEnv&)> create;
  // The parsed config's common part (log_level, cpu_affinity).
  std::function<const CommonConfig&()> common;
};

int RunDaemon(int argc, char** argv, const DaemonSpec& spec);

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_DAEMON_MAIN_H_
