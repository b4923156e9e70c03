// JobTable: validation, member selection, hand-out through heartbeats, and
// every state transition of the job state machine.
#include "daemons/schedd/job_table.h"

#include <rocksdb/db.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "lib/base/test_dir.h"

namespace hetps {
namespace {

NodeRecord Node(const std::string& id, NodeRole role, uint64_t incarnation = 1,
                const std::string& data = "127.0.0.1:5000") {
  NodeRecord n;
  n.node_id = id;
  n.role = role;
  n.incarnation = incarnation;
  n.data_address = data;
  return n;
}

std::vector<NodeRecord> Cluster() {
  return {Node("psd-1", NodeRole::kServer), Node("psd-0", NodeRole::kServer),
          Node("worker-1", NodeRole::kWorker), Node("worker-0", NodeRole::kWorker),
          Node("worker-x", NodeRole::kWorker, 1, "")};  // no data plane: never picked
}

v1::SubmitJobRequest Request(const std::string& yaml = "model: mlp\nepochs: 1\n") {
  v1::SubmitJobRequest r;
  r.set_spec_yaml(yaml);
  r.set_origin("test.yaml");
  return r;
}

// What a member would send after applying `a`, with extra fields set.
v1::NodeJobReport Report(const v1::JobAssignment& a, bool ready, bool done = false) {
  v1::NodeJobReport r;
  r.set_job_id(a.job_id());
  r.set_roster_version(a.roster_version());
  r.set_ready(ready);
  r.set_done(done);
  if (ready) r.set_total_iterations(100);
  return r;
}

struct Fixture {
  FakeClock clock;
  JobTable table{&clock, Logger()};

  v1::JobAssignment Beat(const std::string& node, const v1::NodeJobReport* r,
                         uint64_t incarnation = 1) {
    v1::HeartbeatResponse resp;
    table.OnHeartbeat(Node(node, NodeRole::kUnspecified, incarnation), r, &resp);
    return resp.job();
  }
  void Event(MembershipEventKind kind, const std::string& node, uint64_t incarnation,
             const std::string& data = "127.0.0.1:5000") {
    NodeRecord n = Node(node, NodeRole::kUnspecified, incarnation, data);
    if (kind != MembershipEventKind::kJoined) n.state = NodeState::kDead;
    table.OnMembershipEvent(kind, n);
  }
  v1::JobState State() { return table.Get("")->state(); }
};

}  // namespace

TEST_CASE("Submit validates the spec and picks members by node id") {
  Fixture f;
  auto bad = f.table.Submit(Request("model: resnet\nepochs: 1\n"), Cluster());
  REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("test.yaml") != std::string::npos);
  CHECK(std::string(bad.status().message()).find("model") != std::string::npos);
  CHECK(f.table.Get("").status().code() == absl::StatusCode::kNotFound);

  auto too_many = f.table.Submit(
      [] {
        auto r = Request();
        r.set_workers(3);  // worker-x has no data address
        return r;
      }(),
      Cluster());
  CHECK(too_many.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(f.table.Submit(Request(), {Node("psd-0", NodeRole::kServer)}).status().code() ==
        absl::StatusCode::kFailedPrecondition);

  auto job = f.table.Submit(Request(), Cluster());
  REQUIRE(job.ok());
  CHECK(job->state() == v1::JOB_STATE_STARTING);
  CHECK(job->model() == "mlp");
  REQUIRE(job->nodes_size() == 4);
  CHECK(job->nodes(0).node_id() == "psd-0");
  CHECK(job->nodes(1).node_id() == "psd-1");
  CHECK(job->nodes(2).node_id() == "worker-0");
  CHECK(job->nodes(3).node_id() == "worker-1");
  CHECK(job->nodes(3).rank() == 1);
  // The spec members get is the canonical form and parses back.
  CHECK(job->spec_yaml().find("model: \"mlp\"") != std::string::npos);

  // One active job at a time.
  auto second = f.table.Submit(Request(), Cluster());
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(second.status().message()).find(job->job_id()) != std::string::npos);
}

