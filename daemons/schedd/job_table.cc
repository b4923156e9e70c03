#include "daemons/schedd/job_table.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/escape.h"
#include "lib/base/status_macros.h"
#include "lib/job/job_spec.h"
#include "lib/rpc/membership_proto.h"
#include "lib/transport/packet_auth.h"

namespace hetps {
namespace {

int64_t UnixMs(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t); }

bool Terminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

}  // namespace

JobTable::JobTable(const Clock* clock, Logger logger, size_t history_max)
    : clock_(clock), log_(std::move(logger)), history_max_(std::max<size_t>(1, history_max)) {}

bool JobTable::Active(const Job& j) { return !Terminal(j.assignment.state()); }

JobTable::Member* JobTable::FindMember(Job& j, const std::string& node_id) {
  for (Member& m : j.members) {
    if (m.m.node_id() == node_id) return &m;
  }
  return nullptr;
}

absl::StatusOr<v1::JobStatus> JobTable::Submit(const v1::SubmitJobRequest& req,
                                               const std::vector<NodeRecord>& alive) {
  const std::string origin = req.origin().empty() ? "job" : EscapeUntrusted(req.origin());
  absl::StatusOr<JobSpec> spec = ParseJobSpec(req.spec_yaml(), origin);
  if (!spec.ok()) return spec.status();
  std::vector<const NodeRecord*> servers, workers;
  for (const NodeRecord& n : alive) {
    if (n.state != NodeState::kAlive || n.data_address.empty()) continue;
    if (n.role == NodeRole::kServer) servers.push_back(&n);
    if (n.role == NodeRole::kWorker) workers.push_back(&n);
  }
  auto by_id = [](const NodeRecord* a, const NodeRecord* b) { return a->node_id < b->node_id; };
  std::sort(servers.begin(), servers.end(), by_id);
  std::sort(workers.begin(), workers.end(), by_id);
  auto pick = [](std::vector<const NodeRecord*>* v, uint32_t want,
                 const char* what) -> absl::Status {
    if (v->empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no live ", what, " with a data plane has registered"));
    }
    if (want > v->size()) {
      return absl::FailedPreconditionError(absl::StrCat("the job asks for ", want, " ", what,
                                                        "s but only ", v->size(), " are live"));
    }
    if (want > 0) v->resize(want);
    return absl::OkStatus();
  };

  absl::MutexLock lock(&mu_);
  if (!jobs_.empty() && Active(jobs_.back())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", jobs_.back().assignment.job_id(),
                     " is still active; wait for it or cancel it (psctl job cancel)"));
  }
  if (absl::Status s = pick(&servers, req.servers(), "server"); !s.ok()) return s;
  if (absl::Status s = pick(&workers, req.workers(), "worker"); !s.ok()) return s;

  Job j;
  j.submitted = clock_->Now();
  j.started = j.finished = absl::InfinitePast();
  j.name = spec->name;
  j.model = spec->model;
  j.checkpoint_every = spec->checkpoint_every_rounds;
  j.init_from_checkpoint = absl::StartsWith(spec->init_from, "checkpoint:");
  j.recover_timeout = absl::Seconds(spec->recover_timeout_s);
  ++submitted_;
  v1::JobAssignment& a = j.assignment;
  a.set_job_id(absl::StrFormat("job-%s-%d",
                               absl::FormatTime("%Y%m%d-%H%M%S", j.submitted, absl::UTCTimeZone()),
                               submitted_));
  // The text every member parses: the canonical form of what was validated.
  a.set_spec_yaml(JobSpecToYaml(*spec));
  if (absl::Status s = NewKey(&a); !s.ok()) return s;
  a.set_roster_version(1);
  a.set_state(v1::JOB_STATE_STARTING);
  auto add = [&](const NodeRecord* n, uint32_t rank, v1::JobMember* out) {
    out->set_node_id(n->node_id);
    out->set_data_address(n->data_address);
    out->set_rank(rank);
    out->set_alive(true);
    Member m;
    m.m = *out;
    m.role = n->role;
    m.incarnation = n->incarnation;
    j.members.push_back(std::move(m));
  };
  for (uint32_t i = 0; i < servers.size(); ++i) add(servers[i], i, a.add_servers());
  for (uint32_t i = 0; i < workers.size(); ++i) add(workers[i], i, a.add_workers());
  log_.Info("job submitted", {{"job_id", a.job_id()},
                              {"name", j.name},
                              {"model", j.model},
                              {"servers", static_cast<unsigned>(servers.size())},
                              {"workers", static_cast<unsigned>(workers.size())}});
  j.seq = submitted_;
  jobs_.push_back(std::move(j));
  while (jobs_.size() > history_max_) {
    if (store_ != nullptr) {
      if (absl::Status d = store_->DeleteJob(jobs_.front().seq); !d.ok()) {
        log_.Warn("schedd state: old job not removed", {{"error", d.message()}});
      }
    }
    jobs_.pop_front();
  }
  Save(jobs_.back(), true);  // NewKey saved the counters
  return Status(jobs_.back());
}

absl::Status JobTable::NewKey(v1::JobAssignment* a) {
  // A fresh key per job and per recovery; the id tells a late datagram of
  // the previous key (stale_key) from a forged one.
  absl::StatusOr<std::string> key = transport::RandomKeyBytes();
  if (!key.ok()) return key.status();
  ++keys_issued_;
  a->set_data_key(*key);
  a->set_data_key_id(uint32_t(1 + keys_issued_ % 255));
  SaveCounters();
  return absl::OkStatus();
}

