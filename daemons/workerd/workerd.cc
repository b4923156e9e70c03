#include "daemons/workerd/workerd.h"

#include "lib/base/status_macros.h"

namespace hetps {

void DeclareWorkerdConfig(ConfigSchema* schema, WorkerdConfig* c) {
  DeclareCommonConfig(schema, &c->common);
  DeclareAgentConfig(schema, &c->agent);
}

absl::StatusOr<std::unique_ptr<Workerd>> Workerd::Create(const WorkerdConfig& config,
                                                         const DaemonEnv& env) {
  std::unique_ptr<Workerd> d(new Workerd(config));
  ASSIGN_OR_RETURN(d->runtime_,
                   NodeRuntime::Create("workerd", NodeRole::kWorker, config.common, env));
  return d;
}

Workerd::~Workerd() { Shutdown(); }

absl::Status Workerd::Start() {
  RETURN_IF_ERROR(runtime_->StartControl({}, [this](v1::GetStatusResponse* r) {
    r->set_scheduler_address(agent_->scheduler_address());
    r->set_scheduler_connected(agent_->connected());
    r->set_incarnation(agent_->incarnation());
    r->set_membership_version(agent_->membership_version());
  }));
  agent_ = std::make_unique<SchedulerAgent>(config_.agent, runtime_.get());
  agent_->Start();
  return runtime_->MarkServing();
}

void Workerd::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Leave the cluster first so schedd reports LEFT rather than DEAD.
  if (agent_) agent_->Stop();
  if (runtime_) runtime_->StopControl();
}

}  // namespace hetps
