#include "daemons/psd/psd.h"

#include "lib/base/status_macros.h"

namespace hetps {

void DeclarePsdConfig(ConfigSchema* schema, PsdConfig* c) {
  DeclareCommonConfig(schema, &c->common);
  DeclareAgentConfig(schema, &c->agent);
}

absl::StatusOr<std::unique_ptr<Psd>> Psd::Create(const PsdConfig& config, const DaemonEnv& env) {
  std::unique_ptr<Psd> d(new Psd(config));
  ASSIGN_OR_RETURN(d->runtime_, NodeRuntime::Create("psd", NodeRole::kServer, config.common, env));
  return d;
}

Psd::~Psd() { Shutdown(); }

absl::Status Psd::Start() {
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

void Psd::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Leave the cluster first so schedd reports LEFT rather than DEAD.
  if (agent_) agent_->Stop();
  if (runtime_) runtime_->StopControl();
}

}  // namespace hetps