TEST_CASE("Assignments go out until applied; start after every member is ready") {
  Fixture f;
  REQUIRE(f.table.Submit(Request(), Cluster()).ok());
  // Non-members get nothing.
  CHECK(f.Beat("worker-x", nullptr).job_id().empty());
  v1::JobAssignment a = f.Beat("psd-0", nullptr);
  REQUIRE(!a.job_id().empty());
  CHECK(a.state() == v1::JOB_STATE_STARTING);
  CHECK_FALSE(a.start());
  CHECK(a.servers_size() == 2);
  CHECK(a.workers_size() == 2);
  CHECK(a.data_key().size() == 32);  // a fresh key for this job, to members only
  // Applied (same roster version): nothing more to send.
  v1::NodeJobReport building = Report(a, false);
  CHECK(f.Beat("psd-0", &building).job_id().empty());

  std::vector<std::string> members = {"psd-0", "psd-1", "worker-0", "worker-1"};
  for (size_t i = 0; i < members.size(); ++i) {
    v1::NodeJobReport ready = Report(a, true);
    v1::JobAssignment got = f.Beat(members[i], &ready);
    if (i + 1 < members.size()) {
      CHECK(got.job_id().empty());
      CHECK(f.State() == v1::JOB_STATE_STARTING);
    } else {
      // The last one ready starts the job, and learns it in the same reply.
      CHECK(got.start());
      CHECK(got.state() == v1::JOB_STATE_RUNNING);
      CHECK(got.total_iterations() == 100);
    }
  }
  CHECK(f.State() == v1::JOB_STATE_RUNNING);
  v1::NodeJobReport old = Report(a, true);
  v1::JobAssignment started = f.Beat("psd-1", &old);
  CHECK(started.start());
  CHECK(started.roster_version() > a.roster_version());

  // Progress is aggregated; done workers end the job.
  v1::NodeJobReport w0 = Report(started, true), w1 = Report(started, true);
  w0.set_iteration(40);
  w1.set_iteration(38);
  w0.set_total_iterations(100);
  w1.set_total_iterations(100);
  w0.set_loss(1.0);
  w1.set_loss(0.5);
  w0.set_test_accuracy(0.7);
  w1.set_test_accuracy(-1);
  w0.set_samples_per_second(1000);
  w1.set_samples_per_second(900);
  f.Beat("worker-0", &w0);
  f.Beat("worker-1", &w1);
  v1::JobStatus s = *f.table.Get("");
  CHECK(s.iteration() == 38);
  CHECK(s.total_iterations() == 100);
  CHECK(s.loss() == Approx(0.75));
  CHECK(s.test_accuracy() == Approx(0.7));
  CHECK(s.samples_per_second() == Approx(1900));

  w0.set_done(true);
  f.Beat("worker-0", &w0);
  CHECK(f.State() == v1::JOB_STATE_RUNNING);
  w1.set_done(true);
  v1::JobAssignment end = f.Beat("worker-1", &w1);
  CHECK(end.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(f.State() == v1::JOB_STATE_SUCCEEDED);
  // A member still running the ended job hears of it once; a member that
  // dropped it is left alone.
  CHECK(f.Beat("psd-0", &old).state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(f.Beat("psd-0", nullptr).job_id().empty());
  // A new job may be submitted now.
  CHECK(f.table.Submit(Request(), Cluster()).ok());
}

// The job running, with plan version 2 issued; returns its assignment.
v1::JobAssignment RunningWithPlan2(Fixture* f) {
  REQUIRE(f->table.Submit(Request(), Cluster()).ok());
  v1::JobAssignment a = f->Beat("psd-0", nullptr);
  for (const char* m : {"psd-0", "psd-1", "worker-0", "worker-1"}) {
    v1::NodeJobReport ready = Report(a, true);
    f->Beat(m, &ready);
  }
  REQUIRE(f->State() == v1::JOB_STATE_RUNNING);
  v1::Policy plan;
  plan.set_job_id(a.job_id());
  plan.set_version(2);
  REQUIRE(f->table.IssuePlan(plan));
  return f->Beat("psd-0", nullptr);
}

TEST_CASE("A plan settles when every server closed its first round") {
  Fixture f;
  v1::JobAssignment a = RunningWithPlan2(&f);
  auto server = [&](const char* node, uint32_t version, uint64_t from, int64_t iteration) {
    v1::NodeJobReport r = Report(a, true);
    r.set_plan_version(version);
    r.set_plan_from(from);
    r.set_iteration(iteration);
    f.Beat(node, &r);
  };
  server("psd-0", 1, 0, 10);
  server("psd-1", 1, 0, 10);
  CHECK(f.table.PlanSettledMs(a.job_id(), 0, 2) == 0);
  server("psd-0", 2, 11, 11);  // in its first round under version 2
  server("psd-1", 2, 11, 12);  // closed it
  CHECK(f.table.PlanSettledMs(a.job_id(), 0, 2) == 0);
  f.clock.Advance(absl::Seconds(3));
  server("psd-0", 2, 11, 12);
  const int64_t at = absl::ToUnixMillis(f.clock.Now());
  CHECK(f.table.PlanSettledMs(a.job_id(), 0, 2) == at);
  // Later reports do not move it; other versions, epochs and jobs have none.
  f.clock.Advance(absl::Seconds(1));
  server("psd-1", 2, 11, 13);
  CHECK(f.table.PlanSettledMs(a.job_id(), 0, 2) == at);
  CHECK(f.table.PlanSettledMs(a.job_id(), 0, 3) == 0);
  CHECK(f.table.PlanSettledMs(a.job_id(), 1, 2) == 0);
  CHECK(f.table.PlanSettledMs("job-other", 0, 2) == 0);
}

// The round after a plan's first is the first the map itself sets: each
// psd says how long it took once it reported a round past it, and the
// plan's is the longest at any live psd.
TEST_CASE("A plan's first round of its own is its longest at any server") {
  Fixture f;
  v1::JobAssignment a = RunningWithPlan2(&f);
  uint64_t from = 11;  // the plan's first round
  auto server = [&](const char* node, uint32_t version, int64_t iteration, double round_ms) {
    v1::NodeJobReport r = Report(a, true);
    r.set_plan_version(version);
    r.set_plan_from(from);
    r.set_iteration(iteration);
    r.set_last_round_ms(round_ms);
    f.Beat(node, &r);
  };
  server("psd-0", 1, 11, 900);   // the plan before
  server("psd-1", 2, 12, 2500);  // closed the switch's round: not the map's
  CHECK(f.table.PlanRoundMs(a.job_id(), 0, 2) == 0);
  server("psd-0", 2, 13, 1800);
  CHECK(f.table.PlanRoundMs(a.job_id(), 0, 2) == 0);  // psd-1 has not said
  // Not numbers a round can take, then psd-1's round past the first.
  server("psd-1", 2, 13, std::nan(""));
  server("psd-1", 2, 13, -5);
  server("psd-1", 2, 13, 1e12);
  CHECK(f.table.PlanRoundMs(a.job_id(), 0, 2) == 0);
  server("psd-1", 2, 14, 2100);
  CHECK(f.table.PlanRoundMs(a.job_id(), 0, 2) == 2100);
  // The first one counts, and only for this job, epoch and version.
  server("psd-0", 2, 15, 3000);
  CHECK(f.table.PlanRoundMs(a.job_id(), 0, 2) == 2100);
  CHECK(f.table.PlanRoundMs(a.job_id(), 0, 3) == 0);
  CHECK(f.table.PlanRoundMs(a.job_id(), 1, 2) == 0);
  CHECK(f.table.PlanRoundMs("job-other", 0, 2) == 0);
  // A new plan starts again.
  v1::Policy plan;
  plan.set_job_id(a.job_id());
  plan.set_version(3);
  REQUIRE(f.table.IssuePlan(plan));
  a = f.Beat("psd-0", nullptr);
  from = 16;
  server("psd-0", 3, 17, 1000);
  CHECK(f.table.PlanRoundMs(a.job_id(), 0, 3) == 0);
  CHECK(f.table.PlanRoundMs(a.job_id(), 0, 2) == 0);
}

TEST_CASE("A dead worker leaves the roster; the job goes on") {
  Fixture f;
  REQUIRE(f.table.Submit(Request(), Cluster()).ok());
  v1::JobAssignment a = f.Beat("psd-0", nullptr);
  // An event about an older or newer incarnation that is not a restart
  // does not concern the member.
  f.Event(MembershipEventKind::kDied, "worker-1", 7);
  f.Event(MembershipEventKind::kJoined, "worker-1", 1);
  CHECK(f.table.Get("")->nodes(3).alive());

  f.Event(MembershipEventKind::kDied, "worker-1", 1);
  v1::JobStatus s = *f.table.Get("");
  CHECK_FALSE(s.nodes(3).alive());
  CHECK(s.state() == v1::JOB_STATE_STARTING);
  v1::NodeJobReport r = Report(a, true);
  v1::JobAssignment b = f.Beat("psd-0", &r);
  REQUIRE(b.workers_size() == 2);
  CHECK(b.workers(0).alive());
  CHECK_FALSE(b.workers(1).alive());
  CHECK(b.roster_version() > a.roster_version());
  // The lost worker is not waited for: the others being ready starts the job.
  for (const char* n : {"psd-0", "psd-1", "worker-0"}) {
    v1::NodeJobReport ready = Report(b, true);
    f.Beat(n, &ready);
  }
  CHECK(f.State() == v1::JOB_STATE_RUNNING);
  // Its restarted self is not a member: no assignment.
  CHECK(f.Beat("worker-1", nullptr).job_id().empty());

  // Losing the last worker fails the job.
  f.Event(MembershipEventKind::kJoined, "worker-0", 2);  // restarted
  s = *f.table.Get("");
  CHECK(s.state() == v1::JOB_STATE_FAILED);
  CHECK(s.message().find("every worker") != std::string::npos);
}

TEST_CASE("A lost server, a member error or a cancel ends the job") {
  SECTION("server") {
    Fixture f;
    REQUIRE(f.table.Submit(Request(), Cluster()).ok());
    f.Event(MembershipEventKind::kLeft, "psd-1", 1);
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.state() == v1::JOB_STATE_FAILED);
    CHECK(s.message().find("psd-1") != std::string::npos);
    CHECK(s.message().find("writes no checkpoints") != std::string::npos);
  }
  SECTION("reconcile after missed events") {
    Fixture f;
    REQUIRE(f.table.Submit(Request(), Cluster()).ok());
    std::vector<NodeRecord> all = Cluster();
    all[2].state = NodeState::kDead;  // worker-1
    f.table.Reconcile(all);
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.state() == v1::JOB_STATE_STARTING);
    CHECK_FALSE(s.nodes(3).alive());
    all[1].incarnation = 5;  // psd-0 restarted
    f.table.Reconcile(all);
    CHECK(f.State() == v1::JOB_STATE_FAILED);
  }
  SECTION("member error") {
    Fixture f;
    REQUIRE(f.table.Submit(Request(), Cluster()).ok());
    v1::JobAssignment a = f.Beat("worker-0", nullptr);
    v1::NodeJobReport r = Report(a, false);
    r.set_error("dataset: /nope/train-images-idx3-ubyte: No such file");
    v1::JobAssignment b = f.Beat("worker-0", &r);
    CHECK(b.state() == v1::JOB_STATE_FAILED);
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.message().find("worker-0: dataset") != std::string::npos);
  }
  SECTION("workers that disagree on the job length") {
    Fixture f;
    REQUIRE(f.table.Submit(Request(), Cluster()).ok());
    v1::JobAssignment a = f.Beat("worker-0", nullptr);
    v1::NodeJobReport r0 = Report(a, true), r1 = Report(a, true);
    r1.set_total_iterations(99);
    f.Beat("worker-0", &r0);
    f.Beat("worker-1", &r1);
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.state() == v1::JOB_STATE_FAILED);
    CHECK(s.message().find("disagree") != std::string::npos);
  }
  SECTION("cancel") {
    Fixture f;
    auto job = f.table.Submit(Request(), Cluster());
    REQUIRE(job.ok());
    CHECK(f.table.Cancel("job-nope").status().code() == absl::StatusCode::kNotFound);
    auto c = f.table.Cancel(job->job_id());
    REQUIRE(c.ok());
    CHECK(c->state() == v1::JOB_STATE_CANCELLED);
    CHECK(f.table.Cancel("").status().code() == absl::StatusCode::kFailedPrecondition);
  }
  SECTION("a node running a job schedd does not know is told to stop") {
    Fixture f;
    v1::NodeJobReport r;
    r.set_job_id("job-from-before-a-restart");
    r.set_roster_version(3);
    v1::JobAssignment a = f.Beat("worker-0", &r);
    CHECK(a.job_id() == "job-from-before-a-restart");
    CHECK(a.state() == v1::JOB_STATE_CANCELLED);
    CHECK(a.roster_version() == 4);
  }
}