absl::StatusOr<v1::JobStatus> JobTable::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  if (jobs_.empty()) return absl::NotFoundError("no job has been submitted yet");
  if (job_id.empty()) return Status(jobs_.back());
  for (const Job& j : jobs_) {
    if (j.assignment.job_id() == job_id) return Status(j);
  }
  return absl::NotFoundError(
      absl::StrCat("no job ", job_id, " (schedd keeps the last ", history_max_, " jobs)"));
}

absl::StatusOr<v1::JobStatus> JobTable::Cancel(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  for (Job& j : jobs_) {
    if (!job_id.empty() && j.assignment.job_id() != job_id) continue;
    if (job_id.empty() && &j != &jobs_.back()) continue;
    if (!Active(j)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", j.assignment.job_id(), " already ended (",
                       v1::JobState_Name(j.assignment.state()), ")"));
    }
    Finish(j, v1::JOB_STATE_CANCELLED, "cancelled by psctl job cancel");
    Save(j, true);
    return Status(j);
  }
  return absl::NotFoundError(job_id.empty() ? "no job has been submitted yet"
                                            : absl::StrCat("no job ", job_id));
}

void JobTable::OnHeartbeat(const NodeRecord& node, const v1::NodeJobReport* report,
                           v1::HeartbeatResponse* resp) {
  const std::string& node_id = node.node_id;
  const uint64_t incarnation = node.incarnation;
  absl::MutexLock lock(&mu_);
  const auto [seq, roster] = Newest();
  Job* current = jobs_.empty() ? nullptr : &jobs_.back();
  Member* me = current ? FindMember(*current, node_id) : nullptr;
  if (me != nullptr && me->awaited && me->m.alive()) Reclaim(*current, me, node, report);
  // Its old self was the member (the membership event may not be seen yet).
  if (me != nullptr && (!me->m.alive() || me->incarnation != incarnation)) me = nullptr;

  if (report != nullptr && me != nullptr && report->job_id() == current->assignment.job_id()) {
    me->report = *report;
    me->reported = true;
    me->last_report = clock_->Now();
    current->reports_dirty = true;
    if (me->role == NodeRole::kServer) {
      NotePlanSettled(*current);
      NotePlanRound(*current, *me);
    }
    if (Active(*current)) Advance(*current);
  }
  SaveIfChanged(seq, roster);
  if (me != nullptr) {
    const v1::JobAssignment& a = current->assignment;
    const bool stale = report == nullptr || report->job_id() != a.job_id() ||
                       report->roster_version() < a.roster_version();
    // Ended jobs are only sent to members still running them.
    const bool running_it = report != nullptr && report->job_id() == a.job_id();
    if (stale && (Active(*current) || running_it)) *resp->mutable_job() = a;
    return;
  }
  // Not a member of the newest job: a node still running another job (one
  // that ended, or one from before a schedd restart) is told to stop it.
  if (report != nullptr && !report->job_id().empty()) {
    v1::JobAssignment* stop = resp->mutable_job();
    stop->set_job_id(report->job_id());
    stop->set_roster_version(report->roster_version() + 1);
    stop->set_state(v1::JOB_STATE_CANCELLED);
  }
}

void JobTable::OnMembershipEvent(MembershipEventKind kind, const NodeRecord& n) {
  absl::MutexLock lock(&mu_);
  if (jobs_.empty() || !Active(jobs_.back())) return;
  Job& j = jobs_.back();
  Member* m = FindMember(j, n.node_id);
  // An awaited member's re-registration is expected; its heartbeat decides.
  if (m == nullptr || m->awaited) return;
  const auto [seq, roster] = Newest();
  if (m->m.alive()) {
    const char* why = nullptr;
    if ((kind == MembershipEventKind::kDied || kind == MembershipEventKind::kLeft) &&
        n.incarnation == m->incarnation) {
      why = kind == MembershipEventKind::kDied ? "died" : "left";
    } else if (kind == MembershipEventKind::kJoined && n.incarnation > m->incarnation) {
      why = "restarted";
    }
    if (why == nullptr) return;
    LoseMember(j, m, why);
  }
  if (kind == MembershipEventKind::kJoined && Active(j)) Readopt(j, m, n);
  SaveIfChanged(seq, roster);
}

bool JobTable::RecoveryDue() const {
  absl::MutexLock lock(&mu_);
  return !jobs_.empty() && jobs_.back().assignment.state() == v1::JOB_STATE_RECOVERING &&
         clock_->Now() >= jobs_.back().recover_deadline;
}

