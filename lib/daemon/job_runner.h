// JobRunner: the part of psd and workerd that turns schedd's job
// assignments (carried by heartbeat responses, docs/jobs.md) into one
// running job at a time, and reports on it in the next heartbeats.
//
// The SchedulerAgent calls OnJobAssignment and FillJobReport on its own
// thread; they never block on a job. Jobs run on the runner's thread:
//   new job id      -> the running job (if any) is asked to stop; the new
//                      one starts when the runner thread is free;
//   same id, newer  -> Latest() returns it; the job's loop reacts (roster,
//                      start flag); an ended state (succeeded, failed,
//                      cancelled) also asks the job to stop, and the node
//                      stops reporting it.
//   same id, newer recovery_epoch
//                   -> like a new job: the running part is stopped and
//                      started again from the new assignment (RunJob reads
//                      recovery_epoch and resume_round).
// A subclass implements RunJob (blocks until its part is done, calls
// MarkReady once built), StopJob (makes RunJob return soon; any thread)
// and FillProgress. Thread-safe.
#ifndef HETPS_LIB_DAEMON_JOB_RUNNER_H_
#define HETPS_LIB_DAEMON_JOB_RUNNER_H_

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/log.h"
#include "lib/daemon/link_meter.h"
#include "lib/daemon/scheduler_agent.h"
#include "lib/job/job_spec.h"
#include "proto/hetps/v1/scheduler.pb.h"

namespace hetps {

class JobRunner : public JobHandler {
 public:
  // `node_id`: this node's (its entry among a job's members names its
  // data address, whose traffic the link meter leaves out).
  JobRunner(Logger logger, std::string node_id);
  ~JobRunner() override;  // subclasses must call Shutdown() in theirs

  void Start();
  // Stops the running job and the thread. Idempotent.
  void Shutdown();

  bool FillJobReport(v1::NodeJobReport* report) final;
  // The id of the job this node is a member of and running now (not ended),
  // or empty.
  std::string ActiveJob() const;
  void OnJobAssignment(const v1::JobAssignment& assignment) final;
  // With an adaptive load_policy: the links into this node whose rate
  // moved by more than the job's report_rate, and the bytes it received
  // per bin over the last kTrafficReportBins bins (link_meter.h).
  void TakeLinkReports(const std::string& self, v1::ReportLinksRequest* out) final;
  static constexpr uint64_t kTrafficReportBins = 160;
  // Measures the links into this node from the flows its job receives:
  // install it as the data plane mux's observer.
  LinkMeter& link_meter() { return meter_; }

 protected:
  // Runs this node's part of the job to its end. An error is reported to
  // schedd (which fails the job); after StopJob the result is ignored.
  virtual absl::Status RunJob(const v1::JobAssignment& assignment, const JobSpec& spec) = 0;
  virtual void StopJob() = 0;
  virtual void FillProgress(v1::NodeJobReport* report) = 0;
  // Before every heartbeat, job or not (e.g. to refresh metrics).
  virtual void OnHeartbeatTick() {}
  // The data plane's per-peer estimates (RTT of each link reported).
  virtual std::vector<transport::PeerEstimate> PeerEstimates() const { return {}; }

  // For RunJob: its part is built and listening.
  void MarkReady();
  // For RunJob: waits up to `timeout` for a newer assignment of the running
  // job or a stop request; returns the newest assignment. False once the
  // job should stop.
  bool WaitUpdate(absl::Duration timeout, uint64_t known_roster, v1::JobAssignment* latest);
  // For RunJob: true once the running job should stop.
  bool StopRequested() const;
  const Logger& logger() const { return log_; }

 private:
  void Loop();

  const Logger log_;
  LinkMeter meter_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<v1::JobAssignment> pending_ ABSL_GUARDED_BY(mu_);
  // The job being reported: running, queued, or ended but not yet ended by
  // schedd's word.
  bool has_job_ ABSL_GUARDED_BY(mu_) = false;
  v1::JobAssignment current_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // RunJob in progress
  bool stop_ ABSL_GUARDED_BY(mu_) = false;     // the running job was asked to stop
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::string error_ ABSL_GUARDED_BY(mu_);
  bool adaptive_ ABSL_GUARDED_BY(mu_) = false;  // the running job reports its links
  const std::string self_;                      // this node's id
};

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_JOB_RUNNER_H_