// A job that checkpoints, started on Cluster(); every member ready.
v1::JobAssignment StartCheckpointedJob(Fixture& f, const std::string& extra = "") {
  REQUIRE(f.table
              .Submit(Request("model: mlp\nepochs: 1\ncheckpoint_every_rounds: 10\n"
                              "recover_timeout_s: 30\n" +
                              extra),
                      Cluster())
              .ok());
  v1::JobAssignment a = f.Beat("psd-0", nullptr);
  for (const char* n : {"psd-0", "psd-1", "worker-0", "worker-1"}) {
    v1::NodeJobReport r = Report(a, true);
    f.Beat(n, &r);
  }
  a = f.Beat("psd-0", nullptr);
  REQUIRE(a.state() == v1::JOB_STATE_RUNNING);
  return a;
}

// What a member reports once ready in `a`'s recovery epoch.
v1::NodeJobReport RecoveryReport(const v1::JobAssignment& a, std::vector<uint64_t> rounds = {}) {
  v1::NodeJobReport r = Report(a, true);
  r.set_recovery_epoch(a.recovery_epoch());
  for (uint64_t x : rounds) r.add_checkpoint_rounds(x);
  return r;
}

// A server's report once it loaded its checkpoint of `round`, trained
// under `owners` (none: the even split) with worker-0/worker-1's batches.
v1::NodeJobReport LoadedReport(const v1::JobAssignment& a, int64_t round,
                               std::vector<uint32_t> owners = {},
                               std::vector<uint32_t> batches = {64, 64}) {
  v1::NodeJobReport r = RecoveryReport(a);
  r.set_resume_plan_round(round);
  for (uint32_t o : owners) r.mutable_resume_plan()->add_chunk_server(o);
  if (!owners.empty()) {
    for (int k = 0; k < 2; ++k) {
      v1::WorkerBatch* b = r.mutable_resume_plan()->add_worker_batches();
      b->set_worker_node_id("worker-" + std::to_string(k));
      b->set_batch_size(batches[k]);
      b->set_resume_samples(uint64_t(round) * batches[k]);
    }
  }
  return r;
}

