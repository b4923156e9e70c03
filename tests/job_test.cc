// Training jobs through the real binaries on 127.0.0.1: psctl job submit /
// status / cancel, schedd handing jobs to psd and workerd, training over
// the UDP data plane, and a workerd killed mid-job (the round closes at its
// deadline and the job goes on with the other worker).
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "lib/rpc/grpc_util.h"
#include "tests/testing/cluster.h"

namespace hetps {
namespace testing {
namespace {

ProcessResult Psctl(const LocalCluster& c, std::vector<std::string> args) {
  std::vector<std::string> argv = {Runfile("clients/psctl/psctl"),
                                   "--endpoint=" + c.schedd_address()};
  for (const std::string& f : c.PsctlFlags()) argv.push_back(f);
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

std::string WriteJob(const LocalCluster& c, const std::string& name, const std::string& yaml) {
  const std::string path = c.dir() + "/" + name;
  std::ofstream(path) << yaml;
  return path;
}

// schedd, 2 psd and `workers` workerd; the trainers use one BLAS thread
// each (this machine has 2 cores for all of them).
void StartCluster(LocalCluster& c, int workers) {
  REQUIRE(c.StartSchedd().ok());
  for (const char* id : {"psd-0", "psd-1"}) {
    absl::Status s = c.StartNode("psd", id);
    INFO(s.message());
    REQUIRE(s.ok());
  }
  for (int i = 0; i < workers; ++i) {
    absl::Status s = c.StartNode("workerd", "worker-" + std::to_string(i),
                                 {"--cpu_threads=1", "--report_every=10"});
    INFO(s.message());
    REQUIRE(s.ok());
  }
  REQUIRE(WaitFor([&] { return c.AliveCount() == 3 + workers; }, absl::Seconds(15)));
}

v1::JobStatus GetJob(const LocalCluster& c) {
  auto stub = c.SchedulerStub();
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(2));
  v1::GetJobResponse resp;
  grpc::Status s = stub->GetJob(&ctx, v1::GetJobRequest(), &resp);
  return s.ok() ? resp.job() : v1::JobStatus();
}

bool Ended(const v1::JobStatus& j) {
  return j.state() == v1::JOB_STATE_SUCCEEDED || j.state() == v1::JOB_STATE_FAILED ||
         j.state() == v1::JOB_STATE_CANCELLED;
}

// Polls the current job until it ends; *j is its last status.
bool WaitEnded(const LocalCluster& c, absl::Duration timeout, v1::JobStatus* j) {
  return WaitFor(
      [&] {
        *j = GetJob(c);
        return Ended(*j);
      },
      timeout);
}

const v1::NodeJobStatus* Node(const v1::JobStatus& j, const std::string& id) {
  for (const auto& n : j.nodes()) {
    if (n.node_id() == id) return &n;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("A killed workerd: rounds close at the deadline, the job finishes with the other") {
  LocalCluster c("job-kill", /*heartbeat_interval_ms=*/300);
  StartCluster(c, 2);
  // The deadline (400 ms) is shorter than death detection (3 x 300 ms), so
  // the first rounds without worker-1 close at the deadline; then schedd's
  // membership change removes it from the roster.
  const std::string job = WriteJob(c, "job.yaml",
                                   "name: kill-test\nmodel: mlp\niterations: 400\n"
                                   "eval_every: 100\nround_deadline_ms: 400\n");
  ProcessResult sub = Psctl(c, {"job", "submit", job, "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  CHECK(sub.stdout_text.find("\"state\":\"starting\"") != std::string::npos);

  REQUIRE(WaitFor(
      [&] {
        v1::JobStatus j = GetJob(c);
        return j.state() == v1::JOB_STATE_RUNNING && j.iteration() >= 100;
      },
      absl::Seconds(60)));
  c.Kill("worker-1", SIGKILL);
  const int64_t killed_at = GetJob(c).iteration();

  v1::JobStatus j;
  REQUIRE(WaitEnded(c, absl::Seconds(120), &j));
  INFO("state " << v1::JobState_Name(j.state()) << ": " << j.message());
  REQUIRE(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.total_iterations() == 400);
  CHECK(j.iteration() == 400);
  // Every round after the kill closed without worker-1: at its deadline
  // before schedd noticed, by the membership change after.
  CHECK(j.rounds_by_deadline() >= 2);  // at least one per server
  const v1::NodeJobStatus* w1 = Node(j, "worker-1");
  REQUIRE(w1 != nullptr);
  CHECK_FALSE(w1->alive());
  CHECK(w1->report().iteration() <= killed_at + 10);
  const v1::NodeJobStatus* w0 = Node(j, "worker-0");
  REQUIRE(w0 != nullptr);
  CHECK(w0->report().done());
  // It still learned: 400 iterations of mlp reach well above chance (10%).
  CHECK(j.test_accuracy() > 0.6);
  // The surviving daemons are fine and the job table says why in psctl.
  ProcessResult status = Psctl(c, {"job", "status"});
  CHECK(status.exit_code == 0);
  CHECK(status.stdout_text.find("succeeded") != std::string::npos);
  CHECK(c.AliveCount() == 4);
}

TEST_CASE("Bad specs are refused with the key named; cancel stops a job; the next job runs") {
  LocalCluster c("job-cancel");
  StartCluster(c, 1);
  ProcessResult none = Psctl(c, {"job", "status"});
  CHECK(none.exit_code == 1);
  CHECK(none.stderr_text.find("no job") != std::string::npos);

  ProcessResult bad = Psctl(
      c, {"job", "submit", WriteJob(c, "bad.yaml", "model: mlp\nepochs: 1\nbatch_size: 0\n")});
  CHECK(bad.exit_code == 1);
  CHECK(bad.stderr_text.find("batch_size") != std::string::npos);
  CHECK(bad.stderr_text.find("bad.yaml") != std::string::npos);
  ProcessResult missing = Psctl(c, {"job", "submit", c.dir() + "/nope.yaml"});
  CHECK(missing.exit_code == 2);
  ProcessResult too_many = Psctl(
      c, {"job", "submit", WriteJob(c, "ok.yaml", "model: mlp\niterations: 50\n"), "--workers=2"});
  CHECK(too_many.exit_code == 1);
  CHECK(too_many.stderr_text.find("only 1") != std::string::npos);

  // A long job, cancelled while it runs.
  REQUIRE(
      Psctl(c, {"job", "submit", WriteJob(c, "long.yaml", "model: mlp\nepochs: 50\n")}).exit_code ==
      0);
  REQUIRE(WaitFor([&] { return GetJob(c).iteration() >= 20; }, absl::Seconds(60)));
  ProcessResult busy = Psctl(c, {"job", "submit", c.dir() + "/ok.yaml"});
  CHECK(busy.exit_code == 1);
  CHECK(busy.stderr_text.find("still active") != std::string::npos);
  ProcessResult cancel = Psctl(c, {"job", "cancel"});
  CHECK(cancel.exit_code == 0);
  CHECK(cancel.stdout_text.find("cancelled") != std::string::npos);
  CHECK(Psctl(c, {"job", "status"}).exit_code == 1);  // a cancelled job's status exits 1

  // The daemons drop it and take the next job.
  ProcessResult next = Psctl(c, {"job", "submit", c.dir() + "/ok.yaml"});
  INFO(next.stderr_text);
  REQUIRE(next.exit_code == 0);
  v1::JobStatus j;
  REQUIRE(WaitEnded(c, absl::Seconds(60), &j));
  INFO(j.message());
  CHECK(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.iteration() == 50);

  // The same daemons run the next job over kernel TCP (transport: tcp).
  ProcessResult tcp = Psctl(
      c,
      {"job", "submit", WriteJob(c, "tcp.yaml", "model: mlp\niterations: 30\ntransport: tcp\n")});
  INFO(tcp.stderr_text);
  REQUIRE(tcp.exit_code == 0);
  REQUIRE(WaitEnded(c, absl::Seconds(60), &j));
  INFO(j.message());
  CHECK(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.iteration() == 30);
}

}  // namespace testing
}  // namespace hetps
