// Schedd: the policy daemon. In this version it keeps cluster membership
// (register, heartbeat, death detection, watch stream) and runs training
// jobs (JobTable: submit, hand out through heartbeats, track); ReportLinks and
// GetPolicy are declared in the API and answer UNIMPLEMENTED until the
// network-awareness and policy work lands.
//
// Threads: gRPC's, plus one "reaper" thread that expires silent nodes every
// heartbeat_interval/50 and logs membership changes. Thread-safe.
#ifndef HETPS_DAEMONS_SCHEDD_SCHEDD_H_
#define HETPS_DAEMONS_SCHEDD_SCHEDD_H_

#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "daemons/schedd/job_table.h"
#include "daemons/schedd/policy_loop.h"
#include "lib/base/clock.h"
#include "lib/config/config.h"
#include "lib/daemon/common_config.h"
#include "lib/daemon/daemon_main.h"
#include "lib/daemon/node_runtime.h"
#include "lib/job/job_spec.h"
#include "lib/membership/membership.h"

namespace hetps {

struct ScheddConfig {
  CommonConfig common = [] {
    CommonConfig c;
    c.listen = "127.0.0.1:7070";
    c.metrics_listen = "127.0.0.1:9470";
    return c;
  }();
  int64_t heartbeat_interval_ms = 500;
  int64_t dead_after_missed_heartbeats = 10;
  int64_t watch_queue_max = 1024;
  int64_t nodes_max = 10000;
  std::string state_dir;  // empty: in memory only
  int64_t readopt_grace_ms = 30000;
};

void DeclareScheddConfig(ConfigSchema* schema, ScheddConfig* config);

class Schedd final : public Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Schedd>> Create(const ScheddConfig& config,
                                                        const DaemonEnv& env,
                                                        const Clock* clock = RealClock::Get());
  ~Schedd() override;

  absl::Status Start() override;
  void Shutdown() override;
  NodeRuntime& runtime() override { return *runtime_; }
  Membership& membership() { return *membership_; }
  JobTable& jobs() { return *jobs_; }

 private:
  class Service;
  class Metrics;

  Schedd(const ScheddConfig& config, const Clock* clock);
  void ReaperLoop();
  // The active job's policy loop (policy_loop.h): a new plan when due.
  void RunPolicy();
  // JobTable::PlanSettledMs of the policy loop's plan in force.
  int64_t PlanSettledMs() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(policy_mu_);

  const ScheddConfig config_;
  const Clock* const clock_;
  std::unique_ptr<NodeRuntime> runtime_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<ScheddStore> store_;  // before jobs_: it outlives the table
  std::unique_ptr<JobTable> jobs_;
  // Network awareness and plans (ReportLinks, ListLinks, GetPolicy).
  absl::Mutex policy_mu_;
  LinkTable links_ ABSL_GUARDED_BY(policy_mu_);
  PolicyLoop policy_ ABSL_GUARDED_BY(policy_mu_);
  // The running job's spec and chunk count, parsed once per job.
  std::string spec_for_ ABSL_GUARDED_BY(policy_mu_);
  absl::StatusOr<JobSpec> spec_ ABSL_GUARDED_BY(policy_mu_) = absl::NotFoundError("no job");
  int64_t num_chunks_ ABSL_GUARDED_BY(policy_mu_) = 0;
  int64_t metrics_due_ms_ ABSL_GUARDED_BY(policy_mu_) = 0;  // next RefreshPolicy
  std::unique_ptr<Service> service_;
  std::thread reaper_;
  absl::Notification stop_;
  bool shut_down_ = false;
};

}  // namespace hetps

#endif  // HETPS_DAEMONS_SCHEDD_SCHEDD_H_
