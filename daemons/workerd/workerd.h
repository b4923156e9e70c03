// workerd: the trainer. It joins the cluster (registers with its data
// address, heartbeats, serves Admin and /metrics) and runs its part of each
// training job schedd assigns: a BspWorker on its data shard (CUDA when the
// job's backend allows and a GPU is usable, else CPU), pulling parameters
// from and pushing gradients to the job's psd over the daemon's long-lived
// UDP endpoint. Progress goes to schedd in heartbeats, to the log, and to
// /metrics (docs/jobs.md, docs/metrics.md).
// Thread-safe: Start/Shutdown from one thread; Admin RPCs from gRPC's; jobs
// on the JobRunner's thread.
#ifndef HETPS_DAEMONS_WORKERD_WORKERD_H_
#define HETPS_DAEMONS_WORKERD_WORKERD_H_

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

struct WorkerdConfig {
  CommonConfig common;
  AgentConfig agent;
  DataPlaneConfig data;
  // BLAS threads of the CPU backend; 0 = OpenBLAS's default (every core).
  int64_t cpu_threads = 0;
  // Fault injection: every iteration's compute takes this many times as
  // long (the trainer idles for the difference), so a slow worker can be
  // shown without another machine (docs/plan.md, WLBS). 1: off.
  double compute_slowdown = 1.0;
  // Iterations between progress log lines and reports (evaluations add more).
  int64_t report_every = 50;
  std::string model_dir;  // rank 0's saved models (empty: none)
  int64_t model_keep = 20;
};

void DeclareWorkerdConfig(ConfigSchema* schema, WorkerdConfig* config);

class Workerd final : public Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Workerd>> Create(const WorkerdConfig& config,
                                                         const DaemonEnv& env);
  ~Workerd() override;

  absl::Status Start() override;
  void Shutdown() override;
  NodeRuntime& runtime() override { return *runtime_; }
  const SchedulerAgent& agent() const { return *agent_; }
  const std::string& data_address() const { return data_address_; }

 private:
  class Jobs;
  explicit Workerd(const WorkerdConfig& config);

  const WorkerdConfig config_;
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

#endif  // HETPS_DAEMONS_WORKERD_WORKERD_H_
