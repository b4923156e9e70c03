// Daemons that crash mid-job and come back, with the real binaries on
// 127.0.0.1: a psd restarted (the job recovers from its checkpoints), a
// psd that stays down (a spare adopts its part from shared storage), and
// schedd restarted (it carries on from its state_dir).
#include <rocksdb/db.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/rpc/grpc_util.h"
#include "lib/storage/checkpoint_store.h"
#include "lib/storage/test_fs.h"
#include "tests/job_helpers.h"
#include "tests/testing/cluster.h"

namespace hetps {
namespace testing {
namespace {

// Flips a bit in the table file holding psd `server`'s newest checkpoint of `job` in the (closed)
// store at `dir`; returns that round (0: none found).
uint64_t CorruptNewestCheckpoint(const std::string& dir, const std::string& job, uint32_t server) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Options o;
  if (!rocksdb::DB::OpenForReadOnly(o, dir, &raw).ok()) return 0;
  std::vector<rocksdb::LiveFileMetaData> files;
  raw->GetLiveFilesMetaData(&files);
  delete raw;
  const std::string prefix = storage::CheckpointPrefix(job, server);
  uint64_t newest = 0;
  std::string path;
  for (const rocksdb::LiveFileMetaData& f : files) {
    if (f.smallestkey.rfind(prefix, 0) != 0) continue;
    const uint64_t round =
        std::strtoull(f.smallestkey.substr(prefix.size(), 16).c_str(), nullptr, 16);
    if (round > newest) {
      newest = round;
      path = f.db_path + "/" + f.name;
    }
  }
  if (path.empty()) return 0;
  storage::FlipByte(path);
  return newest;
}

// The newest iteration a workerd logged (event=progress ... iteration=N/T).
int64_t LoggedIteration(const std::string& log) {
  const size_t at = log.rfind(" iteration=");
  return at == std::string::npos ? -1 : std::strtoll(log.c_str() + at + 11, nullptr, 10);
}

}  // namespace

// schedd with a state_dir, SIGKILLed mid-job: training goes on without
// it; started again at its address, it finds the job RUNNING, re-adopts
// the members as they re-register, and the job succeeds. A second job
// ends while schedd is down: the restarted schedd records it SUCCEEDED
// from what its members report.
TEST_CASE("A killed schedd restarts: the running job goes on, one that ended is recorded") {
  LocalCluster c("job-schedd-restart");
  StartCluster(c, 2, {}, {"--state_dir=" + c.dir() + "/schedd-state"});
  auto worker_log = [&](const char* id) { return c.node(id).process.Stderr(); };

  const std::string long_job = WriteJob(
      c, "long.yaml", "name: outlive-schedd\nmodel: mlp\niterations: 1500\neval_every: 0\n");
  ProcessResult sub = c.Psctl({"job", "submit", long_job, "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  REQUIRE(WaitFor(
      [&] {
        v1::JobStatus j = c.Job();
        return j.state() == v1::JOB_STATE_RUNNING && j.iteration() >= 200;
      },
      absl::Seconds(60)));
  const std::string job_id = c.Job().job_id();
  c.Kill("schedd", SIGKILL);
  c.WaitExit("schedd", absl::Seconds(10));
  // Training goes on without schedd.
  const int64_t at_kill = LoggedIteration(worker_log("worker-0"));
  REQUIRE(WaitFor([&] { return LoggedIteration(worker_log("worker-0")) >= at_kill + 200; },
                  absl::Seconds(60)));
  REQUIRE(c.RestartSchedd().ok());
  v1::JobStatus j = c.Job();
  CHECK(j.job_id() == job_id);
  CHECK(j.state() == v1::JOB_STATE_RUNNING);
  REQUIRE(c.WaitJobEnded(absl::Seconds(120), &j));
  INFO(j.message());
  CHECK(j.job_id() == job_id);
  CHECK(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.iteration() == 1500);
  for (const auto& n : j.nodes()) CHECK(n.alive());
  CHECK(c.Psctl({"job", "status", job_id}).stdout_text.find("succeeded") != std::string::npos);

  // A job that ends while schedd is down.
  const std::string short_job =
      WriteJob(c, "short.yaml", "name: end-unseen\nmodel: mlp\niterations: 600\neval_every: 0\n");
  sub = c.Psctl({"job", "submit", short_job, "-o", "json"});
  REQUIRE(sub.exit_code == 0);
  // Every member heard the start (iterations are done) before schedd goes.
  REQUIRE(WaitFor(
      [&] {
        v1::JobStatus now = c.Job();
        return now.state() == v1::JOB_STATE_RUNNING && now.iteration() >= 50;
      },
      absl::Seconds(60)));
  const std::string second = c.Job().job_id();
  CHECK(second != job_id);
  const size_t done0 = worker_log("worker-0").size(), done1 = worker_log("worker-1").size();
  c.Kill("schedd", SIGKILL);
  c.WaitExit("schedd", absl::Seconds(10));
  REQUIRE(WaitFor(
      [&] {
        return worker_log("worker-0").find("job part done", done0) != std::string::npos &&
               worker_log("worker-1").find("job part done", done1) != std::string::npos;
      },
      absl::Seconds(60)));
  REQUIRE(c.RestartSchedd().ok());
  REQUIRE(c.WaitJobEnded(absl::Seconds(60), &j));
  INFO(j.message());
  CHECK(j.job_id() == second);
  CHECK(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.iteration() == 600);
  // Both jobs are in its history.
  ProcessResult first = c.Psctl({"job", "status", job_id, "-o", "json"});
  CHECK(first.stdout_text.find("\"state\":\"succeeded\"") != std::string::npos);
}

// psd recovery with the real binaries. psd-0 is SIGKILLed mid-job and, its
// newest checkpoint corrupted on disk meanwhile, started again with the
// same node id and checkpoint_dir. schedd holds the job RECOVERING; psd-0
// skips the corrupt checkpoint (logged, counted) and offers the older
// ones; every member resumes from the newest round both psds hold, under
// a new data key. No worker trains on parameters older than that round;
// the job succeeds with the accuracy of an uninterrupted run of the same
// job on the same cluster, and the time from the restart to the first
// round closed after it is printed.
TEST_CASE("A killed psd restarts; the job resumes from its newest valid checkpoint") {
  constexpr int kIterations = 2000, kEvery = 100;
  LocalCluster c("job-recover");
  REQUIRE(c.StartSchedd().ok());
  auto psd_flags = [&](const std::string& id) {
    return std::vector<std::string>{"--checkpoint_dir=" + c.dir() + "/ckpt-" + id,
                                    "--checkpoint_keep=5"};
  };
  for (const char* id : {"psd-0", "psd-1"}) REQUIRE(c.StartNode("psd", id, psd_flags(id)).ok());
  const std::string trace = c.dir() + "/trace";
  REQUIRE(mkdir(trace.c_str(), 0755) == 0);
  for (const char* id : {"worker-0", "worker-1"}) {
    REQUIRE(c.StartNode("workerd", id, {"--cpu_threads=1", "--trace_dir=" + trace}).ok());
  }
  REQUIRE(WaitFor([&] { return c.AliveCount() == 5; }, absl::Seconds(15)));
  const std::string job =
      WriteJob(c, "job.yaml",
               absl::StrCat("name: recover-test\nmodel: mlp\niterations: ", kIterations,
                            "\neval_every: 0\n", "checkpoint_every_rounds: ", kEvery, "\n"));
  const double uninterrupted = RunToEnd(c, job).test_accuracy();
  ProcessResult sub = c.Psctl({"job", "submit", job, "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  // Killed with at least 3 checkpoints behind it (the corrupted one, and
  // older ones to fall back to).
  REQUIRE(WaitFor(
      [&] {
        v1::JobStatus j = c.Job();
        return j.state() == v1::JOB_STATE_RUNNING && j.iteration() >= 4 * kEvery;
      },
      absl::Seconds(120)));
  const std::string job_id = c.Job().job_id();
  c.Kill("psd-0", SIGKILL);
  c.WaitExit("psd-0", absl::Seconds(10));  // -1: killed by the signal
  REQUIRE_FALSE(c.node("psd-0").process.running());
  REQUIRE(WaitFor([&] { return c.Job().state() == v1::JOB_STATE_RECOVERING; }, absl::Seconds(20)));
  const uint64_t corrupted = CorruptNewestCheckpoint(c.dir() + "/ckpt-psd-0", job_id, 0);
  INFO("corrupted round " << corrupted);
  REQUIRE(corrupted >= uint64_t(kEvery));

  REQUIRE(c.StartNode("psd", "psd-0", psd_flags("psd-0")).ok());
  const absl::Time restarted = absl::Now();
  v1::JobStatus j;
  REQUIRE(WaitFor(
      [&] {
        j = c.Job();
        const v1::NodeJobStatus* p = Node(j, "psd-0");
        return j.recoveries() == 1 && p != nullptr && p->report().iteration() > j.resume_round();
      },
      absl::Seconds(60)));
  const double to_round = absl::ToDoubleSeconds(absl::Now() - restarted);
  WARN("restart to the first round closed after it: " << to_round << " s (resumed at round "
                                                      << j.resume_round() << ")");
  // The newest valid round both hold: before the corrupted one, one that
  // every psd checkpoints (a multiple of the period).
  CHECK(j.resume_round() > 0);
  CHECK(uint64_t(j.resume_round()) < corrupted);
  CHECK(j.resume_round() % kEvery == 0);

  REQUIRE(c.WaitJobEnded(absl::Seconds(180), &j));
  INFO(j.message());
  REQUIRE(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.iteration() == kIterations);
  CHECK(j.recoveries() == 1);
  WARN("final test accuracy " << j.test_accuracy() << ", uninterrupted " << uninterrupted);
  CHECK(std::abs(j.test_accuracy() - uninterrupted) <= 0.005);

  // psd-0 said why it skipped a checkpoint, and counted it.
  absl::StatusOr<std::string> m = HttpGet(c.node("psd-0").metrics_address, "/metrics");
  REQUIRE(m.ok());
  CHECK(m->find("psd_checkpoints_invalid_total 1") != std::string::npos);
  CHECK(c.node("psd-0").process.Stderr().find("checkpoint skipped") != std::string::npos);
  // Each worker's trace of the recovery epoch starts at the resume round
  // and never goes below it.
  for (const char* id : {"worker-0", "worker-1"}) {
    std::string path;
    for (const auto& e : std::filesystem::directory_iterator(trace)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(job_id + "-" + id + "-recovery", 0) == 0 && name > path) path = name;
    }
    INFO(id);
    REQUIRE(!path.empty());
    std::vector<std::string> lines = TraceLines(trace + "/" + path);
    REQUIRE(!lines.empty());
    uint64_t first = UINT64_MAX, lowest = UINT64_MAX;
    for (const std::string& l : lines) {
      if (l.find("\"ev\":\"iteration\"") == std::string::npos) continue;
      const uint64_t t = Field(l, "t");
      if (first == UINT64_MAX) first = t;
      lowest = std::min(lowest, t);
    }
    CHECK(first == uint64_t(j.resume_round()));
    CHECK(lowest == uint64_t(j.resume_round()));
  }
}

// Adoption with the real binaries: three psds, the job uses two; psd-1 is
// SIGKILLed and stays down. After recover_timeout_s the spare psd-2 takes
// over server 1, reading psd-1's checkpoints from its checkpoint_dir
// (here every psd's directory is on one file system: shared storage);
// the job resumes from the newest round both parts hold and succeeds with
// the accuracy of an uninterrupted run of the same job on the same cluster.
TEST_CASE("A psd that stays down: a spare psd adopts its part from the shared checkpoints") {
  constexpr int kIterations = 1500, kEvery = 100;
  LocalCluster c("job-adopt");
  REQUIRE(c.StartSchedd().ok());
  for (const char* id : {"psd-0", "psd-1", "psd-2"}) {
    REQUIRE(c.StartNode("psd", id, {"--checkpoint_dir=" + c.dir() + "/shared/ckpt-" + id}).ok());
  }
  for (const char* id : {"worker-0", "worker-1"}) {
    REQUIRE(c.StartNode("workerd", id, {"--cpu_threads=1"}).ok());
  }
  REQUIRE(WaitFor([&] { return c.AliveCount() == 6; }, absl::Seconds(15)));
  const std::string job =
      WriteJob(c, "job.yaml",
               absl::StrCat("name: adopt-test\nmodel: mlp\niterations: ", kIterations,
                            "\neval_every: 0\ncheckpoint_every_rounds: ", kEvery,
                            "\nrecover_timeout_s: 5\n"));
  const double uninterrupted = RunToEnd(c, job, {"--servers", "2"}).test_accuracy();
  ProcessResult sub = c.Psctl({"job", "submit", job, "--servers", "2", "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  REQUIRE(WaitFor(
      [&] {
        v1::JobStatus j = c.Job();
        return j.state() == v1::JOB_STATE_RUNNING && j.iteration() >= 3 * kEvery;
      },
      absl::Seconds(120)));
  REQUIRE(Node(c.Job(), "psd-2") == nullptr);  // the spare
  c.Kill("psd-1", SIGKILL);
  c.WaitExit("psd-1", absl::Seconds(10));

  v1::JobStatus j;
  REQUIRE(c.WaitJobEnded(absl::Seconds(180), &j));
  INFO(j.message());
  REQUIRE(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.iteration() == kIterations);
  CHECK(j.recoveries() == 1);
  CHECK(j.resume_round() >= kEvery);
  CHECK(j.resume_round() % kEvery == 0);
  const v1::NodeJobStatus* adopter = Node(j, "psd-2");
  REQUIRE(adopter != nullptr);
  CHECK(adopter->rank() == 1);
  CHECK(adopter->alive());
  CHECK(Node(j, "psd-1") == nullptr);
  CHECK(c.node("psd-2").process.Stderr().find("adopting a part from another psd") !=
        std::string::npos);
  WARN("final test accuracy " << j.test_accuracy() << ", uninterrupted " << uninterrupted);
  CHECK(std::abs(j.test_accuracy() - uninterrupted) <= 0.005);
}

// A wlbs job with checkpoints: schedd gives the slowed worker-1 a smaller
// batch; psd-0 is killed after checkpoints of that plan, and restarted.
// The recovery epoch starts under the plan the resume round's checkpoint
// records (its batches, not the even split), and the job succeeds.
TEST_CASE("A killed psd of a wlbs job: the recovery resumes under the checkpoint's plan") {
  constexpr int kIterations = 4000, kEvery = 50;
  LocalCluster c("job-recover-plan");
  REQUIRE(c.StartSchedd().ok());
  const std::vector<std::string> psd_flags = {"--checkpoint_dir=" + c.dir() + "/ckpt-psd-0"};
  REQUIRE(c.StartNode("psd", "psd-0", psd_flags).ok());
  REQUIRE(c.StartNode("workerd", "worker-0", {"--cpu_threads=1", "--report_every=5"}).ok());
  REQUIRE(c.StartNode("workerd", "worker-1",
                      {"--cpu_threads=1", "--report_every=5", "--compute_slowdown=3"})
              .ok());
  REQUIRE(WaitFor([&] { return c.AliveCount() == 4; }, absl::Seconds(15)));
  const std::string job = WriteJob(
      c, "job.yaml",
      absl::StrCat("name: recover-plan\nmodel: mlp\niterations: ", kIterations,
                   "\neval_every: 0\nbatch_size: 64\nbatch_policy: wlbs\nupdate_time_s: 1\n",
                   "checkpoint_every_rounds: ", kEvery, "\n"));
  ProcessResult sub = c.Psctl({"job", "submit", job, "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  // worker-1's batch in the plan of (epoch, version) in psctl policy show's
  // JSON: -1 while there is none.
  const std::string job_id = c.Job().job_id();
  auto batch_in = [&](int epoch, int version) {
    ProcessResult p = c.Psctl({"policy", "show", "-o", "json"});
    const std::string head = absl::StrCat("{\"version\":", version, ",\"job_id\":\"", job_id,
                                          "\",\"recovery_epoch\":", epoch, ",");
    const size_t at = p.stdout_text.find(head);
    if (at == std::string::npos) return -1;
    const std::string key = "{\"worker\":\"worker-1\",\"batch_size\":";
    const size_t b = p.stdout_text.find(key, at);
    return b == std::string::npos ? -1 : std::atoi(p.stdout_text.c_str() + b + key.size());
  };
  // A plan that shrinks worker-1's batch, then checkpoints taken under it.
  int64_t planned_at = -1;
  REQUIRE(WaitFor(
      [&] {
        const int b = batch_in(0, 2);
        if (b > 0 && b < 64 && planned_at < 0) planned_at = c.Job().iteration();
        return planned_at >= 0;
      },
      absl::Seconds(60)));
  REQUIRE(
      WaitFor([&] { return c.Job().iteration() >= planned_at + 3 * kEvery; }, absl::Seconds(60)));
  REQUIRE(c.Job().state() == v1::JOB_STATE_RUNNING);
  c.Kill("psd-0", SIGKILL);
  c.WaitExit("psd-0", absl::Seconds(10));
  REQUIRE(WaitFor([&] { return c.Job().state() == v1::JOB_STATE_RECOVERING; }, absl::Seconds(20)));
  REQUIRE(c.StartNode("psd", "psd-0", psd_flags).ok());
  v1::JobStatus j;
  REQUIRE(c.WaitJobEnded(absl::Seconds(180), &j));
  INFO(j.message());
  REQUIRE(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.recoveries() == 1);
  CHECK(j.resume_round() > planned_at);
  CHECK(j.iteration() == kIterations);
  // Version 1 of the last recovery epoch is the checkpoint's plan:
  // worker-1's smaller batch, not the even split.
  // (Epoch 1 when psd-0 was lost, 2 when it came back at a new address.)
  int resumed = -1;
  for (int epoch = 1; epoch <= 3; ++epoch) {
    if (const int b = batch_in(epoch, 1); b >= 0) resumed = b;
  }
  INFO(c.Psctl({"policy", "show", "-o", "json"}).stdout_text);
  CHECK(resumed > 0);
  CHECK(resumed < 64);
  CHECK(c.node("psd-0").process.Stderr().find("resuming") != std::string::npos);
}

}  // namespace testing
}  // namespace hetps
