// Training jobs through the real binaries on 127.0.0.1: psctl job submit /
// status / cancel, schedd handing jobs to psd and workerd, training over
// the UDP data plane, checkpoints, a psd killed mid-job and restarted (the
// job recovers from its checkpoints), and a workerd killed mid-job (the
// round closes at its deadline and the job goes on with the other worker).
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
#include "absl/strings/str_format.h"
#include "lib/job/job_spec.h"
#include "lib/job/local_training.h"
#include "lib/job/model_file.h"
#include "lib/rpc/grpc_util.h"
#include "lib/storage/checkpoint_store.h"
#include "lib/storage/test_fs.h"
#include "lib/train/backend.h"
#include "tests/testing/cluster.h"

namespace hetps {
namespace testing {
namespace {

std::string WriteJob(const LocalCluster& c, const std::string& name, const std::string& yaml) {
  const std::string path = c.dir() + "/" + name;
  std::ofstream(path) << yaml;
  return path;
}

// schedd, 2 psd and `workers` workerd; the trainers use one BLAS thread
// each (this machine has 2 cores for all of them).
void StartCluster(LocalCluster& c, int workers, const std::vector<std::string>& extra = {},
                  const std::vector<std::string>& schedd_flags = {},
                  const std::vector<std::string>& worker_flags = {}) {
  REQUIRE(c.StartSchedd(schedd_flags).ok());
  for (const char* id : {"psd-0", "psd-1"}) {
    std::vector<std::string> flags = {"--data_peer_forget_ms=1500"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    absl::Status s = c.StartNode("psd", id, flags);
    INFO(s.message());
    REQUIRE(s.ok());
  }
  for (int i = 0; i < workers; ++i) {
    std::vector<std::string> flags = {"--cpu_threads=1", "--report_every=10"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    flags.insert(flags.end(), worker_flags.begin(), worker_flags.end());
    absl::Status s = c.StartNode("workerd", "worker-" + std::to_string(i), flags);
    INFO(s.message());
    REQUIRE(s.ok());
  }
  REQUIRE(WaitFor([&] { return c.AliveCount() == 3 + workers; }, absl::Seconds(15)));
}

const v1::NodeJobStatus* Node(const v1::JobStatus& j, const std::string& id) {
  for (const auto& n : j.nodes()) {
    if (n.node_id() == id) return &n;
  }
  return nullptr;
}

// The lines of a trace file; each must be one JSON object naming `ev`.
std::vector<std::string> TraceLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The unsigned value of `"key":` in a trace line (0 when absent).
uint64_t Field(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return 0;
  return std::strtoull(line.c_str() + at + key.size() + 3, nullptr, 10);
}

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
// seed (in this process), and the time from the restart to the first
// round closed after it is printed.
TEST_CASE("A killed psd restarts; the job resumes from its newest valid checkpoint") {
  constexpr int kIterations = 2000, kEvery = 100;
  JobSpec local;
  local.iterations = kIterations;
  local.eval_every = 0;
  auto reference = RunLocalTraining(local, 2, 0, [](const TrainingProgress&) {});
  REQUIRE(reference.ok());

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
  INFO("job " << j.test_accuracy() << " uninterrupted " << reference->final_eval.accuracy);
  CHECK(std::abs(j.test_accuracy() - reference->final_eval.accuracy) <= 0.005);

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

// trace_dir: every psd writes a line per round and every workerd a line
// per iteration, each a timeline in one clock (docs/tracing.md).
TEST_CASE("A traced job writes each round's timeline on every node") {
  LocalCluster c("job-trace");
  const std::string dir = c.dir() + "/trace";
  REQUIRE(mkdir(dir.c_str(), 0755) == 0);
  StartCluster(c, 2, {"--trace_dir=" + dir});
  const std::string job =
      WriteJob(c, "job.yaml", "name: trace-test\nmodel: mlp\niterations: 30\neval_every: 0\n");
  ProcessResult sub = c.Psctl({"job", "submit", job, "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  v1::JobStatus j;
  REQUIRE(c.WaitJobEnded(absl::Seconds(120), &j));
  REQUIRE(j.state() == v1::JOB_STATE_SUCCEEDED);
  for (const char* node : {"psd-0", "psd-1"}) {
    const std::vector<std::string> lines =
        TraceLines(dir + "/" + j.job_id() + "-" + node + ".jsonl");
    INFO(node);
    REQUIRE(lines.size() == 30);
    for (size_t t = 0; t < lines.size(); ++t) {
      const std::string& l = lines[t];
      INFO(l);
      CHECK(l.find("\"ev\":\"round\"") != std::string::npos);
      CHECK(Field(l, "t") == t);
      CHECK(Field(l, "start") > 0);
      CHECK(Field(l, "start") <= Field(l, "bcast"));
      CHECK(Field(l, "bcast") <= Field(l, "closed"));
      CHECK(Field(l, "closed") <= Field(l, "summed"));
      CHECK(Field(l, "summed") <= Field(l, "applied"));
      CHECK(l.find("\"bcasts\":[{\"submitted\":") != std::string::npos);
    }
  }
  for (const char* node : {"worker-0", "worker-1"}) {
    const std::vector<std::string> lines =
        TraceLines(dir + "/" + j.job_id() + "-" + node + ".jsonl");
    INFO(node);
    REQUIRE(lines.size() == 30);
    for (const std::string& l : lines) {
      INFO(l);
      CHECK(l.find("\"ev\":\"iteration\"") != std::string::npos);
      CHECK(Field(l, "wait") <= Field(l, "woke"));
      CHECK(Field(l, "woke") <= Field(l, "compute"));
      CHECK(Field(l, "compute") <= Field(l, "push"));
      CHECK(Field(l, "push") <= Field(l, "pushed"));
      CHECK(Field(l, "pushed") > 0);
      CHECK(l.find("\"pushes\":[{\"submitted\":") != std::string::npos);
    }
  }
}

// checkpoint_every_rounds with each psd's checkpoint_dir: after the job,
// each store (opened once its psd has stopped) holds that psd's newest
// checkpoint: a round the period divides, the optimizer's step count equal
// to it, the psd's chunks, the job's spec. With checkpoint_keep_jobs 0, a
// first job's checkpoints are gone once a second one starts checkpointing.
TEST_CASE("A checkpointed job leaves each psd's part in its store") {
  LocalCluster c("job-ckpt");
  REQUIRE(c.StartSchedd().ok());
  for (const char* id : {"psd-0", "psd-1"}) {
    absl::Status s = c.StartNode(
        "psd", id, {"--checkpoint_dir=" + c.dir() + "/ckpt-" + id, "--checkpoint_keep_jobs=0"});
    INFO(s.message());
    REQUIRE(s.ok());
  }
  REQUIRE(c.StartNode("workerd", "worker-0", {"--cpu_threads=1"}).ok());
  REQUIRE(WaitFor([&] { return c.AliveCount() == 4; }, absl::Seconds(15)));
  const std::string job = WriteJob(
      c, "job.yaml",
      "name: ckpt-test\nmodel: mlp\niterations: 20\neval_every: 0\ncheckpoint_every_rounds: 5\n");
  v1::JobStatus j, first;
  for (v1::JobStatus* out : {&first, &j}) {
    ProcessResult sub = c.Psctl({"job", "submit", job, "-o", "json"});
    INFO(sub.stdout_text << sub.stderr_text);
    REQUIRE(sub.exit_code == 0);
    REQUIRE(c.WaitJobEnded(absl::Seconds(120), out));
    REQUIRE(out->state() == v1::JOB_STATE_SUCCEEDED);
  }
  REQUIRE(first.job_id() != j.job_id());
  // psctl asks each psd of the newest job for its checkpoints.
  ProcessResult list = c.Psctl({"checkpoint", "list", "-o", "json"});
  INFO(list.stdout_text << list.stderr_text);
  REQUIRE(list.exit_code == 0);
  for (const char* id : {"psd-0", "psd-1"}) {
    CHECK(list.stdout_text.find(absl::StrCat("\"node_id\":\"", id, "\"")) != std::string::npos);
  }
  CHECK(list.stdout_text.find("\"round\":") != std::string::npos);
  CHECK(list.stdout_text.find("\"error\":\"\"") != std::string::npos);
  ProcessResult show = c.Psctl({"checkpoint", "show", j.job_id()});
  INFO(show.stdout_text << show.stderr_text);
  CHECK(show.exit_code == 0);
  CHECK(show.stdout_text.find("psd-1") != std::string::npos);
  std::vector<uint32_t> servers;
  for (const char* id : {"psd-0", "psd-1"}) {
    c.Kill(id, SIGTERM);  // RocksDB allows one process per store
    REQUIRE(c.WaitExit(id, absl::Seconds(20)) == 0);
    storage::CheckpointStoreConfig cfg;
    cfg.dir = c.dir() + "/ckpt-" + id;
    auto store = storage::CheckpointStore::Open(cfg);
    REQUIRE(store.ok());
    auto jobs = (*store)->Jobs();
    REQUIRE(jobs.ok());
    CHECK(*jobs == std::vector<std::string>{j.job_id()});  // the first job's removed
    auto list = (*store)->List(j.job_id());
    REQUIRE(list.ok());
    // The first offer (round 5) finds the writer idle; later ones may find
    // it busy and be skipped: between 1 and 3 (keep_last) remain.
    REQUIRE(!list->empty());
    CHECK(list->size() <= 3);
    const storage::CheckpointInfo& newest = list->front();
    INFO(id << " round " << newest.round);
    CHECK(newest.round % 5 == 0);
    CHECK(newest.round >= 5);
    CHECK(newest.round <= 20);
    servers.push_back(newest.server_index);
    auto ck = (*store)->ReadNewest(j.job_id(), newest.server_index);
    REQUIRE(ck.ok());
    CHECK(ck->round == newest.round);
    CHECK(ck->optimizer_steps == ck->round);
    CHECK(!ck->chunks.empty());
    CHECK(ck->spec.find("checkpoint_every_rounds: 5") != std::string::npos);
    for (const storage::ChunkState& ch : ck->chunks) CHECK(ch.slots.size() == 1);  // momentum
  }
  std::sort(servers.begin(), servers.end());
  CHECK(servers == std::vector<uint32_t>{0, 1});
}

// A checkpoint_dir that cannot be a directory (under a regular file): the
// job trains to the end without checkpoints; the psd says why in its log
// and counts it in psd_checkpoints_total{result="open_failed"}.
TEST_CASE("An unusable checkpoint directory: training goes on; logged and counted") {
  LocalCluster c("job-ckpt-bad");
  const std::string file = c.dir() + "/not-a-dir";
  { std::ofstream(file) << "x"; }
  REQUIRE(c.StartSchedd().ok());
  for (const char* id : {"psd-0", "psd-1"}) {
    REQUIRE(c.StartNode("psd", id, {"--checkpoint_dir=" + file + "/ckpt"}).ok());
  }
  REQUIRE(c.StartNode("workerd", "worker-0", {"--cpu_threads=1"}).ok());
  REQUIRE(WaitFor([&] { return c.AliveCount() == 4; }, absl::Seconds(15)));
  const std::string job = WriteJob(
      c, "job.yaml",
      "name: ckpt-bad\nmodel: mlp\niterations: 20\neval_every: 0\ncheckpoint_every_rounds: 5\n");
  ProcessResult sub = c.Psctl({"job", "submit", job, "-o", "json"});
  REQUIRE(sub.exit_code == 0);
  v1::JobStatus j;
  REQUIRE(c.WaitJobEnded(absl::Seconds(120), &j));
  INFO(j.message());
  CHECK(j.state() == v1::JOB_STATE_SUCCEEDED);
  for (const char* id : {"psd-0", "psd-1"}) {
    INFO(id);
    absl::StatusOr<std::string> m = HttpGet(c.node(id).metrics_address, "/metrics");
    REQUIRE(m.ok());
    CHECK(m->find("psd_checkpoints_total{result=\"open_failed\"} 1") != std::string::npos);
    CHECK(c.node(id).process.Stderr().find("checkpoint store cannot be opened") !=
          std::string::npos);
  }
}

// The model out and back in through the cluster: a job trains (200
// iterations) and its rank 0 worker saves the model; psctl job export
// fetches it; hetps-train --eval reports the accuracy the job reported,
// and a Python script with json and numpy alone reads it (the same
// accuracy within 0.001: float summation order may flip a near-tie). A
// job whose learning rate is too small to move it starts from the file
// (init_from) and ends at that accuracy, far from the 10% of the seed's
// random parameters. A missing file fails the job naming it.
TEST_CASE("A job's model: exported, evaluated, read by numpy, and trained on (init_from)") {
  LocalCluster c("job-init");
  StartCluster(c, 1, {}, {}, {"--model_dir=" + c.dir() + "/models"});
  const std::string trained =
      WriteJob(c, "train.yaml", "name: export-test\nmodel: mlp\niterations: 200\neval_every: 0\n");
  ProcessResult sub = c.Psctl({"job", "submit", trained, "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  v1::JobStatus j;
  REQUIRE(c.WaitJobEnded(absl::Seconds(120), &j));
  REQUIRE(j.state() == v1::JOB_STATE_SUCCEEDED);
  const double want = j.test_accuracy();
  REQUIRE(want > 0.6);

  const std::string file = c.dir() + "/exported.safetensors";
  ProcessResult exp = c.Psctl({"job", "export", j.job_id(), "-o", file});
  INFO(exp.stdout_text << exp.stderr_text);
  REQUIRE(exp.exit_code == 0);
  CHECK(exp.stdout_text.find("wrote " + file) != std::string::npos);
  ProcessResult eval = RunCommand({Runfile("clients/train/hetps-train"), "--eval", file});
  INFO(eval.stdout_text << eval.stderr_text);
  REQUIRE(eval.exit_code == 0);
  CHECK(eval.stdout_text.find(absl::StrFormat("test accuracy %.4f,", want)) != std::string::npos);
  ProcessResult py = RunCommand({"/usr/bin/python3", Runfile("tests/read_model.py"), file});
  INFO(py.stdout_text << py.stderr_text);
  REQUIRE(py.exit_code == 0);
  CHECK(py.stdout_text.find("tensor dense1.weight [256, 784]") != std::string::npos);
  const size_t at = py.stdout_text.find("numpy accuracy ");
  REQUIRE(at != std::string::npos);
  CHECK(std::abs(std::strtod(py.stdout_text.c_str() + at + 15, nullptr) - want) <= 0.001);
  // A job that is not done has no model to export yet; a wrong -o is usage.
  CHECK(c.Psctl({"job", "export", "job-none", "-o", file}).exit_code == 1);
  CHECK(c.Psctl({"job", "export", j.job_id()}).exit_code == 2);

  const std::string job =
      WriteJob(c, "job.yaml",
               absl::StrCat("name: init-test\nmodel: mlp\niterations: 10\neval_every: 0\n"
                            "learning_rate: 0.000001\ninit_from: ",
                            file, "\n"));
  sub = c.Psctl({"job", "submit", job, "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  REQUIRE(c.WaitJobEnded(absl::Seconds(120), &j));
  INFO(j.message());
  REQUIRE(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(std::abs(j.test_accuracy() - want) <= 0.01);

  const std::string missing = WriteJob(
      c, "missing.yaml",
      "name: init-missing\nmodel: mlp\niterations: 10\ninit_from: /nonexistent/m.safetensors\n");
  ProcessResult sub2 = c.Psctl({"job", "submit", missing, "-o", "json"});
  REQUIRE(sub2.exit_code == 0);
  REQUIRE(c.WaitJobEnded(absl::Seconds(120), &j));
  CHECK(j.state() == v1::JOB_STATE_FAILED);
  CHECK(j.message().find("/nonexistent/m.safetensors") != std::string::npos);
}

TEST_CASE("A killed workerd: rounds close at the deadline, the job finishes with the other") {
  LocalCluster c("job-kill", /*heartbeat_interval_ms=*/300);
  StartCluster(c, 2);
  // The deadline (400 ms) is shorter than death detection (3 x 300 ms), so
  // the first rounds without worker-1 close at the deadline; then schedd's
  // membership change removes it from the roster.
  const std::string job = WriteJob(c, "job.yaml",
                                   "name: kill-test\nmodel: mlp\niterations: 400\n"
                                   "eval_every: 100\nround_deadline_ms: 400\n");
  ProcessResult sub = c.Psctl({"job", "submit", job, "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  CHECK(sub.stdout_text.find("\"state\":\"starting\"") != std::string::npos);

  REQUIRE(WaitFor(
      [&] {
        v1::JobStatus j = c.Job();
        return j.state() == v1::JOB_STATE_RUNNING && j.iteration() >= 100;
      },
      absl::Seconds(60)));
  // Per-peer series carry node ids, never a placeholder address.
  auto psd_metrics = [&] {
    absl::StatusOr<std::string> m = HttpGet(c.node("psd-0").metrics_address, "/metrics");
    return m.ok() ? *m : std::string();
  };
  CHECK(WaitFor(
      [&] {
        const std::string m = psd_metrics();
        return m.find("psd_data_peer_rtprop_seconds{peer=\"worker-1\"}") != std::string::npos &&
               m.find("psd_data_peer_rtprop_seconds{peer=\"worker-0\"}") != std::string::npos;
      },
      absl::Seconds(10)));
  CHECK(psd_metrics().find("0.0.0.0:0") == std::string::npos);
  c.Kill("worker-1", SIGKILL);
  const int64_t killed_at = c.Job().iteration();

  v1::JobStatus j;
  REQUIRE(c.WaitJobEnded(absl::Seconds(120), &j));
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
  ProcessResult status = c.Psctl({"job", "status"});
  CHECK(status.exit_code == 0);
  CHECK(status.stdout_text.find("succeeded") != std::string::npos);
  CHECK(c.AliveCount() == 4);
  // The peer that left takes its series with it (data_peer_forget_ms).
  CHECK(WaitFor([&] { return psd_metrics().find("peer=\"worker-1\"") == std::string::npos; },
                absl::Seconds(10)));
}

TEST_CASE("Bad specs are refused with the key named; cancel stops a job; the next job runs") {
  LocalCluster c("job-cancel");
  StartCluster(c, 1);
  ProcessResult none = c.Psctl({"job", "status"});
  CHECK(none.exit_code == 1);
  CHECK(none.stderr_text.find("no job") != std::string::npos);

  ProcessResult bad =
      c.Psctl({"job", "submit", WriteJob(c, "bad.yaml", "model: mlp\nepochs: 1\nbatch_size: 0\n")});
  CHECK(bad.exit_code == 1);
  CHECK(bad.stderr_text.find("batch_size") != std::string::npos);
  CHECK(bad.stderr_text.find("bad.yaml") != std::string::npos);
  ProcessResult missing = c.Psctl({"job", "submit", c.dir() + "/nope.yaml"});
  CHECK(missing.exit_code == 2);
  // Spec nits: each refused with what is wrong.
  ProcessResult dir = c.Psctl({"job", "submit", c.dir()});
  CHECK(dir.exit_code == 2);
  CHECK(dir.stderr_text.find("is not a regular file") != std::string::npos);
  ProcessResult binary = c.Psctl({"job", "submit",
                                  WriteJob(c, "bin.yaml",
                                           std::string("\x7f"
                                                       "ELF\x02\x01\0\xff",
                                                       8))});
  CHECK(binary.exit_code == 2);
  CHECK(binary.stderr_text.find("not UTF-8 text") != std::string::npos);
  CHECK(binary.stderr_text.find("libprotobuf") == std::string::npos);
  ProcessResult zero =
      c.Psctl({"job", "submit", WriteJob(c, "zero.yaml", "model: mlp\nepochs: 0\n")});
  CHECK(zero.exit_code == 1);
  CHECK(zero.stderr_text.find("'epochs: 0' trains nothing") != std::string::npos);
  ProcessResult twice =
      c.Psctl({"job", "submit", WriteJob(c, "twice.yaml", "model: mlp\nepochs: 1\nepochs: 2\n")});
  CHECK(twice.exit_code == 1);
  CHECK(twice.stderr_text.find("'epochs' is given twice") != std::string::npos);
  ProcessResult int_type =
      c.Psctl({"job", "submit", WriteJob(c, "int.yaml", "model: mlp\nepochs: [1]\n")});
  CHECK(int_type.stderr_text.find("expected an integer") != std::string::npos);
  // `job` against a workerd says where it should go, not an empty message.
  ProcessResult wrong = c.Psctl({"job", "status"}, c.node("worker-0").control_address);
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.stderr_text.find("nodes and job go to schedd") != std::string::npos);
  ProcessResult too_many = c.Psctl(
      {"job", "submit", WriteJob(c, "ok.yaml", "model: mlp\niterations: 50\n"), "--workers=2"});
  CHECK(too_many.exit_code == 1);
  CHECK(too_many.stderr_text.find("only 1") != std::string::npos);

  // A long job, cancelled while it runs.
  REQUIRE(
      c.Psctl({"job", "submit", WriteJob(c, "long.yaml", "model: mlp\nepochs: 50\n")}).exit_code ==
      0);
  REQUIRE(WaitFor([&] { return c.Job().iteration() >= 20; }, absl::Seconds(60)));
  ProcessResult busy = c.Psctl({"job", "submit", c.dir() + "/ok.yaml"});
  CHECK(busy.exit_code == 1);
  CHECK(busy.stderr_text.find("still active") != std::string::npos);
  // Draining a member of the running job is refused, saying what it would do.
  ProcessResult psd_drain = c.Psctl({"drain"}, c.node("psd-0").control_address);
  CHECK(psd_drain.exit_code == 1);
  CHECK(psd_drain.stderr_text.find("fails the job") != std::string::npos);
  CHECK(psd_drain.stderr_text.find("--force") != std::string::npos);
  ProcessResult worker_drain = c.Psctl({"drain"}, c.node("worker-0").control_address);
  CHECK(worker_drain.exit_code == 1);
  CHECK(worker_drain.stderr_text.find("the job goes on") != std::string::npos);
  CHECK(c.Job().state() == v1::JOB_STATE_RUNNING);  // nothing happened
  CHECK(c.AliveCount() == 4);
  ProcessResult cancel = c.Psctl({"job", "cancel"});
  CHECK(cancel.exit_code == 0);
  CHECK(cancel.stdout_text.find("cancelled") != std::string::npos);
  CHECK(c.Psctl({"job", "status"}).exit_code == 1);  // a cancelled job's status exits 1

  // The daemons drop it and take the next job, whose name is hostile to
  // terminals: escape sequences and a right-to-left override.
  ProcessResult next =
      c.Psctl({"job", "submit",
               WriteJob(c, "next.yaml",
                        "model: mlp\niterations: 50\nname: \"evil\\e[2J\\u202Eredaol\"\n")});
  INFO(next.stderr_text);
  REQUIRE(next.exit_code == 0);
  v1::JobStatus j;
  REQUIRE(c.WaitJobEnded(absl::Seconds(60), &j));
  INFO(j.message());
  CHECK(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.iteration() == 50);
  CHECK(j.name() == "evil\x1b[2J\u202Eredaol");  // stored as given
  ProcessResult shown = c.Psctl({"job", "status"});
  CHECK(shown.stdout_text.find("evil\\x1B[2J\\u202Eredaol") != std::string::npos);
  CHECK(shown.stdout_text.find('\x1b') == std::string::npos);
  CHECK(shown.stdout_text.find("\u202E") == std::string::npos);
  ProcessResult as_json = c.Psctl({"job", "status", "-o", "json"});
  CHECK(as_json.stdout_text.find("evil\\u001b[2J\\u202eredaol") != std::string::npos);
  const std::string log = c.node("schedd").process.Stderr();
  CHECK(log.find("evil\\x1B[2J\\u202Eredaol") != std::string::npos);
  CHECK(log.find('\x1b') == std::string::npos);

  // The same daemons run the next job over kernel TCP (transport: tcp).
  ProcessResult tcp = c.Psctl(
      {"job", "submit", WriteJob(c, "tcp.yaml", "model: mlp\niterations: 30\ntransport: tcp\n")});
  INFO(tcp.stderr_text);
  REQUIRE(tcp.exit_code == 0);
  REQUIRE(c.WaitJobEnded(absl::Seconds(60), &j));
  INFO(j.message());
  CHECK(j.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(j.iteration() == 30);

  // --force drains a member anyway, with the effect it announced.
  REQUIRE(c.Psctl({"job", "submit", c.dir() + "/long.yaml"}).exit_code == 0);
  REQUIRE(WaitFor([&] { return c.Job().iteration() >= 5; }, absl::Seconds(60)));
  ProcessResult forced = c.Psctl({"drain", "--force"}, c.node("psd-1").control_address);
  CHECK(forced.exit_code == 0);
  CHECK(c.WaitExit("psd-1", absl::Seconds(10)) == 0);
  REQUIRE(c.WaitJobEnded(absl::Seconds(30), &j));
  CHECK(j.state() == v1::JOB_STATE_FAILED);
  CHECK(j.message().find("psd-1") != std::string::npos);
}

}  // namespace testing
}  // namespace hetps
