// JobTable: schedd's record of training jobs and the state machine that
// drives them (docs/jobs.md). One job is active at a time:
//
//   Submit ──> STARTING ──(every member reported ready)──> RUNNING
//      RUNNING ──(every live worker done)──> SUCCEEDED
//      any active state ──(server lost, job checkpoints)──> RECOVERING
//      RECOVERING ──(lost servers back, every member ready)──> RUNNING
//      any active state ──(member error, server lost without checkpoints
//                          or not back by recover_timeout_s, no worker
//                          left)──> FAILED
//      any active state ──(Cancel)──> CANCELLED
//
// Members learn everything from their heartbeat responses: whenever a
// member's report shows an older job or roster_version, the response
// carries the current JobAssignment. A dead worker is dropped from the
// roster (servers stop waiting for it). A dead server's shard is gone from
// memory: with checkpoints the job waits for the server to re-register
// (same node id, new incarnation), then every member restarts its part in
// a new recovery epoch, with a new data key, from the newest round every
// server holds a valid checkpoint of (docs/jobs.md, "Recovery").
//
// Membership events arrive from schedd's reaper; an event only concerns a
// member if it is about the incarnation the job was given (a node that
// restarts loses its part, so its new incarnation is not the member until
// a recovery re-adopts it).
//
// With a store (UseStore), every change members act on is on disk before
// they hear of it, and a restarted schedd carries on: the newest job, if
// active, awaits its members (below); jobs, their progress and the
// counters behind job ids, data-key ids and incarnations survive.
//
// After a restart every node re-registers with a new incarnation. A
// member of the restored active job is "awaited" until its first
// heartbeat: one that still runs the job (its report names it) is the
// member again at its new incarnation, so a job goes on, or is recorded
// as ended with the outcome its members report; one that does not lost
// its part while schedd was away; one not heard of within the grace period
// is lost.
//
// Thread-safe; every method is O(members) or O(history).
#ifndef HETPS_DAEMONS_SCHEDD_JOB_TABLE_H_
#define HETPS_DAEMONS_SCHEDD_JOB_TABLE_H_

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemons/schedd/state_store.h"
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
  // node must (re)apply an assignment. Only the member's incarnation is the
  // member: a restarted node is not, until a recovery re-adopts it.
  void OnHeartbeat(const NodeRecord& node, const v1::NodeJobReport* report,
                   v1::HeartbeatResponse* resp);
  // A membership event about `node` (as membership recorded it).
  void OnMembershipEvent(MembershipEventKind kind, const NodeRecord& node);
  // A recovery past its job's recover_timeout_s: each psd still lost is
  // adopted by a live psd outside the job (from `alive`, as membership
  // lists them) that reads its checkpoints from the checkpoint_dir it
  // reported; without one the job fails. Called periodically.
  void Tick(const std::vector<NodeRecord>& alive);
  // Whether the next Tick may adopt (a recovery past its deadline).
  bool RecoveryDue() const;

  // Applies the full membership table (`all`, departed nodes included) after
  // events may have been missed.
  void Reconcile(const std::vector<NodeRecord>& all);

  // Loads what `store` holds (not owned; outlives the table) and saves
  // every change to it from now on. Call once, before anything else.
  // `readopt_grace`: how long a restored job's members have to come back.
  absl::Status UseStore(ScheddStore* store, absl::Duration readopt_grace);
  // Incarnations: where membership starts, and what it hands out next
  // (saved before the node hears of it).
  uint64_t next_incarnation() const;
  void SetNextIncarnation(uint64_t next);

  // The newest job when it is RUNNING: its assignment (policy loop).
  std::optional<v1::JobAssignment> Running() const;
  // A new plan for the running job in its recovery epoch (the plan's
  // job_id and recovery_epoch): members get it with the assignment, and
  // server 0 sequences it (docs/plan.md). False when that job or epoch is
  // no longer running.
  bool IssuePlan(const v1::Policy& plan);
  // When (unix ms) every live server of that job and epoch had closed
  // the first round of plan `version`, the one that waits for moved
  // chunks, as their heartbeats said; 0 while one has not, or for another
  // job, epoch or version. Traffic from before it describes the switch.
  int64_t PlanSettledMs(const std::string& job_id, uint32_t recovery_epoch, uint32_t version) const;
  // The first round after that first one, the first the map itself sets,
  // in ms: its longest at any live server (each psd's last_round_ms once
  // it reported a round past it); 0 while one has not, or for another
  // job, epoch or version.
  double PlanRoundMs(const std::string& job_id, uint32_t recovery_epoch, uint32_t version) const;
  // A reported round longer than this (a day; deadlines end at an hour)
  // is no round's: PlanRoundMs ignores it.
  static constexpr double kRoundMsMax = 86'400'000;

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
    bool awaited = false;  // restored from the store, not heard from since
  };
  struct Job {
    v1::JobAssignment assignment;
    std::string name, model, message;
    absl::Time submitted, started, finished;
    std::vector<Member> members;        // servers by index, then workers by rank
    int64_t checkpoint_every = 0;       // from the spec
    bool init_from_checkpoint = false;  // init_from: checkpoint:...
    absl::Duration recover_timeout;
    absl::Time recover_deadline;  // while RECOVERING
    uint32_t recoveries = 0;      // completed
    uint64_t seq = 0;             // its key in the store
    absl::Time awaited_until;     // restored members' grace period
    bool reports_dirty = false;   // reports not yet saved
    // The newest plan every server closed a first round of, and when.
    uint32_t settled_epoch = 0, settled_version = 0;
    absl::Time settled;
    // Of the newest plan: each server's first round after its first
    // (PlanRoundMs), by node id.
    uint32_t round_epoch = 0, round_version = 0;
    std::map<std::string, double> round_ms;
  };

  static bool Active(const Job& j);
  Member* FindMember(Job& j, const std::string& node_id);
  // Re-evaluates state transitions after a report or a loss.
  void Advance(Job& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(Job& j, v1::JobState state, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SyncAssignment(Job& j);  // member aliveness into the assignment
  void NotePlanSettled(Job& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotePlanRound(Job& j, const Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseMember(Job& j, Member* m, const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A recovery epoch, in order: every server ready (its checkpoints
  // offered) -> DecideResume picks the round; every server loaded it and
  // reported its plan -> DecideResume sets the epoch's plan and
  // resume_decided; every member ready (workers build under that plan) ->
  // Resume starts. Docs: docs/jobs.md, "Recovery".
  void DecideResume(Job& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The newest round every server holds a checkpoint of (0: none).
  uint64_t ResumeRound(const Job& j) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Resume(Job& j) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new recovery epoch: new key, every member restarts its part; `why`
  // becomes the job's message. Fails the job if no key can be made.
  void BeginRecovery(Job& j, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `spare` takes over lost server `m`'s part, reading `dir`.
  void Adopt(Job& j, Member* m, const NodeRecord& spare, const std::string& dir)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A lost server back with a newer incarnation becomes the member again.
  void Readopt(Job& j, Member* m, const NodeRecord& n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets a fresh data key and id (never the previous id).
  absl::Status NewKey(v1::JobAssignment* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobStatus Status(const Job& j) const;
  // The store: a job's record (sync: before members hear of the change)
  // and the counters. Errors are logged; schedd goes on in memory.
  void Save(Job& j, bool sync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveCounters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves the newest job when its assignment changed since `roster`.
  void SaveIfChanged(uint64_t seq, uint64_t roster) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::pair<uint64_t, uint64_t> Newest() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static v1::JobRecord ToRecord(const Job& j);
  static Job FromRecord(const v1::JobRecord& r);
  // An awaited member's first heartbeat since the restart: the member
  // again at its new incarnation, or lost (and, a psd of a checkpointed
  // job, re-adopted for the recovery).
  void Reclaim(Job& j, Member* m, const NodeRecord& node, const v1::NodeJobReport* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const Logger log_;
  const size_t history_max_;
  mutable absl::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);  // newest last
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t keys_issued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_incarnation_ ABSL_GUARDED_BY(mu_) = 1;
  ScheddStore* store_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time reports_saved_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps

#endif  // HETPS_DAEMONS_SCHEDD_JOB_TABLE_H_
