#include "lib/daemon/scheduler_agent.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/base/version.h"
#include "lib/rpc/grpc_util.h"
#include "lib/rpc/membership_proto.h"

namespace hetps {

SchedulerAgent::SchedulerAgent(const AgentConfig& config, NodeRuntime* runtime,
                               std::string data_address, JobHandler* jobs)
    : config_(config),
      runtime_(runtime),
      data_address_(std::move(data_address)),
      jobs_(jobs),
      logger_(runtime->logger().WithComponent("agent")),
      stub_(v1::Scheduler::NewStub(runtime->Channel(config.scheduler))) {
  prometheus::Registry& r = runtime->registry();
  const std::string p = runtime->daemon_name();
  connected_gauge_ = &prometheus::BuildGauge()
                          .Name(p + "_scheduler_connected")
                          .Help("1 while the last heartbeat to schedd succeeded, else 0.")
                          .Register(r)
                          .Add({});
  auto& regs = prometheus::BuildCounter()
                   .Name(p + "_registrations_total")
                   .Help("Registration attempts with schedd, by result.")
                   .Register(r);
  registrations_ok_ = &regs.Add({{"result", "ok"}});
  registrations_failed_ = &regs.Add({{"result", "error"}});
  auto& hbs = prometheus::BuildCounter()
                  .Name(p + "_heartbeats_total")
                  .Help("Heartbeats sent to schedd, by result (rejected = register again).")
                  .Register(r);
  heartbeats_ok_ = &hbs.Add({{"result", "ok"}});
  heartbeats_failed_ = &hbs.Add({{"result", "error"}});
  heartbeats_rejected_ = &hbs.Add({{"result", "rejected"}});
  auto& links = prometheus::BuildCounter()
                    .Name(p + "_link_reports_total")
                    .Help("ReportLinks calls to schedd (links measured into this node), by result.")
                    .Register(r);
  link_reports_ok_ = &links.Add({{"result", "ok"}});
  link_reports_failed_ = &links.Add({{"result", "error"}});
}

SchedulerAgent::~SchedulerAgent() { Stop(); }

void SchedulerAgent::Start() {
  thread_ = std::thread([this] { Run(); });
}

bool SchedulerAgent::connected() const {
  absl::MutexLock lock(&mu_);
  return connected_;
}

uint64_t SchedulerAgent::incarnation() const {
  absl::MutexLock lock(&mu_);
  return incarnation_;
}

uint64_t SchedulerAgent::membership_version() const {
  absl::MutexLock lock(&mu_);
  return membership_version_;
}

bool SchedulerAgent::RegisterOnce() {
  v1::RegisterRequest req;
  req.set_node_id(runtime_->node_id());
  req.set_role(RoleToProto(runtime_->role()));
  req.set_control_address(runtime_->control_address());
  req.set_metrics_address(runtime_->metrics_address());
  req.set_data_address(data_address_);
  req.set_version(kVersion);
  CapabilitiesToProto(runtime_->capabilities(), req.mutable_capabilities());
  v1::RegisterResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(config_.rpc_timeout_ms));
  grpc::Status s = stub_->Register(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
    // Our id is alive elsewhere: wait for it to expire (we restarted), or
    // give up (a second daemon with our id).
    registrations_failed_->Increment();
    const absl::Time now = absl::Now();
    if (conflict_since_ == absl::InfinitePast()) conflict_since_ = now;
    logger_.Warn("node id in use",
                 {{"scheduler", config_.scheduler}, {"error", s.error_message()}});
    if (now - conflict_since_ >= absl::Milliseconds(config_.register_conflict_timeout_ms)) {
      runtime_->Fatal(absl::AlreadyExistsError(
          absl::StrCat(s.error_message(), " (refused for ", config_.register_conflict_timeout_ms,
                       " ms); give this daemon another node_id, or stop the other one")));
    }
    return false;
  }
  conflict_since_ = absl::InfinitePast();
  if (!s.ok()) {
    registrations_failed_->Increment();
    logger_.Warn("register failed", {{"scheduler", config_.scheduler},
                                     {"code", static_cast<int>(s.error_code())},
                                     {"error", s.error_message()}});
    return false;
  }
  registrations_ok_->Increment();
  absl::MutexLock lock(&mu_);
  registered_ = true;
  connected_ = true;
  incarnation_ = resp.incarnation();
  membership_version_ = resp.membership_version();
  // Follow schedd's interval, within sane bounds.
  uint32_t ms = std::clamp<uint32_t>(resp.heartbeat_interval_ms(), 10, 60000);
  heartbeat_interval_ = absl::Milliseconds(ms);
  connected_gauge_->Set(1);
  logger_.Info("registered", {{"scheduler", config_.scheduler},
                              {"incarnation", static_cast<unsigned long long>(incarnation_)},
                              {"heartbeat_interval_ms", ms}});
  return true;
}

