// BSP through real shard servers and workers over loopback UDP, in one
// process (threads): equivalence with single-process training, a worker
// dying mid-job, and accuracy on Fashion-MNIST.
#include <catch2/catch.hpp>
#include <cmath>
#include <thread>

#include "lib/job/bsp_worker.h"
#include "lib/job/local_training.h"
#include "lib/ps/shard_server.h"

namespace hetps {
namespace {

constexpr uint64_t kSession = 0xBEEF;

struct Cluster {
  std::vector<std::unique_ptr<train::Backend>> backends;
  std::vector<std::unique_ptr<ps::ShardServer>> servers;
  std::vector<std::unique_ptr<BspWorker>> workers;

  Cluster(const JobSpec& job, int num_servers, int num_workers, absl::Duration deadline) {
    train::SetCpuThreads(1);  // several trainers share this machine's cores
    transport::EndpointConfig ec;
    ec.session = kSession;
    std::vector<transport::Peer> worker_peers, server_peers;
    for (int w = 0; w < num_workers; ++w) {
      backends.push_back(train::NewCpuBackend());
      BspWorkerConfig c;
      c.job = job;
      c.rank = w;
      c.workers = num_workers;
      c.endpoint = ec;
      c.evaluate = w == 0;
      c.pull_timeout = absl::Seconds(30);
      auto wk = BspWorker::Create(c, backends.back().get());
      REQUIRE(wk.ok());
      worker_peers.push_back((*wk)->local());
      workers.push_back(std::move(*wk));
    }
    auto spec = *train::BuiltinModel(job.model);
    auto probe = *train::Model::Create(spec, backends[0].get(), 1);
    const std::vector<float> init = probe->InitialParameters(job.seed);
    for (int s = 0; s < num_servers; ++s) {
      ps::ShardServerConfig c;
      c.server_index = s;
      c.num_servers = num_servers;
      c.num_params = init.size();
      c.chunk_floats = static_cast<uint32_t>(job.chunk_size);
      c.optimizer = job.optimizer_config();
      c.total_iterations = static_cast<uint32_t>(workers[0]->total_iterations());
      c.round_deadline = deadline;
      c.endpoint = ec;
      auto sv = ps::ShardServer::Create(c, init);
      REQUIRE(sv.ok());
      (*sv)->SetWorkers(worker_peers);
      server_peers.push_back((*sv)->local());
      servers.push_back(std::move(*sv));
    }
    for (auto& w : workers) w->SetServers(server_peers);
  }
  void Start() {
    for (auto& s : servers) s->Start();
  }
};

// Norm-wise relative error ||a - b|| / ||b||.
double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

JobSpec SmallJob(int iterations) {
  auto j = ParseJobSpec(
      "model: mlp\nbatch_size: 32\nlearning_rate: 0.05\nmomentum: 0.9\nchunk_size: 4096\n"
      "eval_every: 0\nseed: 3\nbackend: cpu\niterations: 1\n",
      "test");
  REQUIRE(j.ok());
  j->iterations = iterations;
  return *j;
}

TEST_CASE("one worker through the cluster equals single-process training exactly", "[bsp]") {
  const JobSpec job = SmallJob(25);
  Cluster c(job, 1, 1, absl::Seconds(10));
  c.Start();
  REQUIRE(c.workers[0]->Run(0, nullptr).ok());
  REQUIRE(c.servers[0]->WaitFinished(absl::Seconds(10)));
  auto local = RunLocalTraining(job, 1, 0, nullptr);
  REQUIRE(local.ok());
  CHECK(c.workers[0]->params() == local->params);  // bit for bit
  CHECK(c.servers[0]->GetStats().rounds_complete == 25);
}

TEST_CASE("two workers, two servers: BSP equals training on the combined batch", "[bsp]") {
  const JobSpec job = SmallJob(25);
  Cluster c(job, 2, 2, absl::Seconds(10));
  c.Start();
  std::thread second([&] { CHECK(c.workers[1]->Run(0, nullptr).ok()); });
  REQUIRE(c.workers[0]->Run(0, nullptr).ok());
  second.join();
  auto local = RunLocalTraining(job, 2, 0, nullptr);
  REQUIRE(local.ok());
  const double err = RelErr(c.workers[0]->params(), local->params);
  INFO("max relative error " << err);
  CHECK(err <= 1e-5);
  CHECK(c.workers[0]->params() == c.workers[1]->params());
  for (auto& s : c.servers) {
    REQUIRE(s->WaitFinished(absl::Seconds(10)));
    CHECK(s->GetStats().rounds_complete == 25);
  }
}

TEST_CASE("a worker that dies mid-job: rounds close at the deadline, the job goes on", "[bsp]") {
  const JobSpec job = SmallJob(40);
  Cluster c(job, 1, 2, absl::Milliseconds(300));
  c.Start();
  std::atomic<int64_t> victim_iterations{0};
  std::thread victim([&] {
    auto st = c.workers[1]->Run(1, [&](const WorkerProgress& p) {
      victim_iterations = p.iteration;
      if (p.iteration == 10) c.workers[1]->Stop();  // dies: no more pushes
    });
    CHECK(st.code() == absl::StatusCode::kCancelled);
  });
  const auto start = absl::Now();
  REQUIRE(c.workers[0]->Run(0, nullptr).ok());
  victim.join();
  const auto stats = c.servers[0]->GetStats();
  INFO("deadline rounds " << stats.rounds_by_deadline << ", complete " << stats.rounds_complete);
  CHECK(victim_iterations == 10);
  CHECK(stats.rounds_by_deadline >= 29);  // every round after the death
  CHECK(stats.rounds_complete >= 9);
  CHECK(stats.last_contributors == 1);
  CHECK(absl::Now() - start < absl::Seconds(30));  // no hang
  CHECK(c.servers[0]->WaitFinished(absl::Seconds(5)));
}

TEST_CASE("removing a dead worker from membership closes rounds without waiting", "[bsp]") {
  const JobSpec job = SmallJob(30);
  Cluster c(job, 1, 2, absl::Seconds(30));  // a deadline the test would notice
  c.workers[1]->Stop();                     // never trains
  c.Start();
  std::thread membership([&] {
    absl::SleepFor(absl::Milliseconds(200));
    c.servers[0]->SetWorkers({c.workers[0]->local()});
  });
  const auto start = absl::Now();
  REQUIRE(c.workers[0]->Run(0, nullptr).ok());
  membership.join();
  CHECK(absl::Now() - start < absl::Seconds(10));
  const auto stats = c.servers[0]->GetStats();
  CHECK(stats.rounds_by_membership == 1);
  CHECK(stats.rounds_complete == 29);
}

TEST_CASE("mlp through 2 servers and 2 workers reaches 85% test accuracy", "[bsp][data]") {
  auto job = ParseJobSpec(
      "model: mlp\nbatch_size: 64\nlearning_rate: 0.05\nmomentum: 0.9\nepochs: 4\n"
      "eval_every: 0\nbackend: cpu\n",
      "test");
  REQUIRE(job.ok());
  Cluster c(*job, 2, 2, absl::Seconds(10));
  c.Start();
  std::thread second([&] { CHECK(c.workers[1]->Run(0, nullptr).ok()); });
  WorkerProgress last;
  REQUIRE(c.workers[0]->Run(0, [&](const WorkerProgress& p) { last = p; }).ok());
  second.join();
  WARN("compute " << last.compute_s << " s, push " << last.push_s << " s, pull wait "
                  << last.pull_wait_s << " s");
  {
    auto ws = c.workers[0]->endpoint_stats();
    auto ss = c.servers[0]->endpoint().GetStats();
    WARN("worker: sent " << ws.data_packets_sent << " retx " << ws.retransmissions
                         << "; server: sent " << ss.data_packets_sent << " retx "
                         << ss.retransmissions << " replayed "
                         << ss.drops[size_t(transport::DropReason::kReplayed)]);
    for (auto& pe : ws.peers)
      WARN("worker peer rtprop " << pe.rtprop_us << " btlbw " << pe.btlbw_bps << " cwnd "
                                 << pe.cwnd_bytes);
  }
  INFO("accuracy " << c.workers[0]->final_eval().accuracy);
  CHECK(c.workers[0]->final_eval().accuracy >= 0.85);
}

}  // namespace
}  // namespace hetps
