// JobTable: schedd's record of training jobs and the state machine that
// drives them (docs/jobs.md). One job is active at a time:
//
//   Submit ──> STARTING ──(every member reported ready)──> RUNNING
//      RUNNING ──(every live worker done)──> SUCCEEDED
//      any active state ──(member error, server lost, no worker left)──> FAILED
//      any active state ──(Cancel)──> CANCELLED
//
// Members learn everything from their heartbeat responses: whenever a
// member's report shows an older job or roster_version, the response
// carries the current JobAssignment. A dead worker is dropped from the
// roster (servers stop waiting for it); a dead server fails the job, since
// its shard of the parameters is gone (checkpoints come later).
//
// Membership events arrive from schedd's reaper; an event only concerns a
// member if it is about the incarnation the job was given (a node that
// restarts loses its part, so its new incarnation is not the member).
//
// Thread-safe; every method is O(members) or O(history).
#ifndef HETPS_DAEMONS_SCHEDD_JOB_TABLE_H_
#define HETPS_DAEMONS_SCHEDD_JOB_TABLE_H_

#include <deque>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/clock.h"
#include "lib/base/log.h"
#include "lib/membership/membership.h"
#include "proto/hetps/v1/scheduler.pb.h"

namespace hetps {

class JobTable {
 public:
  JobTable(const Clock* clock, Logger logger, size_t history_max = 16);

  // Validates the spec and picks members from `alive` (live nodes as
  // membership lists them): servers and workers that have a data address,
  // by node id. Errors: INVALID_ARGUMENT (spec, counts),
  // FAILED_PRECONDITION (a job is active, too few nodes).
  absl::StatusOr<v1::JobStatus> Submit(const v1::SubmitJobRequest& req,
                                       const std::vector<NodeRecord>& alive);
  // Empty id: the newest job. NOT_FOUND when there is none.
  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) const;
  // FAILED_PRECONDITION when the job already ended.
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id);

  // Records a member's report (may be null) and fills resp->job when the
  // node must (re)apply an assignment.
  void OnHeartbeat(const std::string& node_id, const v1::NodeJobReport* report,
                   v1::HeartbeatResponse* resp);
  // A membership event for (node_id, incarnation).
  void OnMembershipEvent(MembershipEventKind kind, const std::string& node_id,
                         uint64_t incarnation);

  // Applies the full membership table (`all`, departed nodes included) after
  // events may have been missed.
  void Reconcile(const std::vector<NodeRecord>& all);

  // Counts for metrics: jobs ever submitted per final or current state.
  std::vector<std::pair<v1::JobState, int>> StateCounts() const;

 private:
  struct Member {
    v1::JobMember m;
    NodeRole role = NodeRole::kUnspecified;
    uint64_t incarnation = 0;
    v1::NodeJobReport report;
    bool reported = false;
    absl::Time last_report;
  };
  struct Job {
    v1::JobAssignment assignment;
    std::string name, model, message;
    absl::Time submitted, started, finished;
    std::vector<Member> members;  // servers by index, then workers by rank
  };

  static bool Active(const Job& j);
  Member* FindMember(Job& j, const std::string& node_id);
  // Re-evaluates state transitions after a report or a loss.
  void Advance(Job& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(Job& j, v1::JobState state, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SyncAssignment(Job& j);  // member aliveness into the assignment
  void LoseMember(Job& j, Member* m, const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobStatus Status(const Job& j) const;

  const Clock* const clock_;
  const Logger log_;
  const size_t history_max_;
  mutable absl::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);  // newest last
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace hetps

#endif  // HETPS_DAEMONS_SCHEDD_JOB_TABLE_H_
