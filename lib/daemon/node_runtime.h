// NodeRuntime: what every hetps daemon runs besides its own logic.
//  - the Prometheus /metrics server (bound at Create, so a port in use fails
//    early with the config key named),
//  - the gRPC control server with the hetps.v1.Admin service plus the
//    daemon's own services (bound at StartControl),
//  - identity (node id, role, advertised addresses, capabilities),
//  - the drain request raised by Admin.Drain, and the ready file.
// The daemon owns its NodeRuntime. Thread-safe after StartControl.
#ifndef HETPS_LIB_DAEMON_NODE_RUNTIME_H_
#define HETPS_LIB_DAEMON_NODE_RUNTIME_H_

#include <prometheus/registry.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "lib/base/log.h"
#include "lib/config/config.h"
#include "lib/daemon/common_config.h"
#include "lib/membership/membership.h"
#include "lib/metrics/metrics_server.h"
#include "lib/rpc/grpc_util.h"
#include "lib/rpc/security.h"
#include "proto/hetps/v1/admin.grpc.pb.h"

namespace hetps {

// What main() hands every daemon besides its config.
struct DaemonEnv {
  LogSink* log_sink = nullptr;
  std::vector<ConfigSchema::Entry> config_entries;
  std::string config_path;
};

class NodeRuntime {
 public:
  // Fills role-specific parts of Admin.GetStatus.
  using StatusHook = std::function<void(v1::GetStatusResponse*)>;
  // What draining now would do to running work ("" when nothing): an
  // Admin.Drain without force is refused with it.
  using DrainGuard = std::function<std::string()>;

  static absl::StatusOr<std::unique_ptr<NodeRuntime>> Create(const std::string& daemon_name,
                                                             NodeRole role,
                                                             const CommonConfig& config,
                                                             const DaemonEnv& env);
  ~NodeRuntime();

  // Binds the control server with Admin + `services` and fixes the node id
  // (with TLS it is fixed at Create: the certificate's CN).
  absl::Status StartControl(const std::vector<grpc::Service*>& services, StatusHook hook,
                            DrainGuard drain_guard = nullptr);
  // Writes the ready file, if configured, and marks the node SERVING.
  absl::Status MarkServing();
  // Marks DRAINING and stops the control server, waiting at most the grace.
  void StopControl();

  const std::string& node_id() const { return node_id_; }
  NodeRole role() const { return role_; }
  const std::string& daemon_name() const { return daemon_name_; }
  const std::string& control_address() const { return control_address_; }
  const std::string& metrics_address() const { return metrics_->address(); }
  const Capabilities& capabilities() const { return capabilities_; }
  prometheus::Registry& registry() { return *registry_; }
  const Logger& logger() const { return logger_; }
  // Raised by Admin.Drain; main waits on it alongside SIGTERM.
  absl::Notification& drain_requested() { return drain_requested_; }
  // A condition the daemon cannot run under (another live node holds its
  // id): main shuts it down and exits 2 with the message. First one wins.
  void Fatal(absl::Status why);
  absl::Status fatal() const;
  absl::Time start_time() const { return start_time_; }
  // The control plane's TLS material and the per-call authorizer.
  const TlsMaterial& tls() const { return tls_; }
  const Authorizer& authorizer() const { return *authorizer_; }
  // A channel to another daemon's control port with this node's identity.
  std::shared_ptr<grpc::Channel> Channel(const std::string& target) const {
    return MakeSecureChannel(target, tls_);
  }

 private:
  class AdminService;

  NodeRuntime(std::string daemon_name, NodeRole role, CommonConfig config, DaemonEnv env);

  const std::string daemon_name_;
  const NodeRole role_;
  const CommonConfig config_;
  const DaemonEnv env_;
  const absl::Time start_time_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<AdminService> admin_;
  TlsMaterial tls_;
  std::unique_ptr<Authorizer> authorizer_;
  std::unique_ptr<grpc::Server> server_;
  std::string node_id_;
  std::string control_address_;
  Capabilities capabilities_;
  std::string gpu_note_;  // why no GPU is usable, when none is
  Logger logger_;
  absl::Notification drain_requested_;
  mutable absl::Mutex fatal_mu_;
  absl::Status fatal_ ABSL_GUARDED_BY(fatal_mu_);
  std::atomic<int> serving_state_{v1::SERVING_STATE_STARTING};
  StatusHook status_hook_;
  DrainGuard drain_guard_;
};

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_NODE_RUNTIME_H_