bool SchedulerAgent::HeartbeatOnce() {
  v1::HeartbeatRequest req;
  req.set_node_id(runtime_->node_id());
  req.set_incarnation(incarnation());
  if (jobs_ != nullptr && !jobs_->FillJobReport(req.mutable_job())) req.clear_job();
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(config_.rpc_timeout_ms));
  grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
  if (s.ok() && jobs_ != nullptr && resp.has_job()) jobs_->OnJobAssignment(resp.job());
  if (s.ok() && jobs_ != nullptr) ReportLinks();
  absl::MutexLock lock(&mu_);
  if (s.ok()) {
    heartbeats_ok_->Increment();
    if (!connected_) logger_.Info("scheduler reachable again");
    connected_ = true;
    membership_version_ = resp.membership_version();
    connected_gauge_->Set(1);
    return true;
  }
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    heartbeats_rejected_->Increment();
    logger_.Warn("heartbeat rejected, registering again", {{"error", s.error_message()}});
    registered_ = false;
    return false;
  }
  heartbeats_failed_->Increment();
  if (connected_) {
    logger_.Warn("heartbeat failed",
                 {{"code", static_cast<int>(s.error_code())}, {"error", s.error_message()}});
  }
  connected_ = false;
  connected_gauge_->Set(0);
  return true;
}

void SchedulerAgent::ReportLinks() {
  v1::ReportLinksRequest req;
  jobs_->TakeLinkReports(runtime_->node_id(), &req);
  if (req.links().empty() && !req.has_traffic()) return;
  req.set_node_id(runtime_->node_id());
  v1::ReportLinksResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(config_.rpc_timeout_ms));
  grpc::Status s = stub_->ReportLinks(&ctx, req, &resp);
  // Best effort: a link lost here is reported again when it moves.
  if (s.ok()) {
    link_reports_ok_->Increment();
  } else {
    link_reports_failed_->Increment();
    logger_.Warn("link report refused",
                 {{"code", static_cast<int>(s.error_code())}, {"error", s.error_message()}});
  }
}

void SchedulerAgent::Run() {
  absl::Duration backoff = absl::Milliseconds(100);
  const absl::Duration backoff_max = absl::Milliseconds(config_.register_backoff_max_ms);
  auto stopped = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_; };
  while (true) {
    bool registered;
    absl::Duration wait;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      registered = registered_;
    }
    if (!registered) {
      if (RegisterOnce()) {
        backoff = absl::Milliseconds(100);
        absl::MutexLock lock(&mu_);
        wait = heartbeat_interval_;
      } else {
        wait = backoff;
        backoff = std::min(backoff * 2, backoff_max);
      }
    } else {
      if (!HeartbeatOnce()) continue;  // register again at once
      absl::MutexLock lock(&mu_);
      wait = heartbeat_interval_;
    }
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopped), wait);
  }
}

void SchedulerAgent::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  uint64_t inc;
  bool registered;
  {
    absl::MutexLock lock(&mu_);
    inc = incarnation_;
    registered = registered_;
  }
  if (!registered) return;
  v1::DeregisterRequest req;
  req.set_node_id(runtime_->node_id());
  req.set_incarnation(inc);
  v1::DeregisterResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(config_.rpc_timeout_ms));
  grpc::Status s = stub_->Deregister(&ctx, req, &resp);
  if (s.ok()) {
    logger_.Info("deregistered");
  } else {
    logger_.Warn("deregister failed", {{"error", s.error_message()}});
  }
  connected_gauge_->Set(0);
}

}  // namespace hetps
