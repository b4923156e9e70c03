// SchedulerAgent: keeps a psd/workerd registered with schedd.
// One named thread: registers (exponential backoff while schedd is away),
// then heartbeats at the interval schedd returned. A NOT_FOUND heartbeat
// (schedd restarted, or declared us dead) triggers an immediate
// re-registration. Stop() deregisters (graceful leave) and joins the thread.
// Thread-safe accessors; Start/Stop from one thread.
#ifndef HETPS_LIB_DAEMON_SCHEDULER_AGENT_H_
#define HETPS_LIB_DAEMON_SCHEDULER_AGENT_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lib/daemon/common_config.h"
#include "lib/daemon/node_runtime.h"
#include "proto/hetps/v1/scheduler.grpc.pb.h"

namespace hetps {

// What the agent needs from a daemon that runs jobs (see job_runner.h).
class JobHandler {
 public:
  virtual ~JobHandler() = default;
  // Before each heartbeat (agent thread). False: no job to report.
  virtual bool FillJobReport(v1::NodeJobReport* report) = 0;
  // An assignment from a heartbeat response (agent thread). Must not block.
  virtual void OnJobAssignment(const v1::JobAssignment& assignment) = 0;
  // After each heartbeat (agent thread): links into this node (`self`)
  // and its traffic to report to schedd (ReportLinks); none by default.
  virtual void TakeLinkReports(const std::string& self, v1::ReportLinksRequest* out) {}
};

class SchedulerAgent {
 public:
  // `runtime` must outlive the agent and have started its control server.
  // `data_address` (may be empty) is advertised at registration; `jobs`
  // (may be null; not owned, must outlive the agent) takes job assignments.
  SchedulerAgent(const AgentConfig& config, NodeRuntime* runtime, std::string data_address = "",
                 JobHandler* jobs = nullptr);
  ~SchedulerAgent();

  void Start();
  // Deregisters (best effort, one RPC deadline) and stops the thread.
  void Stop();

  bool connected() const;
  uint64_t incarnation() const;
  uint64_t membership_version() const;
  const std::string& scheduler_address() const { return config_.scheduler; }

 private:
  void Run();
  bool RegisterOnce();
  // Returns false when schedd asked us to register again.
  bool HeartbeatOnce();
  // Sends what jobs_->TakeLinkReports gives (best effort).
  void ReportLinks();

  const AgentConfig config_;
  NodeRuntime* const runtime_;
  const std::string data_address_;
  JobHandler* const jobs_;
  const Logger logger_;
  std::unique_ptr<v1::Scheduler::Stub> stub_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time conflict_since_ = absl::InfinitePast();  // agent thread: refusals as alive elsewhere
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t membership_version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(500);

  prometheus::Gauge* connected_gauge_;
  prometheus::Counter* registrations_ok_;
  prometheus::Counter* registrations_failed_;
  prometheus::Counter* heartbeats_ok_;
  prometheus::Counter* heartbeats_failed_;
  prometheus::Counter* heartbeats_rejected_;
  prometheus::Counter* link_reports_ok_;
  prometheus::Counter* link_reports_failed_;
};

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_SCHEDULER_AGENT_H_