void JobTable::Tick(const std::vector<NodeRecord>& alive) {
  absl::MutexLock lock(&mu_);
  if (jobs_.empty()) return;
  Job& j = jobs_.back();
  const auto [seq, roster] = Newest();
  const absl::Time now = clock_->Now();
  for (Member& m : j.members) {
    if (!m.awaited || now < j.awaited_until || !Active(j)) continue;
    m.awaited = false;
    LoseMember(j, &m, "did not come back after schedd restarted");
  }
  SaveIfChanged(seq, roster);
  // Progress is saved at most every few seconds (not synced): after a
  // crash the members report it again.
  if (j.reports_dirty && now - reports_saved_ >= absl::Seconds(5)) {
    reports_saved_ = now;
    j.reports_dirty = false;
    Save(j, false);
  }
  if (j.assignment.state() != v1::JOB_STATE_RECOVERING || now < j.recover_deadline) {
    return;
  }
  // A psd that did not come back: a live psd outside the job adopts its
  // part from the checkpoints in its checkpoint_dir (shared storage).
  std::string missing, why;
  std::vector<std::string> taken;
  for (Member& m : j.members) {
    if (m.role != NodeRole::kServer || m.m.alive()) continue;
    const std::string dir = m.report.checkpoint_dir();  // a copy: Adopt clears the report
    const NodeRecord* spare = nullptr;
    for (const NodeRecord& n : alive) {
      if (n.role != NodeRole::kServer || n.state != NodeState::kAlive || n.data_address.empty() ||
          FindMember(j, n.node_id) != nullptr ||
          std::find(taken.begin(), taken.end(), n.node_id) != taken.end()) {
        continue;
      }
      if (spare == nullptr || n.node_id < spare->node_id) spare = &n;
    }
    if (dir.empty() || spare == nullptr) {
      absl::StrAppend(&missing, missing.empty() ? "" : ", ", m.m.node_id());
      why = dir.empty() ? "it reported no checkpoint_dir to adopt its part from"
                        : "no live psd outside the job can adopt its part";
      continue;
    }
    taken.push_back(spare->node_id);
    Adopt(j, &m, *spare, dir);
  }
  const std::string limit =
      absl::StrCat(absl::ToInt64Seconds(j.recover_timeout), " s (recover_timeout_s)");
  if (!taken.empty() && missing.empty()) {
    SaveIfChanged(seq, roster);
    return;
  }
  const char* step = j.assignment.resume_decided() ? "the members were not ready to resume"
                     : j.assignment.resume_round() > 0
                         ? "the psds did not load their checkpoints of the resume round"
                         : "the members did not offer their checkpoints";
  Finish(j, v1::JOB_STATE_FAILED,
         missing.empty() ? absl::StrCat(step, " within ", limit)
                         : absl::StrCat("server ", missing, " did not come back within ", limit,
                                        " and ", why, "; its shard of the parameters is lost"));
  Save(j, true);
}

void JobTable::Adopt(Job& j, Member* m, const NodeRecord& spare, const std::string& dir) {
  v1::JobAssignment& a = j.assignment;
  const std::string lost = m->m.node_id();
  m->m.set_node_id(spare.node_id);
  m->m.set_data_address(spare.data_address);
  m->m.set_alive(true);
  m->m.set_checkpoint_dir(dir);
  m->incarnation = spare.incarnation;
  m->reported = false;
  m->report.Clear();
  m->awaited = false;
  for (v1::JobMember& x : *a.mutable_servers()) {
    if (x.node_id() == lost) x = m->m;
  }
  log_.Warn("job member adopted", {{"job_id", a.job_id()},
                                   {"lost", lost},
                                   {"adopter", spare.node_id},
                                   {"index", m->m.rank()},
                                   {"checkpoint_dir", dir}});
  // A new epoch, as for a psd back at a new address (Readopt).
  BeginRecovery(j, absl::StrCat("server ", lost, " did not come back; ", spare.node_id,
                                " adopts its part from ", dir));
}

void JobTable::Reconcile(const std::vector<NodeRecord>& all) {
  absl::MutexLock lock(&mu_);
  if (jobs_.empty() || !Active(jobs_.back())) return;
  Job& j = jobs_.back();
  const auto [seq, roster] = Newest();
  for (Member& m : j.members) {
    if (!Active(j)) break;
    if (m.awaited) continue;  // its first heartbeat decides
    const NodeRecord* rec = nullptr;
    for (const NodeRecord& n : all) {
      if (n.node_id == m.m.node_id()) rec = &n;
    }
    if (m.m.alive()) {
      if (rec == nullptr || rec->state != NodeState::kAlive) {
        LoseMember(j, &m, "gone");
      } else if (rec->incarnation != m.incarnation) {
        LoseMember(j, &m, "restarted");
      }
    }
    if (rec != nullptr && Active(j)) Readopt(j, &m, *rec);
  }
  SaveIfChanged(seq, roster);
}

void JobTable::LoseMember(Job& j, Member* m, const char* why) {
  const std::string node_id = m->m.node_id();
  m->m.set_alive(false);
  SyncAssignment(j);
  j.assignment.set_roster_version(j.assignment.roster_version() + 1);
  log_.Warn("job member lost", {{"job_id", j.assignment.job_id()},
                                {"node_id", node_id},
                                {"role", NodeRoleName(m->role)},
                                {"why", why}});
  if (m->role == NodeRole::kServer) {
    const std::string lost = absl::StrCat("server ", node_id, " ", why);
    if (j.checkpoint_every <= 0 || j.recover_timeout <= absl::ZeroDuration()) {
      Finish(j, v1::JOB_STATE_FAILED,
             absl::StrCat(lost, "; its shard of the parameters is lost (",
                          j.checkpoint_every <= 0 ? "the job writes no checkpoints"
                                                  : "recover_timeout_s is 0",
                          ")"));
      return;
    }
    const std::string why =
        absl::StrCat(lost, "; waiting up to ", absl::ToInt64Seconds(j.recover_timeout),
                     " s for it, then every member resumes from the newest checkpoint");
    BeginRecovery(j, why);
    return;
  }
  Advance(j);
}

