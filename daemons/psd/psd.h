// psd: the parameter server. In this version it joins the cluster (registers,
// heartbeats, serves Admin and /metrics); parameter shards, aggregation and
// the optimizer arrive with the training work.
// Thread-safe: Start/Shutdown from one thread; Admin RPCs from gRPC's.
#ifndef HETPS_DAEMONS_PSD_PSD_H_
#define HETPS_DAEMONS_PSD_PSD_H_

#include <memory>

#include "lib/config/config.h"
#include "lib/daemon/common_config.h"
#include "lib/daemon/daemon_main.h"
#include "lib/daemon/node_runtime.h"
#include "lib/daemon/scheduler_agent.h"

namespace hetps {

struct PsdConfig {
  CommonConfig common;
  AgentConfig agent;
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

 private:
  explicit Psd(const PsdConfig& config) : config_(config) {}

  const PsdConfig config_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::unique_ptr<SchedulerAgent> agent_;
  bool shut_down_ = false;
};

}  // namespace hetps

#endif  // HETPS_DAEMONS_PSD_PSD_H_
