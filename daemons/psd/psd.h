// psd: the parameter server. It joins the cluster (registers with its data
// address, heartbeats, serves Admin and /metrics) and runs its part of each
// training job schedd assigns: a ps::ShardServer for the chunks the job's
// chunk map gives it, on the daemon's long-lived UDP endpoint. Rounds start
// once schedd says every member is ready; workers that schedd declares gone
// leave the round at once (docs/jobs.md).
// Thread-safe: Start/Shutdown from one thread; Admin RPCs from gRPC's; jobs
// on the JobRunner's thread.
#ifndef HETPS_DAEMONS_PSD_PSD_H_
#define HETPS_DAEMONS_PSD_PSD_H_

#include <atomic>
#include <memory>

#include "lib/config/config.h"
#include "lib/daemon/artifacts.h"
#include "lib/daemon/common_config.h"
#include "lib/daemon/daemon_main.h"
#include "lib/daemon/data_plane.h"
#include "lib/daemon/node_runtime.h"
#include "lib/daemon/scheduler_agent.h"
#include "lib/transport/receiver_mux.h"

namespace hetps {

struct PsdConfig {
  CommonConfig common;
  AgentConfig agent;
  DataPlaneConfig data;
  // Checkpoints of this psd's part of a job (lib/storage; jobs ask with
  // checkpoint_every_rounds). Empty: none are written.
  std::string checkpoint_dir;
  int64_t checkpoint_keep = 3;       // per job: the newest this many stay
  int64_t checkpoint_keep_jobs = 3;  // jobs besides the running one whose checkpoints stay
};

void DeclarePsdConfig(ConfigSchema* schema, PsdConfig* config);

class Psd final : public Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Psd>> Create(const PsdConfig& config, const DaemonEnv& env);
  ~Psd() override;

  absl::Status Start() override;
  void Shutdown() override;
  NodeRuntime& runtime() override { return *runtime_; }
  const SchedulerAgent& agent() const { return *agent_; }
  const std::string& data_address() const { return data_address_; }

 private:
  class Jobs;
  explicit Psd(const PsdConfig& config);

  const PsdConfig config_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::unique_ptr<ArtifactsService> artifacts_;  // served until StopControl
  transport::ReceiverMux mux_;
  std::unique_ptr<transport::Endpoint> endpoint_;
  std::unique_ptr<transport::TcpEndpoint> tcp_;  // null with data_tcp: false
  std::string data_address_;
  std::unique_ptr<Jobs> jobs_;
  std::atomic<Jobs*> jobs_view_{nullptr};  // jobs_ for RPC threads (Admin.Drain's guard)
  std::unique_ptr<SchedulerAgent> agent_;
  bool shut_down_ = false;
};

}  // namespace hetps

#endif  // HETPS_DAEMONS_PSD_PSD_H_