std::optional<v1::JobAssignment> JobTable::Running() const {
  absl::MutexLock lock(&mu_);
  if (jobs_.empty() || jobs_.back().assignment.state() != v1::JOB_STATE_RUNNING) {
    return std::nullopt;
  }
  return jobs_.back().assignment;
}

bool JobTable::IssuePlan(const v1::Policy& plan) {
  absl::MutexLock lock(&mu_);
  if (jobs_.empty()) return false;
  Job& j = jobs_.back();
  v1::JobAssignment& a = j.assignment;
  if (a.state() != v1::JOB_STATE_RUNNING || a.job_id() != plan.job_id() ||
      a.recovery_epoch() != plan.recovery_epoch()) {
    return false;
  }
  *a.mutable_plan() = plan;
  a.set_roster_version(a.roster_version() + 1);
  Save(j, true);
  std::string batches;  // by worker, as psctl policy show has them
  for (const v1::WorkerBatch& b : plan.worker_batches()) {
    absl::StrAppend(&batches, batches.empty() ? "" : "/", b.batch_size());
  }
  // What the map was made from, for reading a run's plans back from the log.
  std::string chunks, mbps;
  for (int64_t c : plan.server_chunks()) absl::StrAppend(&chunks, chunks.empty() ? "" : "/", c);
  for (double r : plan.server_throughput_bytes_per_second()) {
    absl::StrAppend(&mbps, mbps.empty() ? "" : "/", static_cast<int64_t>(std::lround(r * 8e-6)));
  }
  log_.Info("plan issued", {{"job_id", a.job_id()},
                            {"version", static_cast<unsigned long long>(plan.version())},
                            {"changed_fraction", plan.changed_fraction()},
                            {"chunks", chunks},
                            {"host_mbps", mbps},
                            {"batches", batches}});
  return true;
}

void JobTable::NotePlanSettled(Job& j) {
  const v1::JobAssignment& a = j.assignment;
  if (!a.has_plan() || a.state() != v1::JOB_STATE_RUNNING) return;
  const uint32_t v = uint32_t(a.plan().version());
  if (j.settled_epoch == a.recovery_epoch() && j.settled_version >= v) return;
  for (const Member& m : j.members) {
    if (m.role != NodeRole::kServer || !m.m.alive()) continue;
    const v1::NodeJobReport& r = m.report;
    if (!m.reported || r.job_id() != a.job_id() || r.recovery_epoch() != a.recovery_epoch() ||
        r.plan_version() < v || uint64_t(r.iteration()) <= r.plan_from()) {
      return;
    }
  }
  j.settled_epoch = a.recovery_epoch();
  j.settled_version = v;
  j.settled = clock_->Now();
}

void JobTable::NotePlanRound(Job& j, const Member& m) {
  const v1::JobAssignment& a = j.assignment;
  if (!a.has_plan() || a.state() != v1::JOB_STATE_RUNNING) return;
  const uint32_t v = uint32_t(a.plan().version());
  if (j.round_epoch != a.recovery_epoch() || j.round_version != v) {
    j.round_epoch = a.recovery_epoch();
    j.round_version = v;
    j.round_ms.clear();
  }
  const v1::NodeJobReport& r = m.report;
  // iteration counts the rounds closed, so from plan_from + 2 on the last
  // one is past the plan's first. A duration no round can have (over the
  // longest deadline, or not a number) says nothing.
  if (r.recovery_epoch() != a.recovery_epoch() || r.plan_version() != v || r.iteration() < 0 ||
      uint64_t(r.iteration()) < r.plan_from() + 2 ||
      !(r.last_round_ms() > 0 && r.last_round_ms() <= kRoundMsMax)) {
    return;
  }
  j.round_ms.emplace(m.m.node_id(), r.last_round_ms());  // the first one only
}

double JobTable::PlanRoundMs(const std::string& job_id, uint32_t recovery_epoch,
                             uint32_t version) const {
  absl::MutexLock lock(&mu_);
  if (jobs_.empty()) return 0;
  const Job& j = jobs_.back();
  if (j.assignment.job_id() != job_id || j.round_epoch != recovery_epoch ||
      j.round_version != version) {
    return 0;
  }
  double longest = 0;
  for (const Member& m : j.members) {
    if (m.role != NodeRole::kServer || !m.m.alive()) continue;
    auto it = j.round_ms.find(m.m.node_id());
    if (it == j.round_ms.end()) return 0;
    longest = std::max(longest, it->second);
  }
  return longest;
}

int64_t JobTable::PlanSettledMs(const std::string& job_id, uint32_t recovery_epoch,
                                uint32_t version) const {
  absl::MutexLock lock(&mu_);
  if (jobs_.empty()) return 0;
  const Job& j = jobs_.back();
  if (j.assignment.job_id() != job_id || j.settled_epoch != recovery_epoch ||
      j.settled_version != version) {
    return 0;
  }
  return absl::ToUnixMillis(j.settled);
}