TEST_CASE("A lost server of a checkpointed job: RECOVERING, back, resumed") {
  Fixture f;
  const v1::JobAssignment running = StartCheckpointedJob(f);
  // psd-1 restarts: its new incarnation is not the member, even before the
  // membership event arrives.
  CHECK(f.Beat("psd-1", nullptr, 2).job_id().empty());
  f.Event(MembershipEventKind::kJoined, "psd-1", 2, "127.0.0.1:6001");
  v1::JobStatus s = *f.table.Get("");
  CHECK(s.state() == v1::JOB_STATE_RECOVERING);
  CHECK(s.message().find("psd-1 is back") != std::string::npos);
  // Re-adopted at once (the join was the event), at its new address: a
  // second epoch, so that every member builds its part knowing it.
  v1::JobAssignment a = f.Beat("psd-1", nullptr, 2);
  CHECK(a.state() == v1::JOB_STATE_RECOVERING);
  CHECK(a.recovery_epoch() == 2);
  CHECK_FALSE(a.start());
  CHECK(a.servers(1).alive());
  CHECK(a.servers(1).data_address() == "127.0.0.1:6001");
  CHECK(a.data_key_id() != running.data_key_id());
  CHECK(a.data_key() != running.data_key());

  // Errors and readiness from the previous epoch do not count.
  v1::NodeJobReport old = Report(running, true);
  old.set_error("worker 0: no parameters for iteration 57 within 2m");
  f.Beat("worker-0", &old);
  CHECK(f.State() == v1::JOB_STATE_RECOVERING);

  // Resume at the newest round both servers hold: 40 (psd-1 lost 50).
  v1::NodeJobReport p0 = RecoveryReport(a, {50, 40, 30}), p1 = RecoveryReport(a, {40, 30, 20});
  f.Beat("psd-0", &p0);
  f.Beat("psd-1", &p1, 2);
  v1::NodeJobReport w0 = RecoveryReport(a);
  f.Beat("worker-0", &w0);
  CHECK(f.State() == v1::JOB_STATE_RECOVERING);  // worker-1 not ready yet
  v1::NodeJobReport w1 = RecoveryReport(a);
  v1::JobAssignment b = f.Beat("worker-1", &w1);
  // The round is picked; the servers load it and say which plan it was
  // trained under before anyone starts.
  CHECK(b.state() == v1::JOB_STATE_RECOVERING);
  CHECK(b.resume_round() == 40);
  CHECK_FALSE(b.resume_decided());
  v1::NodeJobReport l0 = LoadedReport(b, 40, {1, 1, 0, 0}, {96, 32});
  v1::NodeJobReport l1 = LoadedReport(b, 40, {1, 1, 0, 0}, {96, 32});
  f.Beat("psd-0", &l0);
  CHECK(f.State() == v1::JOB_STATE_RECOVERING);  // psd-1 still loading
  b = f.Beat("psd-1", &l1, 2);
  CHECK(b.state() == v1::JOB_STATE_RUNNING);
  CHECK(b.resume_decided());
  CHECK(b.start());
  CHECK(b.resume_round() == 40);
  CHECK(b.recovery_epoch() == 2);
  // The epoch starts under that plan, as version 1.
  REQUIRE(b.has_plan());
  CHECK(b.plan().version() == 1);
  CHECK(b.plan().recovery_epoch() == 2);
  CHECK(b.plan().chunk_server_size() == 4);
  CHECK(b.plan().chunk_server(0) == 1);
  REQUIRE(b.plan().worker_batches_size() == 2);
  CHECK(b.plan().worker_batches(0).batch_size() == 96);
  CHECK(b.plan().worker_batches(1).resume_samples() == 40 * 32);
  CHECK(b.total_iterations() == running.total_iterations());
  s = *f.table.Get("");
  CHECK(s.recoveries() == 1);
  CHECK(s.resume_round() == 40);
  CHECK(s.message().empty());

  // Done reports of the recovery epoch end it.
  for (const char* n : {"worker-0", "worker-1"}) {
    v1::NodeJobReport d = RecoveryReport(b);
    d.set_done(true);
    f.Beat(n, &d);
  }
  CHECK(f.State() == v1::JOB_STATE_SUCCEEDED);
}

