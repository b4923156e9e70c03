#include "lib/daemon/common_config.h"

namespace hetps {

void DeclareCommonConfig(ConfigSchema* schema, CommonConfig* c) {
  schema->String("node_id", &c->node_id,
                 "Stable node identity; a restarted node with the same id rejoins as itself. "
                 "Empty: the CN of tls_cert (with insecure: derived from the daemon, host and "
                 "port). With TLS it must equal the certificate's CN.");
  schema->Address("listen", &c->listen, "gRPC control address (host:port, port 0 = any).");
  schema->Address("metrics_listen", &c->metrics_listen,
                  "Prometheus /metrics HTTP address (host:port, port 0 = any).");
  schema->String("advertise_host", &c->advertise_host,
                 "Host name or IP advertised to peers when listening on 0.0.0.0 or ::; "
                 "empty uses the machine's hostname.");
  schema->Enum("log_level", &c->log_level, "Lowest log level written to stderr.",
               {"debug", "info", "warn", "error"});
  schema->String("ready_file", &c->ready_file,
                 "If set, write {node_id, control_address, metrics_address, pid} as JSON here "
                 "once serving (for scripts and tests).");
  schema->Int("shutdown_grace_ms", &c->shutdown_grace_ms,
              "How long in-flight RPCs may run on shutdown before they are cancelled.", 0, 600000);
  schema->String("cpu_affinity", &c->cpu_affinity,
                 "CPUs every thread of this daemon runs on, as a Linux CPU list (\"1\", "
                 "\"0-3,8\"); each must be one the process may use. Pinning each trainer to "
                 "its own core keeps trainers sharing a host from taking turns on one. Empty: "
                 "no pinning.");
  DeclareTlsConfig(schema, &c->tls);
}

void DeclareAgentConfig(ConfigSchema* schema, AgentConfig* c) {
  schema->Address("scheduler", &c->scheduler, "schedd's control address (host:port).");
  schema->Int("rpc_timeout_ms", &c->rpc_timeout_ms, "Deadline of each control-plane RPC.", 10,
              600000);
  schema->Int("register_backoff_max_ms", &c->register_backoff_max_ms,
              "Upper bound of the exponential backoff between registration attempts.", 10, 600000);
  schema->Int("register_conflict_timeout_ms", &c->register_conflict_timeout_ms,
              "How long schedd may refuse this node id as alive at another address before the "
              "daemon exits 2 (another daemon runs with the same id); longer than schedd takes "
              "to declare a crashed node dead.",
              100, 3600000);
}

}  // namespace hetps