void JobTable::BeginRecovery(Job& j, const std::string& why) {
  v1::JobAssignment& a = j.assignment;
  if (absl::Status s = NewKey(&a); !s.ok()) {
    Finish(j, v1::JOB_STATE_FAILED, absl::StrCat(why, "; recovery: ", s.message()));
    return;
  }
  // The epoch's plan comes from the checkpoint it resumes from.
  a.clear_plan();
  a.set_resume_decided(false);
  a.set_recovery_epoch(a.recovery_epoch() + 1);
  a.set_state(v1::JOB_STATE_RECOVERING);
  a.set_start(false);
  a.set_resume_round(0);
  a.set_roster_version(a.roster_version() + 1);
  j.recover_deadline = clock_->Now() + j.recover_timeout;
  j.message = why;
  log_.Warn("job recovering", {{"job_id", a.job_id()},
                               {"why", why},
                               {"recovery_epoch", static_cast<unsigned>(a.recovery_epoch())}});
}

void JobTable::Readopt(Job& j, Member* m, const NodeRecord& n) {
  v1::JobAssignment& a = j.assignment;
  if (m->m.alive() || m->role != NodeRole::kServer || a.state() != v1::JOB_STATE_RECOVERING ||
      n.state != NodeState::kAlive || n.incarnation <= m->incarnation || n.data_address.empty()) {
    return;
  }
  m->incarnation = n.incarnation;
  m->m.set_alive(true);
  m->m.set_data_address(n.data_address);
  m->reported = false;
  for (v1::JobMember& x : *a.mutable_servers()) {
    if (x.node_id() == n.node_id) {
      x.set_alive(true);
      x.set_data_address(n.data_address);
    }
  }
  log_.Info("job member back", {{"job_id", a.job_id()},
                                {"node_id", n.node_id},
                                {"incarnation", static_cast<unsigned long long>(n.incarnation)}});
  // A new epoch: every member rebuilds its part knowing the address the
  // psd has now, before any round starts (a worker built with the old one
  // would refuse its parameters).
  BeginRecovery(j, absl::StrCat("server ", n.node_id,
                                " is back; every member resumes from the newest checkpoint"));
}

void JobTable::SyncAssignment(Job& j) {
  for (const Member& m : j.members) {
    auto* list = m.role == NodeRole::kServer ? j.assignment.mutable_servers()
                                             : j.assignment.mutable_workers();
    for (v1::JobMember& x : *list) {
      if (x.node_id() == m.m.node_id()) x.set_alive(m.m.alive());
    }
  }
}

void JobTable::Advance(Job& j) {
  v1::JobAssignment& a = j.assignment;
  int live_workers = 0, done_workers = 0;
  int64_t total = -1;
  bool all_ready = true;
  for (const Member& m : j.members) {
    if (!m.m.alive()) {
      // A lost server holds up a recovery until it is back (or Tick fails it).
      all_ready = all_ready && m.role != NodeRole::kServer;
      continue;
    }
    // Only reports about the current recovery epoch count: the previous
    // epoch's errors (its servers vanished) and readiness are moot.
    const v1::NodeJobReport& r = m.report;
    const bool current = m.reported && r.recovery_epoch() == a.recovery_epoch();
    if (current && !r.error().empty()) {
      Finish(j, v1::JOB_STATE_FAILED, absl::StrCat(m.m.node_id(), ": ", r.error()));
      return;
    }
    all_ready = all_ready && current && r.ready();
    if (m.role == NodeRole::kWorker) {
      ++live_workers;
      if (current && r.done()) ++done_workers;
      if (current && r.ready()) {
        if (total >= 0 && r.total_iterations() != total) {
          Finish(j, v1::JOB_STATE_FAILED,
                 absl::StrCat("workers disagree on the job length (", total, " vs ",
                              r.total_iterations(), " iterations at ", m.m.node_id(),
                              "): do they read the same dataset?"));
          return;
        }
        total = r.total_iterations();
      }
    }
  }
  if (live_workers == 0) {
    Finish(j, v1::JOB_STATE_FAILED, "every worker of the job is gone");
    return;
  }
  if (a.state() == v1::JOB_STATE_STARTING && all_ready) {
    if (j.init_from_checkpoint) {
      // Every part must come from the same round of the earlier job.
      std::string rounds;
      std::vector<uint64_t> seen;
      for (const Member& m : j.members) {
        if (m.role != NodeRole::kServer || m.report.checkpoint_rounds_size() != 1) continue;
        seen.push_back(m.report.checkpoint_rounds(0));
        absl::StrAppend(&rounds, rounds.empty() ? "" : ", ", m.m.node_id(), " ", seen.back());
      }
      const bool same =
          std::adjacent_find(seen.begin(), seen.end(), std::not_equal_to<>()) == seen.end();
      if (!same) {
        Finish(j, v1::JOB_STATE_FAILED,
               absl::StrCat("init_from: the psds' checkpoints are of different rounds (", rounds,
                            "): name one every psd holds with @ROUND (psctl checkpoint show)"));
        return;
      }
    }
    if (total <= 0) {
      Finish(j, v1::JOB_STATE_FAILED, "the workers reported a job of 0 iterations");
      return;
    }
    a.set_state(v1::JOB_STATE_RUNNING);
    a.set_start(true);
    a.set_total_iterations(total);
    a.set_roster_version(a.roster_version() + 1);
    j.started = clock_->Now();
    log_.Info("job running", {{"job_id", a.job_id()}});
  }
  if (a.state() == v1::JOB_STATE_RECOVERING && !a.resume_decided()) DecideResume(j);
  if (a.state() == v1::JOB_STATE_RECOVERING && a.resume_decided() && all_ready) {
    Resume(j);
    return;
  }
  if (a.state() == v1::JOB_STATE_RUNNING && done_workers == live_workers) {
    Finish(j, v1::JOB_STATE_SUCCEEDED, "");
  }
}