TEST_CASE("Recovery: no common round resumes from 0; another loss starts over") {
  Fixture f;
  StartCheckpointedJob(f);
  f.Event(MembershipEventKind::kDied, "psd-0", 1);
  v1::JobAssignment a = f.Beat("psd-1", nullptr);
  CHECK(a.state() == v1::JOB_STATE_RECOVERING);
  CHECK_FALSE(a.servers(0).alive());
  // Everyone else ready: still waiting for psd-0.
  for (const char* n : {"psd-1", "worker-0", "worker-1"}) {
    v1::NodeJobReport r = RecoveryReport(a, {30});
    f.Beat(n, &r);
  }
  CHECK(f.State() == v1::JOB_STATE_RECOVERING);
  // A worker lost meanwhile is dropped, as in any state.
  f.Event(MembershipEventKind::kDied, "worker-1", 1);
  f.Event(MembershipEventKind::kJoined, "psd-0", 3);
  // psd-0 back: a new epoch, in which the others are ready again.
  a = f.Beat("psd-0", nullptr, 3);
  CHECK(a.servers(0).alive());
  CHECK(a.recovery_epoch() == 2);
  for (const char* n : {"psd-1", "worker-0"}) {
    v1::NodeJobReport r = RecoveryReport(a, {30});
    f.Beat(n, &r);
  }
  CHECK(f.State() == v1::JOB_STATE_RECOVERING);
  v1::NodeJobReport r0 = RecoveryReport(a, {20});
  v1::JobAssignment b = f.Beat("psd-0", &r0, 3);
  CHECK(b.state() == v1::JOB_STATE_RUNNING);
  CHECK(b.resume_round() == 0);
  CHECK_FALSE(b.workers(1).alive());
}

TEST_CASE("A psd that stays down: a spare psd adopts its part from its checkpoint_dir") {
  Fixture f;
  const v1::JobAssignment running = StartCheckpointedJob(f);
  v1::NodeJobReport p1 = Report(running, true);
  p1.set_checkpoint_dir("/shared/ckpt-psd-1");
  f.Beat("psd-1", &p1);
  f.Event(MembershipEventKind::kDied, "psd-1", 1);
  std::vector<NodeRecord> alive = Cluster();
  alive.push_back(Node("psd-2", NodeRole::kServer, 9, "127.0.0.1:6002"));
  f.clock.Advance(absl::Seconds(29));
  CHECK_FALSE(f.table.RecoveryDue());
  f.clock.Advance(absl::Seconds(2));
  REQUIRE(f.table.RecoveryDue());
  f.table.Tick(alive);
  v1::JobStatus s = *f.table.Get("");
  CHECK(s.state() == v1::JOB_STATE_RECOVERING);
  INFO(s.message());
  CHECK(s.message().find("psd-2 adopts its part from /shared/ckpt-psd-1") != std::string::npos);
  CHECK_FALSE(f.table.RecoveryDue());  // the adopter's turn to get ready
  // psd-2 is server 1 now, reading the lost psd's checkpoints.
  v1::JobAssignment a = f.Beat("psd-2", nullptr, 9);
  REQUIRE(a.servers_size() == 2);
  CHECK(a.servers(1).node_id() == "psd-2");
  CHECK(a.servers(1).rank() == 1);
  CHECK(a.servers(1).data_address() == "127.0.0.1:6002");
  CHECK(a.servers(1).checkpoint_dir() == "/shared/ckpt-psd-1");
  for (const char* n : {"psd-0", "worker-0", "worker-1"}) {
    v1::NodeJobReport r = RecoveryReport(a, {40, 30});
    f.Beat(n, &r);
  }
  v1::NodeJobReport r2 = RecoveryReport(a, {30, 20});
  v1::JobAssignment b = f.Beat("psd-2", &r2, 9);
  CHECK(b.state() == v1::JOB_STATE_RECOVERING);
  CHECK(b.resume_round() == 30);
  // Checkpoints written before plans were kept: the even split.
  v1::NodeJobReport l0 = LoadedReport(b, 30), l2 = LoadedReport(b, 30);
  f.Beat("psd-0", &l0);
  b = f.Beat("psd-2", &l2, 9);
  CHECK(b.state() == v1::JOB_STATE_RUNNING);
  CHECK(b.resume_round() == 30);
  CHECK_FALSE(b.has_plan());
  // The lost psd, back later, is no member.
  CHECK(f.Beat("psd-1", nullptr, 12).job_id().empty());
}

