// Configuration shared by all daemons, and by the nodes that report to schedd.
// Declared into a ConfigSchema by the daemon's Declare*Config function.
#ifndef HETPS_LIB_DAEMON_COMMON_CONFIG_H_
#define HETPS_LIB_DAEMON_COMMON_CONFIG_H_

#include <cstdint>
#include <string>

#include "lib/config/config.h"
#include "lib/rpc/security.h"

namespace hetps {

struct CommonConfig {
  // Empty: derived at start ("schedd", or <daemon>-<hostname>-<control port>).
  std::string node_id;
  std::string listen = "127.0.0.1:0";
  std::string metrics_listen = "127.0.0.1:0";
  // Host advertised to peers when listening on a wildcard address.
  std::string advertise_host;
  std::string log_level = "info";
  // When set, a JSON file with the bound addresses is written once serving.
  std::string ready_file;
  int64_t shutdown_grace_ms = 2000;
  // Empty: wherever the kernel (or the unit's CPUAffinity=) lets it run.
  std::string cpu_affinity;
  TlsConfig tls;  // the control plane's TLS and tokens (security.h)
};

void DeclareCommonConfig(ConfigSchema* schema, CommonConfig* config);

// How a psd/workerd reaches schedd.
struct AgentConfig {
  std::string scheduler = "127.0.0.1:7070";
  int64_t rpc_timeout_ms = 2000;
  int64_t register_backoff_max_ms = 5000;
  // How long schedd may keep refusing our node id as alive elsewhere
  // before this daemon gives up (exit 2): longer than a restarted node's
  // old registration takes to expire.
  int64_t register_conflict_timeout_ms = 10000;
};

void DeclareAgentConfig(ConfigSchema* schema, AgentConfig* config);

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_COMMON_CONFIG_H_