void JobTable::DecideResume(Job& j) {
  v1::JobAssignment& a = j.assignment;
  // Every server back, and ready: it offered its checkpoints.
  std::vector<const Member*> servers;
  for (const Member& m : j.members) {
    if (m.role != NodeRole::kServer) continue;
    const bool current = m.reported && m.report.recovery_epoch() == a.recovery_epoch();
    if (!m.m.alive() || !current || !m.report.ready()) return;
    servers.push_back(&m);
  }
  // recover_timeout_s bounds each step of the resume, not all of them:
  // members that came back in time are not failed for the steps after.
  auto next_step = [&] {
    a.set_roster_version(a.roster_version() + 1);
    j.recover_deadline = clock_->Now() + j.recover_timeout;
  };
  auto decided = [&] {
    a.set_resume_decided(true);
    next_step();
  };
  if (a.resume_round() == 0) {
    const uint64_t round = ResumeRound(j);
    a.set_resume_round(int64_t(round));
    if (round == 0) {
      decided();  // the initial parameters, the even split
    } else {
      next_step();  // servers load it, then report its plan
    }
    log_.Info("resume round chosen",
              {{"job_id", a.job_id()}, {"round", static_cast<unsigned long long>(round)}});
    return;
  }
  // Each server loaded its checkpoint of the round: they were trained
  // under one plan, which the epoch starts under.
  const v1::Policy* plan = nullptr;
  for (const Member* m : servers) {
    if (m->report.resume_plan_round() != a.resume_round()) return;  // still loading
    const v1::Policy& p = m->report.resume_plan();
    if (plan == nullptr) {
      plan = &p;
      continue;
    }
    const bool same = std::equal(p.chunk_server().begin(), p.chunk_server().end(),
                                 plan->chunk_server().begin(), plan->chunk_server().end()) &&
                      p.worker_batches_size() == plan->worker_batches_size() &&
                      std::equal(p.worker_batches().begin(), p.worker_batches().end(),
                                 plan->worker_batches().begin(), [](const auto& x, const auto& y) {
                                   return x.worker_node_id() == y.worker_node_id() &&
                                          x.batch_size() == y.batch_size() &&
                                          x.resume_samples() == y.resume_samples();
                                 });
    if (!same) {
      Finish(j, v1::JOB_STATE_FAILED,
             absl::StrCat("recovery: the psds' checkpoints of round ", a.resume_round(),
                          " were trained under different plans (", servers[0]->m.node_id(), " and ",
                          m->m.node_id(), "); resume from another with init_from"));
      return;
    }
  }
  a.clear_plan();
  if (plan != nullptr && plan->chunk_server_size() > 0) {
    v1::Policy start = *plan;
    start.set_version(1);
    start.set_job_id(a.job_id());
    start.set_recovery_epoch(a.recovery_epoch());
    start.set_issued_unix_ms(UnixMs(clock_->Now()));
    *a.mutable_plan() = std::move(start);
  }
  decided();
  log_.Info("resume plan set", {{"job_id", a.job_id()},
                                {"round", static_cast<long long>(a.resume_round())},
                                {"even", a.has_plan() ? "no" : "yes"}});
}

uint64_t JobTable::ResumeRound(const Job& j) const {
  const v1::JobAssignment& a = j.assignment;
  // The newest round every server can load; round 0 (the initial
  // parameters) is always there. Reports are bounded: a server listing
  // more than keep-last rounds is hostile or misconfigured, not useful.
  constexpr int kRoundsRead = 1024;
  std::vector<uint64_t> common = {0};
  bool first = true;
  for (const Member& m : j.members) {
    if (m.role != NodeRole::kServer) continue;
    const auto& rounds = m.report.checkpoint_rounds();
    std::vector<uint64_t> mine(rounds.begin(),
                               rounds.begin() + std::min(rounds.size(), kRoundsRead));
    mine.push_back(0);
    std::sort(mine.begin(), mine.end());
    if (first) {
      common = std::move(mine);
      first = false;
      continue;
    }
    std::vector<uint64_t> both;
    std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(),
                          std::back_inserter(both));
    common = std::move(both);
  }
  uint64_t round = common.empty() ? 0 : common.back();
  if (a.total_iterations() > 0) round = std::min<uint64_t>(round, uint64_t(a.total_iterations()));
  return round;
}

void JobTable::Resume(Job& j) {
  v1::JobAssignment& a = j.assignment;
  const uint64_t round = uint64_t(a.resume_round());
  // Servers start round `round` at once; a job that had not started yet
  // gets its length from the workers now.
  if (a.total_iterations() <= 0) {
    for (const Member& m : j.members) {
      if (m.role == NodeRole::kWorker && m.m.alive()) {
        a.set_total_iterations(m.report.total_iterations());
      }
    }
    if (j.started == absl::InfinitePast()) j.started = clock_->Now();
  }
  a.set_state(v1::JOB_STATE_RUNNING);
  a.set_start(true);
  a.set_roster_version(a.roster_version() + 1);
  ++j.recoveries;
  j.message.clear();
  log_.Info("job resumed", {{"job_id", a.job_id()},
                            {"round", static_cast<unsigned long long>(round)},
                            {"recovery_epoch", static_cast<unsigned>(a.recovery_epoch())}});
}