TEST_CASE("Recovery fails after recover_timeout_s, or without checkpoints") {
  SECTION("timeout") {
    Fixture f;
    StartCheckpointedJob(f);
    f.Event(MembershipEventKind::kLeft, "psd-1", 1);
    f.clock.Advance(absl::Seconds(29));
    f.table.Tick({});
    CHECK(f.State() == v1::JOB_STATE_RECOVERING);
    f.clock.Advance(absl::Seconds(2));
    f.table.Tick({});
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.state() == v1::JOB_STATE_FAILED);
    CHECK(s.message().find("psd-1 did not come back within 30 s") != std::string::npos);
  }
  SECTION("each step of the resume has recover_timeout_s from the last") {
    Fixture f;
    StartCheckpointedJob(f);
    f.Event(MembershipEventKind::kJoined, "psd-1", 2, "127.0.0.1:6001");
    v1::JobAssignment a = f.Beat("psd-1", nullptr, 2);
    f.clock.Advance(absl::Seconds(29));
    v1::NodeJobReport p0 = RecoveryReport(a, {40}), p1 = RecoveryReport(a, {40});
    v1::NodeJobReport w0 = RecoveryReport(a), w1 = RecoveryReport(a);
    f.Beat("psd-0", &p0);
    f.Beat("psd-1", &p1, 2);
    f.Beat("worker-0", &w0);
    CHECK(f.Beat("worker-1", &w1).resume_round() == 40);
    // Members back in time are not failed for the load that follows.
    f.clock.Advance(absl::Seconds(2));
    f.table.Tick({});
    CHECK(f.State() == v1::JOB_STATE_RECOVERING);
    // psd-1 never reports its load of round 40.
    v1::NodeJobReport l0 = LoadedReport(a, 40, {1, 1, 0, 0}, {64, 64});
    f.Beat("psd-0", &l0);
    f.clock.Advance(absl::Seconds(29));
    f.table.Tick({});
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.state() == v1::JOB_STATE_FAILED);
    CHECK(s.message().find("psds did not load their checkpoints of the resume round within 30 s") !=
          std::string::npos);
  }
  SECTION("no spare psd, or no checkpoint_dir reported") {
    Fixture f;
    StartCheckpointedJob(f);
    f.Event(MembershipEventKind::kDied, "psd-0", 1);
    f.clock.Advance(absl::Seconds(31));
    std::vector<NodeRecord> alive = Cluster();
    alive.push_back(Node("psd-2", NodeRole::kServer, 9));
    f.table.Tick(alive);  // psd-0 never said where its checkpoints are
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.state() == v1::JOB_STATE_FAILED);
    CHECK(s.message().find("reported no checkpoint_dir") != std::string::npos);
  }
  SECTION("no spare psd") {
    Fixture f;
    const v1::JobAssignment running = StartCheckpointedJob(f);
    v1::NodeJobReport p0 = Report(running, true);
    p0.set_checkpoint_dir("/shared/ckpt-psd-0");
    f.Beat("psd-0", &p0);
    f.Event(MembershipEventKind::kDied, "psd-0", 1);
    f.clock.Advance(absl::Seconds(31));
    f.table.Tick(Cluster());  // only the job's own nodes
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.state() == v1::JOB_STATE_FAILED);
    CHECK(s.message().find("no live psd outside the job") != std::string::npos);
  }
  SECTION("recover_timeout_s: 0") {
    Fixture f;
    REQUIRE(f.table
                .Submit(Request("model: mlp\nepochs: 1\ncheckpoint_every_rounds: 10\n"
                                "recover_timeout_s: 0\n"),
                        Cluster())
                .ok());
    f.Event(MembershipEventKind::kDied, "psd-0", 1);
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.state() == v1::JOB_STATE_FAILED);
    CHECK(s.message().find("recover_timeout_s is 0") != std::string::npos);
  }
  SECTION("servers whose checkpoints of the round hold different plans") {
    Fixture f;
    StartCheckpointedJob(f);
    f.Event(MembershipEventKind::kDied, "psd-0", 1);
    f.Event(MembershipEventKind::kJoined, "psd-0", 3);
    v1::JobAssignment a = f.Beat("psd-0", nullptr, 3);
    v1::NodeJobReport r0 = RecoveryReport(a, {20}), r1 = RecoveryReport(a, {20});
    f.Beat("psd-0", &r0, 3);
    a = f.Beat("psd-1", &r1);
    REQUIRE(a.resume_round() == 20);
    v1::NodeJobReport l0 = LoadedReport(a, 20, {0, 1}), l1 = LoadedReport(a, 20, {1, 1});
    f.Beat("psd-0", &l0, 3);
    f.Beat("psd-1", &l1);
    v1::JobStatus s = *f.table.Get("");
    CHECK(s.state() == v1::JOB_STATE_FAILED);
    CHECK(s.message().find("different plans") != std::string::npos);
  }
  SECTION("an error in the recovery epoch") {
    Fixture f;
    StartCheckpointedJob(f);
    f.Event(MembershipEventKind::kDied, "psd-0", 1);
    v1::JobAssignment a = f.Beat("psd-1", nullptr);
    v1::NodeJobReport r = RecoveryReport(a);
    r.set_ready(false);
    r.set_error("checkpoint store cannot be opened");
    f.Beat("psd-1", &r);
    CHECK(f.State() == v1::JOB_STATE_FAILED);
  }
}

