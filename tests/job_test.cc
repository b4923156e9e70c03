// Training jobs through the real binaries on 127.0.0.1: psctl job submit /
// status / cancel / export, schedd handing jobs to psd and workerd,
// training over the UDP data plane, traces, checkpoints, models, and a
// workerd killed mid-job (the round closes at its deadline and the job
// goes on with the other worker). Daemons that crash and come back:
// recovery_test.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
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
#include "lib/train/backend.h"
#include "tests/job_helpers.h"
#include "tests/testing/cluster.h"

namespace hetps {
namespace testing {

// trace_dir: every psd writes a line per round and every workerd a line
// per iteration, each a timeline in one clock (docs/tracing.md).
TEST_CASE("A traced job writes each round's timeline on every node") {
  LocalCluster c("job-trace");
  const std::string dir = c.dir() + "/trace";
  REQUIRE(mkdir(dir.c_str(), 0755) == 0);
  StartCluster(c, 2, {"--trace_dir=" + dir});
  const std::string job =
      WriteJob(c, "job.yaml", "name: trace-test\nmodel: mlp\niterations: 30\neval_every: 0\n");
  const v1::JobStatus j = RunToEnd(c, job);
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
      // Both workers' broadcast flows, each naming its worker.
      CHECK(l.find("\"bcasts\":[{\"worker\":") != std::string::npos);
      CHECK(l.find(",\"timing\":{\"submitted\":") != std::string::npos);
      CHECK(l.find("{\"worker\":0,\"seg\":") != std::string::npos);
      CHECK(l.find("{\"worker\":1,\"seg\":") != std::string::npos);
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
TEST_CASE("An adaptive job reports its links; schedd keeps its plan; psctl shows both") {
  LocalCluster c("job-adaptive");
  StartHostsCluster(c);
  const std::string job = WriteJob(c, "job.yaml",
                                   "name: adaptive\nmodel: mlp\niterations: 400\neval_every: 0\n"
                                   "chunk_size: 4096\nload_policy: elastic\nupdate_time_s: 1\n"
                                   "update_rate: 0\nprobe_chunk_num: 2\n");
  const v1::JobStatus j = RunToEnd(c, job);
  ProcessResult links = c.Psctl({"links", "-o", "json"});
  INFO(links.stdout_text << links.stderr_text);
  REQUIRE(links.exit_code == 0);
  // Every worker-psd pair, both ways: pushes measured at the psd, pulls at the worker.
  for (const char* psd : {"psd-0", "psd-1"}) {
    for (const char* worker : {"worker-0", "worker-1"}) {
      for (auto [from, to] : {std::pair{psd, worker}, std::pair{worker, psd}}) {
        INFO(from << " -> " << to);
        CHECK(links.stdout_text.find(absl::StrCat("\"from\":\"", from, "\",\"to\":\"", to,
                                                  "\",\"throughput_bytes_per_second\":")) !=
              std::string::npos);
      }
    }
  }
  ProcessResult table = c.Psctl({"links"});
  CHECK(table.stdout_text.find("Mbit/s") != std::string::npos);
  ProcessResult policy = c.Psctl({"policy", "show", "-o", "json"});
  INFO(policy.stdout_text << policy.stderr_text);
  REQUIRE(policy.exit_code == 0);
  CHECK(policy.stdout_text.find(absl::StrCat("\"job_id\":\"", j.job_id(), "\"")) !=
        std::string::npos);
  CHECK(policy.stdout_text.find("\"last_decision\":\"") != std::string::npos);
  CHECK(policy.stdout_text.find("\"settled_unix_ms\":") != std::string::npos);
  ProcessResult shown = c.Psctl({"policy", "show"});
  CHECK(shown.exit_code == 0);
  CHECK(shown.stdout_text.find("CHUNKS/PSD") != std::string::npos);
  // Past version 1 it says whether the plan in force settled.
  if (policy.stdout_text.find("\"policy\":{\"version\":1,") == std::string::npos) {
    CHECK((shown.stdout_text.find("settled ") != std::string::npos ||
           shown.stdout_text.find("switching") != std::string::npos));
  }
  // A plan issued mid-job reached psd 0, which sequenced it; the job
  // still ended with every round complete.
  if (policy.stdout_text.find("\"policy\":{\"version\":1,") == std::string::npos) {
    CHECK(c.node("psd-0").process.Stderr().find("plan proposed") != std::string::npos);
  }
  for (const char* psd : {"psd-0", "psd-1"}) {
    const v1::NodeJobStatus* n = Node(j, psd);
    REQUIRE(n != nullptr);
    CHECK(n->report().rounds_by_deadline() == 0);
  }
}

// WLBS end to end: worker-1 computes 3x slower (compute_slowdown), so
// schedd gives it a smaller share of the global batch; the job still
// closes every round complete.
TEST_CASE("A wlbs job gives a slowed worker a smaller batch") {
  LocalCluster c("job-wlbs");
  REQUIRE(c.StartSchedd().ok());
  REQUIRE(c.StartNode("psd", "psd-0").ok());
  REQUIRE(c.StartNode("workerd", "worker-0", {"--cpu_threads=1", "--report_every=5"}).ok());
  REQUIRE(c.StartNode("workerd", "worker-1",
                      {"--cpu_threads=1", "--report_every=5", "--compute_slowdown=3"})
              .ok());
  REQUIRE(WaitFor([&] { return c.AliveCount() == 4; }, absl::Seconds(15)));
  const std::string job = WriteJob(c, "job.yaml",
                                   "name: wlbs\nmodel: mlp\niterations: 300\neval_every: 0\n"
                                   "batch_size: 64\nbatch_policy: wlbs\nupdate_time_s: 1\n");
  const v1::JobStatus j = RunToEnd(c, job);
  ProcessResult policy = c.Psctl({"policy", "show", "-o", "json"});
  INFO(policy.stdout_text << policy.stderr_text);
  REQUIRE(policy.exit_code == 0);
  // The plan in force: worker-0 has more of the 128 samples than worker-1.
  const std::string& out = policy.stdout_text;
  const size_t in_force = out.find("\"policy\":{");
  REQUIRE(in_force != std::string::npos);
  auto batch_of = [&](const std::string& worker) {
    const std::string key = "{\"worker\":\"" + worker + "\",\"batch_size\":";
    const size_t at = out.find(key, in_force);
    return at == std::string::npos ? -1 : std::atoi(out.c_str() + at + key.size());
  };
  CHECK(batch_of("worker-0") > 64);
  CHECK(batch_of("worker-1") < 64);
  CHECK(batch_of("worker-0") + batch_of("worker-1") == 128);
  // The job ends when the workers are done; psd-0's report of the last
  // round may come a heartbeat later.
  v1::JobStatus last = j;
  auto closed = [&] {
    last = c.Job();
    const v1::NodeJobStatus* psd = Node(last, "psd-0");
    if (psd == nullptr) return false;
    const v1::NodeJobReport& r = psd->report();
    return r.rounds_complete() + r.rounds_by_deadline() + r.rounds_by_membership() == 300;
  };
  REQUIRE(WaitFor(closed, absl::Seconds(15)));
  const v1::NodeJobStatus* psd = Node(last, "psd-0");
  CHECK(psd->report().rounds_complete() == 300);
}

TEST_CASE("A checkpointed job leaves each psd's part in its store") {
  LocalCluster c("job-ckpt");
  REQUIRE(c.StartSchedd().ok());
  for (const char* id : {"psd-0", "psd-1"}) {
    absl::Status s = c.StartNode("psd", id,
                                 {"--checkpoint_dir=" + c.dir() + "/ckpt-" + id,
                                  "--checkpoint_keep_jobs=0", "--checkpoint_keep=10"});
    INFO(s.message());
    REQUIRE(s.ok());
  }
  REQUIRE(c.StartNode("workerd", "worker-0", {"--cpu_threads=1"}).ok());
  REQUIRE(WaitFor([&] { return c.AliveCount() == 4; }, absl::Seconds(15)));
  const std::string job = WriteJob(
      c, "job.yaml",
      "name: ckpt-test\nmodel: mlp\niterations: 20\neval_every: 0\ncheckpoint_every_rounds: 5\n");
  const v1::JobStatus first = RunToEnd(c, job);
  const v1::JobStatus j = RunToEnd(c, job);
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

  // A job starts from a round both psds hold (init_from: checkpoint:JOB@R;
  // round 5 always is: the first offer finds each writer idle). With a
  // learning rate too small to move them, its parameters are that round's:
  // at R = 20 the second job's final accuracy, and far from the seed's 10%.
  const size_t at = list.stdout_text.find("\"newest_common_round\":");
  REQUIRE(at != std::string::npos);
  const int64_t round = std::strtoll(list.stdout_text.c_str() + at + 22, nullptr, 10);
  INFO("newest common round " << round);
  REQUIRE(round >= 5);
  const std::string from =
      WriteJob(c, "from.yaml",
               absl::StrCat("name: from-ckpt\nmodel: mlp\niterations: 10\neval_every: 0\n"
                            "learning_rate: 0.000001\ninit_from: checkpoint:",
                            j.job_id(), "@", round, "\n"));
  v1::JobStatus k = RunToEnd(c, from);
  if (round == 20) CHECK(std::abs(k.test_accuracy() - j.test_accuracy()) <= 0.01);
  CHECK(k.test_accuracy() > 0.3);
  const std::string none =
      WriteJob(c, "none.yaml",
               "name: from-none\nmodel: mlp\niterations: 10\ninit_from: checkpoint:job-none\n");
  REQUIRE(c.Psctl({"job", "submit", none, "-o", "json"}).exit_code == 0);
  REQUIRE(c.WaitJobEnded(absl::Seconds(120), &k));
  CHECK(k.state() == v1::JOB_STATE_FAILED);
  CHECK(k.message().find("no usable checkpoint") != std::string::npos);
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
    // it busy and be skipped: between 1 and 4 remain.
    REQUIRE(!list->empty());
    CHECK(list->size() <= 4);
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
  v1::JobStatus j = RunToEnd(c, trained);
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
  j = RunToEnd(c, job);
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