void JobTable::Finish(Job& j, v1::JobState state, const std::string& message) {
  v1::JobAssignment& a = j.assignment;
  a.set_state(state);
  a.set_roster_version(a.roster_version() + 1);
  j.message = message;
  j.finished = clock_->Now();
  Logger::Field fields[] = {
      {"job_id", a.job_id()}, {"state", v1::JobState_Name(state)}, {"message", message}};
  if (state == v1::JOB_STATE_SUCCEEDED) {
    log_.Info("job ended", {fields[0], fields[1]});
  } else {
    log_.Warn("job ended", {fields[0], fields[1], fields[2]});
  }
}

v1::JobStatus JobTable::Status(const Job& j) const {
  v1::JobStatus s;
  const v1::JobAssignment& a = j.assignment;
  s.set_job_id(a.job_id());
  s.set_name(j.name);
  s.set_model(j.model);
  s.set_state(a.state());
  s.set_message(j.message);
  s.set_spec_yaml(a.spec_yaml());
  s.set_recoveries(j.recoveries);
  s.set_resume_round(a.resume_round());
  s.set_submitted_unix_ms(UnixMs(j.submitted));
  s.set_started_unix_ms(UnixMs(j.started));
  s.set_finished_unix_ms(UnixMs(j.finished));
  int64_t iteration = -1, total = 0;
  double loss = 0, sps = 0, acc = -1;
  int losses = 0;
  for (const Member& m : j.members) {
    v1::NodeJobStatus* n = s.add_nodes();
    n->set_node_id(m.m.node_id());
    n->set_role(m.role == NodeRole::kServer ? v1::ROLE_SERVER : v1::ROLE_WORKER);
    n->set_rank(m.m.rank());
    n->set_alive(m.m.alive());
    if (!m.reported) continue;
    *n->mutable_report() = m.report;
    n->set_last_report_unix_ms(UnixMs(m.last_report));
    const v1::NodeJobReport& r = m.report;
    if (m.role == NodeRole::kServer) {
      s.set_rounds_by_deadline(s.rounds_by_deadline() + r.rounds_by_deadline());
      s.set_rounds_by_membership(s.rounds_by_membership() + r.rounds_by_membership());
      continue;
    }
    total = std::max(total, r.total_iterations());
    acc = std::max(acc, r.test_accuracy());
    if (!m.m.alive()) continue;
    iteration = iteration < 0 ? r.iteration() : std::min(iteration, r.iteration());
    if (r.iteration() > 0) {
      loss += r.loss();
      ++losses;
    }
    if (!r.done()) sps += r.samples_per_second();
  }
  s.set_iteration(std::max<int64_t>(0, iteration));
  s.set_total_iterations(total);
  s.set_loss(losses > 0 ? loss / losses : 0);
  s.set_test_accuracy(acc);
  s.set_samples_per_second(sps);
  return s;
}

absl::Status JobTable::UseStore(ScheddStore* store, absl::Duration readopt_grace) {
  ASSIGN_OR_RETURN(ScheddStore::Loaded loaded, store->Load());
  absl::MutexLock lock(&mu_);
  store_ = store;
  for (const std::string& why : loaded.skipped) {
    log_.Error("schedd state: a job record was skipped", {{"why", why}});
  }
  submitted_ = loaded.counters.jobs_submitted();
  keys_issued_ = loaded.counters.keys_issued();
  next_incarnation_ = std::max<uint64_t>(1, loaded.counters.next_incarnation());
  for (const v1::JobRecord& r : loaded.jobs) {
    submitted_ = std::max(submitted_, r.seq());  // never a job id twice
    jobs_.push_back(FromRecord(r));
  }
  while (jobs_.size() > history_max_) jobs_.pop_front();
  if (jobs_.empty() || !Active(jobs_.back())) {
    log_.Info(
        "schedd state loaded",
        {{"dir", store->dir()}, {"jobs", static_cast<unsigned>(jobs_.size())}, {"active", "none"}});
    return absl::OkStatus();
  }
  Job& j = jobs_.back();
  const absl::Time now = clock_->Now();
  j.awaited_until = now + readopt_grace;
  for (Member& m : j.members) m.awaited = m.m.alive();
  const v1::JobState was = j.assignment.state();
  if (was != v1::JOB_STATE_RUNNING) {
    // Starting or recovering: members may hold the old key or none (it is
    // not stored); every member restarts its part under a new one.
    BeginRecovery(j, "schedd restarted");
    j.recover_deadline = std::max(j.recover_deadline, j.awaited_until);
  }
  log_.Warn("schedd state loaded: awaiting the active job's members",
            {{"dir", store->dir()},
             {"jobs", static_cast<unsigned>(jobs_.size())},
             {"job_id", j.assignment.job_id()},
             {"state", v1::JobState_Name(was)},
             {"grace_s", absl::ToInt64Seconds(readopt_grace)}});
  Save(j, true);
  return absl::OkStatus();
}

uint64_t JobTable::next_incarnation() const {
  absl::MutexLock lock(&mu_);
  return next_incarnation_;
}