// schedd restarts: a second table over the same store, as a restarted
// schedd builds it.
struct Restarted {
  FakeClock clock;
  std::unique_ptr<ScheddStore> store;
  std::unique_ptr<JobTable> table;
  explicit Restarted(const std::string& dir, absl::Duration grace = absl::Seconds(30)) {
    auto s = ScheddStore::Open(dir);
    REQUIRE(s.ok());
    store = std::move(*s);
    table = std::make_unique<JobTable>(&clock, Logger());
    REQUIRE(table->UseStore(store.get(), grace).ok());
  }
  v1::JobAssignment Beat(const std::string& node, const v1::NodeJobReport* r,
                         uint64_t incarnation) {
    v1::HeartbeatResponse resp;
    table->OnHeartbeat(Node(node, NodeRole::kUnspecified, incarnation), r, &resp);
    return resp.job();
  }
  v1::JobState State() { return table->Get("")->state(); }
};

// A running job on Cluster() in a table over a store in `dir`; returns its
// assignment. The store closes when this returns, as a killed schedd's.
v1::JobAssignment RunJobWithStore(const std::string& dir, const std::string& extra = "") {
  Restarted first(dir);
  REQUIRE(first.table->Submit(Request("model: mlp\nepochs: 1\n" + extra), Cluster()).ok());
  first.table->SetNextIncarnation(10);
  v1::JobAssignment a = first.Beat("psd-0", nullptr, 1);
  for (const char* n : {"psd-0", "psd-1", "worker-0", "worker-1"}) {
    v1::NodeJobReport r = Report(a, true);
    first.Beat(n, &r, 1);
  }
  a = first.Beat("psd-0", nullptr, 1);
  REQUIRE(a.state() == v1::JOB_STATE_RUNNING);
  REQUIRE(!a.data_key().empty());
  return a;
}

TEST_CASE("schedd restarted: the running job goes on with its members") {
  const std::string dir = MakeTestDir("schedd-state");
  const v1::JobAssignment a = RunJobWithStore(dir);
  Restarted r(dir);
  CHECK(r.table->next_incarnation() == 10);
  v1::JobStatus s = *r.table->Get("");
  CHECK(s.job_id() == a.job_id());
  CHECK(s.state() == v1::JOB_STATE_RUNNING);
  // Re-registration events do not make them "restarted": their heartbeat
  // decides. Each still runs the job at a new incarnation.
  for (const char* n : {"psd-0", "psd-1", "worker-0", "worker-1"}) {
    r.table->OnMembershipEvent(MembershipEventKind::kJoined, Node(n, NodeRole::kUnspecified, 11));
  }
  for (const char* n : {"psd-0", "psd-1", "worker-0", "worker-1"}) {
    v1::NodeJobReport rep = Report(a, true);
    rep.set_iteration(500);
    CHECK(r.Beat(n, &rep, 11).job_id().empty());  // nothing new to apply
  }
  CHECK(r.State() == v1::JOB_STATE_RUNNING);
  // Now the members at their new incarnations: a later death counts.
  r.table->OnMembershipEvent(MembershipEventKind::kDied, [] {
    NodeRecord n = Node("worker-1", NodeRole::kUnspecified, 11);
    n.state = NodeState::kDead;
    return n;
  }());
  CHECK_FALSE(r.table->Get("")->nodes(3).alive());
  // Done: succeeded, and so it stays after another restart.
  v1::NodeJobReport done = Report(a, true, true);
  r.Beat("worker-0", &done, 11);
  CHECK(r.State() == v1::JOB_STATE_SUCCEEDED);
  r.table.reset();
  r.store.reset();
  Restarted again(dir);
  CHECK(again.State() == v1::JOB_STATE_SUCCEEDED);
  CHECK(again.table->Get(a.job_id()).ok());
  // A new job gets a new id.
  auto next = again.table->Submit(Request(), Cluster());
  REQUIRE(next.ok());
  CHECK(next->job_id() != a.job_id());
}

TEST_CASE("schedd restarted: a job that ended meanwhile is recorded as its members say") {
  const std::string dir = MakeTestDir("schedd-state");
  const v1::JobAssignment a = RunJobWithStore(dir);
  Restarted r(dir);
  for (const char* n : {"worker-0", "worker-1", "psd-0", "psd-1"}) {
    v1::NodeJobReport done = Report(a, true, true);
    r.Beat(n, &done, 20);
  }
  CHECK(r.State() == v1::JOB_STATE_SUCCEEDED);
  // The members still reporting it hear that it ended.
  v1::NodeJobReport done = Report(a, true, true);
  CHECK(r.Beat("psd-0", &done, 20).state() == v1::JOB_STATE_SUCCEEDED);
}

