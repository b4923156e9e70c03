// workerd: the trainer. In this version it joins the cluster (registers,
// heartbeats, serves Admin and /metrics); training arrives with the training
// work.
// Thread-safe: Start/Shutdown from one thread; Admin RPCs from gRPC's.
#ifndef HETPS_DAEMONS_WORKERD_WORKERD_H_
#define HETPS_DAEMONS_WORKERD_WORKERD_H_

#include <memory>

#include "lib/config/config.h"
#include "lib/daemon/common_config.h"
#include "lib/daemon/daemon_main.h"
#include "lib/daemon/node_runtime.h"
#include "lib/daemon/scheduler_agent.h"

namespace hetps {

struct WorkerdConfig {
  CommonConfig common;
  AgentConfig agent;
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

 private:
  explicit Workerd(const WorkerdConfig& config) : config_(config) {}

  const WorkerdConfig config_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::unique_ptr<SchedulerAgent> agent_;
  bool shut_down_ = false;
};

}  // namespace hetps

#endif  // HETPS_DAEMONS_WORKERD_WORKERD_H_