void JobTable::SetNextIncarnation(uint64_t next) {
  absl::MutexLock lock(&mu_);
  next_incarnation_ = std::max(next_incarnation_, next);
  SaveCounters();
}

void JobTable::Reclaim(Job& j, Member* m, const NodeRecord& node, const v1::NodeJobReport* report) {
  const uint64_t incarnation = node.incarnation;
  m->awaited = false;
  const v1::JobAssignment& a = j.assignment;
  // The same process still runs its part: its report names the job (and,
  // for a running job, the epoch it runs; a restored job that was
  // starting or recovering restarts every part anyway).
  const bool runs_it =
      report != nullptr && report->job_id() == a.job_id() &&
      (a.state() != v1::JOB_STATE_RUNNING || report->recovery_epoch() == a.recovery_epoch());
  if (!runs_it) {
    // (A job that ended meanwhile needs nothing more from it.)
    if (Active(j)) {
      LoseMember(j, m, "lost its part while schedd was away");
      // A psd of a checkpointed job: back already, it takes its part again.
      if (Active(j)) Readopt(j, m, node);
    }
    return;
  }
  m->incarnation = incarnation;
  log_.Info("job member back after schedd restarted",
            {{"job_id", a.job_id()},
             {"node_id", m->m.node_id()},
             {"incarnation", static_cast<unsigned long long>(incarnation)}});
}

std::pair<uint64_t, uint64_t> JobTable::Newest() const {
  if (jobs_.empty()) return {0, 0};
  return {jobs_.back().seq, jobs_.back().assignment.roster_version()};
}

void JobTable::SaveIfChanged(uint64_t seq, uint64_t roster) {
  if (jobs_.empty()) return;
  Job& j = jobs_.back();
  if (j.seq != seq || j.assignment.roster_version() != roster) Save(j, true);
}

void JobTable::Save(Job& j, bool sync) {
  if (store_ == nullptr) return;
  if (absl::Status s = store_->PutJob(ToRecord(j), sync); !s.ok()) {
    log_.Error("schedd state: job not saved; a restart would lose this change",
               {{"job_id", j.assignment.job_id()}, {"error", s.message()}});
    return;
  }
  j.reports_dirty = false;
}

void JobTable::SaveCounters() {
  if (store_ == nullptr) return;
  v1::ScheddCounters c;
  c.set_jobs_submitted(submitted_);
  c.set_keys_issued(keys_issued_);
  c.set_next_incarnation(next_incarnation_);
  if (absl::Status s = store_->PutCounters(c); !s.ok()) {
    log_.Error("schedd state: counters not saved", {{"error", s.message()}});
  }
}

v1::JobRecord JobTable::ToRecord(const Job& j) {
  v1::JobRecord r;
  r.set_seq(j.seq);
  *r.mutable_assignment() = j.assignment;
  r.mutable_assignment()->clear_data_key();  // members hold it; never on disk
  r.set_name(j.name);
  r.set_model(j.model);
  r.set_message(j.message);
  r.set_submitted_unix_ms(UnixMs(j.submitted));
  r.set_started_unix_ms(UnixMs(j.started));
  r.set_finished_unix_ms(UnixMs(j.finished));
  r.set_checkpoint_every_rounds(j.checkpoint_every);
  r.set_recover_timeout_s(absl::ToInt64Seconds(j.recover_timeout));
  r.set_recoveries(j.recoveries);
  for (const Member& m : j.members) {
    v1::MemberRecord* out = r.add_members();
    *out->mutable_member() = m.m;
    out->set_role(RoleToProto(m.role));
    out->set_incarnation(m.incarnation);
    out->set_reported(m.reported);
    if (m.reported) *out->mutable_report() = m.report;
    out->set_last_report_unix_ms(UnixMs(m.last_report));
  }
  return r;
}

JobTable::Job JobTable::FromRecord(const v1::JobRecord& r) {
  auto time = [](int64_t ms) { return ms == 0 ? absl::InfinitePast() : absl::FromUnixMillis(ms); };
  Job j;
  j.seq = r.seq();
  j.assignment = r.assignment();
  j.name = r.name();
  j.model = r.model();
  j.message = r.message();
  j.submitted = time(r.submitted_unix_ms());
  j.started = time(r.started_unix_ms());
  j.finished = time(r.finished_unix_ms());
  j.checkpoint_every = r.checkpoint_every_rounds();
  j.recover_timeout = absl::Seconds(std::clamp<int64_t>(r.recover_timeout_s(), 0, 86'400));
  j.recoveries = r.recoveries();
  for (const v1::MemberRecord& mr : r.members()) {
    Member m;
    m.m = mr.member();
    m.role = RoleFromProto(mr.role());
    m.incarnation = mr.incarnation();
    m.reported = mr.reported();
    m.report = mr.report();
    m.last_report = time(mr.last_report_unix_ms());
    j.members.push_back(std::move(m));
  }
  return j;
}

std::vector<std::pair<v1::JobState, int>> JobTable::StateCounts() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<v1::JobState, int>> out;
  for (int s = v1::JOB_STATE_STARTING; s <= v1::JOB_STATE_RECOVERING; ++s) {
    int n = 0;
    for (const Job& j : jobs_) n += j.assignment.state() == s;
    out.push_back({static_cast<v1::JobState>(s), n});
  }
  return out;
}

}  // namespace hetps