TEST_CASE("schedd restarted: members that lost their part or never return are lost") {
  const std::string dir = MakeTestDir("schedd-state");
  const v1::JobAssignment a =
      RunJobWithStore(dir, "checkpoint_every_rounds: 10\nrecover_timeout_s: 30\n");
  Restarted r(dir, absl::Seconds(10));
  // worker-1 restarted while schedd was away: its report has no job.
  r.Beat("worker-1", nullptr, 12);
  CHECK_FALSE(r.table->Get("")->nodes(3).alive());
  CHECK(r.State() == v1::JOB_STATE_RUNNING);
  v1::NodeJobReport rep = Report(a, true);
  for (const char* n : {"psd-0", "worker-0"}) r.Beat(n, &rep, 12);
  // psd-1 never heard from: lost at the end of the grace period; the job
  // checkpoints, so it waits for it (RECOVERING) under a new key.
  r.clock.Advance(absl::Seconds(11));
  r.table->Tick({});
  v1::JobStatus s = *r.table->Get("");
  CHECK(s.state() == v1::JOB_STATE_RECOVERING);
  CHECK(s.message().find("psd-1 did not come back after schedd restarted") != std::string::npos);
  v1::JobAssignment b = r.Beat("psd-0", &rep, 12);
  CHECK(b.recovery_epoch() == 1);
  CHECK(!b.data_key().empty());
}

TEST_CASE("schedd and a psd restarted: the psd takes its part again from the checkpoints") {
  const std::string dir = MakeTestDir("schedd-state");
  const v1::JobAssignment a =
      RunJobWithStore(dir, "checkpoint_every_rounds: 10\nrecover_timeout_s: 30\n");
  Restarted r(dir);
  // psd-1's process restarted too: no job in its report, at a new address.
  v1::HeartbeatResponse resp;
  r.table->OnHeartbeat(Node("psd-1", NodeRole::kServer, 14, "127.0.0.1:7001"), nullptr, &resp);
  CHECK(r.State() == v1::JOB_STATE_RECOVERING);
  v1::JobAssignment b = resp.job();
  CHECK(b.recovery_epoch() == 2);  // lost (1), back at a new address (2)
  REQUIRE(b.servers_size() == 2);
  CHECK(b.servers(1).alive());
  CHECK(b.servers(1).data_address() == "127.0.0.1:7001");
}

TEST_CASE("schedd restarted while a job was starting: every member starts again") {
  const std::string dir = MakeTestDir("schedd-state");
  std::string id;
  {
    Restarted first(dir);
    auto job = first.table->Submit(Request(), Cluster());
    REQUIRE(job.ok());
    id = job->job_id();
  }
  Restarted r(dir);
  v1::JobAssignment a = r.Beat("psd-0", nullptr, 5);
  // psd-0 had not heard of the job: lost, and the job (no checkpoints) fails.
  CHECK(r.State() == v1::JOB_STATE_FAILED);
  Restarted r2(MakeTestDir("schedd-state2"));
  REQUIRE(r2.table->Submit(Request(), Cluster()).ok());
}

// Writes behind the store's back, as a tool or bit rot would.
void RawPut(const std::string& dir, const std::string& key, const std::string& value) {
  rocksdb::DB* raw = nullptr;
  REQUIRE(rocksdb::DB::Open(rocksdb::Options(), dir, &raw).ok());
  CHECK(raw->Put(rocksdb::WriteOptions(), key, value).ok());
  delete raw;
}

TEST_CASE("a store of another format, or unreadable records, are reported") {
  const std::string dir = MakeTestDir("schedd-state");
  RunJobWithStore(dir);
  RawPut(dir, "j/00000000000000ff", "not a record");
  {
    auto s = ScheddStore::Open(dir);
    REQUIRE(s.ok());
    auto loaded = (*s)->Load();
    REQUIRE(loaded.ok());
    CHECK(loaded->jobs.size() == 1);
    REQUIRE(loaded->skipped.size() == 1);
    CHECK(loaded->skipped[0].find("j/00000000000000ff") != std::string::npos);
  }
  RawPut(dir, "format", "hetps-schedd-state-99");
  auto s = ScheddStore::Open(dir);
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("hetps-schedd-state-99") != std::string::npos);
}

TEST_CASE("init_from a checkpoint: every psd must start from the same round") {
  Fixture f;
  REQUIRE(
      f.table.Submit(Request("model: mlp\nepochs: 1\ninit_from: checkpoint:job-old\n"), Cluster())
          .ok());
  v1::JobAssignment a = f.Beat("psd-0", nullptr);
  for (const char* n : {"worker-0", "worker-1"}) {
    v1::NodeJobReport r = Report(a, true);
    f.Beat(n, &r);
  }
  v1::NodeJobReport p0 = Report(a, true), p1 = Report(a, true);
  p0.add_checkpoint_rounds(20);
  p1.add_checkpoint_rounds(15);
  f.Beat("psd-0", &p0);
  f.Beat("psd-1", &p1);
  v1::JobStatus s = *f.table.Get("");
  CHECK(s.state() == v1::JOB_STATE_FAILED);
  CHECK(s.message().find("psd-0 20, psd-1 15") != std::string::npos);
}

TEST_CASE("History is bounded") {
  FakeClock clock;
  JobTable table(&clock, Logger(), 3);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto j = table.Submit(Request(), Cluster());
    REQUIRE(j.ok());
    ids.push_back(j->job_id());
    REQUIRE(table.Cancel("").ok());
  }
  CHECK(table.Get(ids[0]).status().code() == absl::StatusCode::kNotFound);
  CHECK(table.Get(ids[4]).ok());
  int cancelled = 0;
  for (auto [state, n] : table.StateCounts()) {
    if (state == v1::JOB_STATE_CANCELLED) cancelled = n;
  }
  CHECK(cancelled == 3);
}

}  // namespace hetps
