// BSP through real shard servers and workers over loopback UDP, in one
// process (threads): equivalence with single-process training, a job
// resumed from checkpoints, a worker dying mid-job, and accuracy on
// Fashion-MNIST.
#include <catch2/catch.hpp>
#include <cmath>
#include <thread>

#include "lib/base/splitmix.h"
#include "lib/base/test_dir.h"
#include "lib/job/bsp_worker.h"
#include "lib/job/local_training.h"
#include "lib/ps/shard_server.h"
#include "lib/storage/checkpoint_store.h"
#include "lib/storage/checkpoint_writer.h"
#include "lib/transport/receiver_mux.h"
#include "lib/transport/test_flows.h"

namespace hetps {
namespace {

constexpr uint64_t kSession = 0xBEEF;

struct Cluster {
  // With loss: every node on one seeded simulated network (real time).
  std::unique_ptr<transport::SimNetwork> net;
  std::vector<std::unique_ptr<transport::ReceiverMux>> muxes;
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints;
  std::vector<std::unique_ptr<train::Backend>> backends;
  std::vector<std::unique_ptr<ps::ShardServer>> servers;
  std::vector<std::unique_ptr<BspWorker>> workers;

  // `loss` > 0: the nodes talk over a SimNetwork whose every link drops this
  // fraction of datagrams (data, ACKs and STOPs); else over loopback
  // sockets, each node binding its own.
  // `configure`, when set, adjusts each server's config (by index) before
  // it is created.
  Cluster(const JobSpec& job, int num_servers, int num_workers, absl::Duration deadline,
          double loss = 0,
          const std::function<void(int, ps::ShardServerConfig*)>& configure = nullptr,
          const std::function<void(int, BspWorkerConfig*)>& configure_worker = nullptr) {
    train::SetCpuThreads(1);  // several trainers share this machine's cores
    transport::EndpointConfig ec;
    ec.key = transport::testing::TestKey();
    if (loss > 0) {
      transport::LinkImpairment imp;
      imp.loss = loss;
      imp.delay_us = 0;
      net = std::make_unique<transport::SimNetwork>(RealClock::Get(), 1, imp);
    }
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
      if (configure_worker) configure_worker(w, &c);
      auto wk = BspWorker::Create(c, backends.back().get(), Shared(c.endpoint));
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
      c.segment_chunks = job.SegmentChunks();
      c.optimizer = job.optimizer_config();
      c.total_iterations = static_cast<uint32_t>(workers[0]->total_iterations());
      c.round_deadline = deadline;
      c.endpoint = ec;
      c.endpoint.early_close = job.early_close();
      c.endpoint.tcp_congestion = job.tcp_congestion_name();
      c.transport = transport::TransportKindFor(job.transport);
      c.num_workers = num_workers;
      c.batch_size = static_cast<uint32_t>(job.batch_size);
      c.batch_max = static_cast<uint32_t>(job.BatchMax(num_workers));
      if (configure) configure(s, &c);
      auto sv = ps::ShardServer::Create(c, init, Shared(c.endpoint));
      REQUIRE(sv.ok());
      (*sv)->SetWorkers(worker_peers);
      server_peers.push_back((*sv)->local());
      servers.push_back(std::move(*sv));
    }
    for (auto& w : workers) w->SetServers(server_peers);
    for (auto& s : servers) s->SetServers(server_peers);
    // Route each simulated endpoint's callbacks to its node.
    for (size_t i = 0; i < muxes.size(); ++i) {
      muxes[i]->Set(i < workers.size() ? static_cast<transport::Receiver*>(workers[i].get())
                                       : servers[i - workers.size()].get());
    }
  }
  ~Cluster() {
    for (auto& m : muxes) m->Set(nullptr);
    servers.clear();
    workers.clear();
    for (auto& e : endpoints) e->Shutdown();
  }
  // With a SimNetwork: a new endpoint on it (its receiver set once the node
  // exists); else null, and the node binds its own.
  transport::Transport* Shared(const transport::EndpointConfig& c) {
    if (net == nullptr) return nullptr;
    muxes.push_back(std::make_unique<transport::ReceiverMux>());
    const transport::Peer addr{htonl(0x0A000000u + uint32_t(muxes.size())), htons(7000)};
    auto e = transport::testing::SimEndpoint(*net, addr, c, muxes.back().get(), RealClock::Get());
    REQUIRE(e.ok());
    endpoints.push_back(std::move(*e));
    return endpoints.back().get();
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
  JobSpec job = SmallJob(25);
  job.transport = GENERATE("reliable", "tcp");  // the same job over UDP or kernel TCP
  // Each server's 29 chunks in one flow, or in segments of 3 (48 KiB)
  // sent as their pushes complete.
  job.segment_bytes = GENERATE(0, 3 * 4096 * 4);
  INFO("transport " << job.transport << ", segment_bytes " << job.segment_bytes);
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

// The psd recovery path without daemons: a job checkpoints as it trains;
// a second cluster resumes every server from the newest round both hold
// and every worker at that round. It ends at the uninterrupted run's
// parameters, bit for bit, and a resumed worker refuses older parameters.
TEST_CASE("servers resumed from checkpoints and workers at that round end where the job did",
          "[bsp]") {
  const JobSpec job = SmallJob(40);
  auto store = storage::CheckpointStore::Open({MakeTestDir("bsp-resume"), 10});
  REQUIRE(store.ok());
  std::vector<float> uninterrupted;
  {
    // One writer per server, as each psd has its own.
    storage::CheckpointWriter w0(store->get()), w1(store->get());
    storage::CheckpointWriter* writers[] = {&w0, &w1};
    Cluster c(job, 2, 1, absl::Seconds(10), 0, [&](int s, ps::ShardServerConfig* sc) {
      sc->checkpoints = writers[s];
      sc->checkpoint_every_rounds = 10;
      sc->job_id = "job-resume";
    });
    c.Start();
    REQUIRE(c.workers[0]->Run(0, nullptr).ok());
    uninterrupted = c.workers[0]->params();
    for (auto& s : c.servers) REQUIRE(s->WaitFinished(absl::Seconds(10)));
    for (auto* w : writers) w->Drain();
  }
  // Round 10 was offered to an idle writer; later ones may have been
  // skipped while it was busy. Resume at the newest round both servers
  // hold, as schedd would.
  std::vector<uint64_t> common;
  for (uint32_t s = 0; s < 2; ++s) {
    storage::ReadStats why;
    auto rounds = (*store)->ValidRounds("job-resume", s, &why);
    REQUIRE(rounds.ok());
    INFO("server " << s << ": " << (why.why.empty() ? "" : why.why[0]));
    REQUIRE(!rounds->empty());
    if (s == 0) {
      common = *rounds;
    } else {
      std::vector<uint64_t> both;
      for (uint64_t r : common) {
        if (std::find(rounds->begin(), rounds->end(), r) != rounds->end()) both.push_back(r);
      }
      common = both;
    }
  }
  // The final round's checkpoint would leave nothing to train: the newest before.
  common.erase(std::remove(common.begin(), common.end(), 40), common.end());
  REQUIRE(!common.empty());
  const uint64_t round = common.front();
  INFO("resumed at round " << round);
  REQUIRE(round >= 10);
  REQUIRE(round < 40);
  std::vector<storage::Checkpoint> ckpt;
  for (uint32_t s = 0; s < 2; ++s) {
    auto c = (*store)->Read("job-resume", s, round);
    REQUIRE(c.ok());
    ckpt.push_back(std::move(*c));
  }
  Cluster c(job, 2, 1, absl::Seconds(10), 0,
            [&](int s, ps::ShardServerConfig* sc) { sc->resume = &ckpt[s]; });
  c.workers[0]->ResumeAt(int64_t(round));
  // Parameters of an earlier round are not taken.
  transport::Header stale;
  stale.iteration = uint32_t(round - 1);
  CHECK(c.workers[0]->AcceptFlow(c.servers[0]->local(), stale) ==
        transport::DropReason::kUnexpected);
  c.Start();
  REQUIRE(c.workers[0]->Run(0, nullptr).ok());
  CHECK(c.workers[0]->params() == uninterrupted);  // bit for bit
  for (auto& s : c.servers) {
    REQUIRE(s->WaitFinished(absl::Seconds(10)));
    CHECK(s->GetStats().rounds_complete == 40 - round);
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

TEST_CASE("LTP with 5% loss on every link: partial pushes, yet every pull is bit-exact",
          "[bsp][ltp]") {
  JobSpec job = SmallJob(30);
  job.transport = "ltp";
  job.ltp_lt_fixed_ms = 1;  // close right after the first pass: bubbles every round
  job.segment_bytes = GENERATE(0, 3 * 4096 * 4);
  INFO("segment_bytes " << job.segment_bytes);
  Cluster c(job, 2, 2, absl::Seconds(10), 0.05);
  c.Start();
  std::thread second([&] { CHECK(c.workers[1]->Run(0, nullptr).ok()); });
  REQUIRE(c.workers[0]->Run(0, nullptr).ok());
  second.join();
  // Both workers end with the very parameters the servers hold.
  std::vector<float> servers_params(c.workers[0]->params().size());
  ps::ChunkLayout layout = *ps::ChunkLayout::Create(servers_params.size(), job.chunk_size);
  uint64_t partial = 0, bubbles = 0;
  for (auto& s : c.servers) {
    REQUIRE(s->WaitFinished(absl::Seconds(10)));
    const std::vector<float> owned = s->OwnedParams();
    size_t at = 0;
    for (uint32_t chunk : s->owned_chunks()) {
      const ps::Chunk ch = layout.chunk(chunk);
      std::copy_n(owned.begin() + at, ch.floats, servers_params.begin() + ch.offset);
      at += ch.floats;
    }
    const auto st = s->GetStats();
    CHECK(st.rounds_complete + st.rounds_by_deadline == 30);
    partial += st.partial_pushes;
    bubbles += st.bubble_bytes;
    auto es = s->endpoint().GetStats();
    WARN("server closes: complete " << es.lossy_closes[0] << ", fraction " << es.lossy_closes[1]
                                    << ", deadline " << es.lossy_closes[2]);
  }
  INFO("partial pushes " << partial << ", bubble bytes " << bubbles);
  CHECK(partial > 0);
  CHECK(bubbles > 0);
  CHECK(c.workers[0]->params() == servers_params);
  CHECK(c.workers[1]->params() == servers_params);
}

// Final test accuracy of mlp on Fashion-MNIST, 2 servers and 2 workers.
double TrainMlp(const std::string& transport, double loss) {
  auto job = ParseJobSpec(
      "model: mlp\nbatch_size: 64\nlearning_rate: 0.05\nlr_schedule: cosine\nmomentum: 0.9\n"
      "epochs: 4\n"
      "eval_every: 0\nbackend: cpu\ntransport: " +
          transport + "\n",
      "test");
  REQUIRE(job.ok());
  Cluster c(*job, 2, 2, absl::Seconds(10), loss);
  const absl::Time start = absl::Now();
  c.Start();
  std::thread second([&] { CHECK(c.workers[1]->Run(0, nullptr).ok()); });
  REQUIRE(c.workers[0]->Run(0, nullptr).ok());
  second.join();
  uint64_t partial = 0, bubbles = 0;
  for (auto& s : c.servers) {
    REQUIRE(s->WaitFinished(absl::Seconds(10)));
    partial += s->GetStats().partial_pushes;
    bubbles += s->GetStats().bubble_bytes;
  }
  std::string closes;
  for (auto& s : c.servers) {
    auto es = s->endpoint().GetStats();
    closes +=
        absl::StrCat(es.lossy_closes[0], "/", es.lossy_closes[1], "/", es.lossy_closes[2], " ");
  }
  WARN(transport << " at " << loss * 100 << "% loss: accuracy "
                 << c.workers[0]->final_eval().accuracy << ", partial pushes " << partial
                 << ", bubble bytes " << bubbles << ", closes " << closes << " in "
                 << absl::FormatDuration(absl::Now() - start));
  return c.workers[0]->final_eval().accuracy;
}

// Lossless reliable training must reach 85%; LTP with 1% loss within 0.5 pp of it.
TEST_CASE("mlp with LTP and 1% loss on every link is within 0.5 pp of lossless training",
          "[bsp][data][ltp]") {
  const double lossless = TrainMlp("reliable", 0);
  const double lossy = TrainMlp("ltp", 0.01);
  CHECK(lossless >= 0.85);
  CHECK(std::abs(lossy - lossless) <= 0.005);
}

// The plan protocol (docs/plan.md) under a running job: server 0 gets a
// new chunk map every few rounds, each pair delivered out of order (the
// older one after the newer), starting one round after it is announced;
// every link drops 2% of datagrams and jitters enough to reorder them.
// The first announcement is held back from server 2 until it has opened
// the round the plan starts at, so it must open that round again. No
// round is lost or applied twice, and the run ends bit for bit where the
// same job with the static even split does: chunks move with their
// momentum, and the servers sum in the same order.
TEST_CASE("plans that change every few rounds, announced late and out of order, change nothing",
          "[bsp][plan]") {
  const JobSpec job = SmallJob(60);
  // The plans' run sends each server's chunks in one flow, or in segments
  // of 2 as their pushes complete: the same parameters either way.
  JobSpec planned = job;
  planned.segment_bytes = GENERATE(0, 2 * 4096 * 4);
  INFO("segment_bytes " << planned.segment_bytes);
  transport::LinkImpairment lossy;
  lossy.loss = 0.02;
  lossy.delay_us = 200;
  lossy.jitter_us = 400;
  std::vector<float> fixed;
  {
    Cluster c(job, 3, 2, absl::Seconds(30), 0.02);
    c.Start();
    std::thread second([&] { CHECK(c.workers[1]->Run(0, nullptr).ok()); });
    REQUIRE(c.workers[0]->Run(0, nullptr).ok());
    second.join();
    fixed = c.workers[0]->params();
  }
  Cluster c(planned, 3, 2, absl::Seconds(30), 0.02,
            [](int, ps::ShardServerConfig* sc) { sc->plan_lead = 1; });
  for (auto& from : c.endpoints) {
    for (auto& to : c.endpoints) {
      if (from != to) c.net->SetLink(from->local(), to->local(), lossy);
    }
  }
  ps::ShardServer& lead = *c.servers[0];
  ps::ShardServer& third = *c.servers[2];
  transport::LinkImpairment cut = lossy;
  cut.loss = 1;
  c.net->SetLink(lead.local(), third.local(), cut);
  c.Start();
  std::thread second([&] { CHECK(c.workers[1]->Run(0, nullptr).ok()); });
  std::thread first([&] { CHECK(c.workers[0]->Run(0, nullptr).ok()); });

  const auto layout = *ps::ChunkLayout::Create(fixed.size(), uint32_t(job.chunk_size));
  SplitMix64 rng{42};
  auto random_map = [&](uint64_t version) {
    std::vector<uint32_t> owners(layout.num_chunks());
    for (uint32_t& o : owners) o = uint32_t(rng.Next() % 3);
    owners[0] = 2;  // something always leaves or joins server 2
    return *ps::ChunkMap::FromOwners(layout, 3, owners, version);
  };
  uint32_t issued = 0;
  for (uint32_t step = 0; step < 6; ++step) {
    const uint32_t at = 4 + 8 * step;
    REQUIRE(lead.AwaitStats([&](const ps::ShardServerStats& s) { return s.iteration >= at; },
                            absl::Minutes(1)));
    const uint64_t newer = 3 + 2 * step;
    REQUIRE(lead.ProposePlan(random_map(newer), {}, at + 2).ok());
    REQUIRE(lead.ProposePlan(random_map(newer - 1), {}, at + 2).ok());  // late: superseded
    issued = uint32_t(newer);
    if (step > 0) continue;
    // Server 2 cannot hear of the plan: it opens the plan's first round
    // under the old one. Then the announcement gets through.
    REQUIRE(lead.AwaitStats([&](const ps::ShardServerStats& s) { return s.plan_next == newer; },
                            absl::Minutes(1)));
    const uint32_t from = lead.GetStats().plan_next_from;
    REQUIRE(third.AwaitStats(
        [&](const ps::ShardServerStats& s) { return s.iteration == from && s.round_open; },
        absl::Minutes(1)));
    CHECK(third.GetStats().plan_version == 1);
    c.net->SetLink(lead.local(), third.local(), lossy);
  }
  first.join();
  second.join();

  CHECK(c.workers[0]->params() == fixed);  // bit for bit
  CHECK(c.workers[1]->params() == fixed);
  for (auto& s : c.servers) {
    REQUIRE(s->WaitFinished(absl::Seconds(30)));
    const ps::ShardServerStats st = s->GetStats();
    INFO("server with " << st.chunks_received << " chunks received, " << st.chunks_sent << " sent, "
                        << st.held_flows << " flows held, " << st.stale_plan << " stale");
    CHECK(st.plan_version == issued);  // every plan issued was followed
    CHECK(st.plan_switches == 6);
    CHECK(st.rounds_complete == 60);  // none lost, none twice, none at the deadline
    CHECK(st.stale_pushes == 0);
  }
  CHECK(lead.GetStats().plans_superseded == 6);
  CHECK(third.GetStats().rounds_reopened >= 1);
  // With segments, the round before a switch sends the parameters of the
  // chunks that move as its segments are applied.
  // And a switch's first round goes to the workers segment by segment as
  // each one's chunks are in, before the switch.
  uint64_t early = 0, ahead = 0;
  for (auto& s : c.servers) {
    early += s->GetStats().chunks_sent_early;
    ahead += s->GetStats().segments_ahead;
  }
  CHECK((early > 0) == (planned.segment_bytes > 0));
  CHECK((ahead > 0) == (planned.segment_bytes > 0));
  for (auto& w : c.workers) {
    const WorkerPlanStats ws = w->plan_stats();
    INFO("worker: " << ws.held_flows << " flows held, " << ws.stale_plan << " stale");
    CHECK(ws.version == issued);
    CHECK(ws.bad_packets == 0);
  }
}

// WLBS in the data plane: plans that give the workers unequal batches
// mid-job. Each worker trains on as many samples as its plan says, the
// servers weight each push by them, and where the chunks live changes
// nothing: two runs with the same batches and different chunk maps end bit
// for bit alike, and unlike the run with equal batches.
TEST_CASE("plans that change the workers' batches hold exactly from their round", "[bsp][wlbs]") {
  JobSpec job = SmallJob(30);
  job.batch_policy = "wlbs";
  const std::vector<std::pair<uint32_t, std::vector<uint32_t>>> batches = {{6, {48, 16}},
                                                                           {16, {20, 44}}};
  auto run = [&](bool move_chunks, bool change_batches, std::vector<int64_t>* samples) {
    Cluster c(job, 2, 2, absl::Seconds(30), 0.0,
              [](int, ps::ShardServerConfig* sc) { sc->plan_lead = 1; });
    c.Start();
    samples->assign(2, 0);
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] {
        CHECK(c.workers[w]
                  ->Run(1, [&, w](const WorkerProgress& p) { (*samples)[w] = p.samples; })
                  .ok());
      });
    }
    const auto layout =
        *ps::ChunkLayout::Create(c.workers[0]->params().size(), uint32_t(job.chunk_size));
    ps::ShardServer& lead = *c.servers[0];
    uint64_t version = 2;
    for (const auto& step : batches) {
      const uint32_t from = step.first;  // (a lambda cannot capture a structured binding)
      const std::vector<uint32_t>& b = step.second;
      REQUIRE(
          lead.AwaitStats([&](const ps::ShardServerStats& s) { return s.iteration + 2 <= from; },
                          absl::Minutes(1)));
      std::vector<uint32_t> owners(layout.num_chunks());
      for (uint32_t k = 0; k < owners.size(); ++k) {
        owners[k] = move_chunks ? (k + uint32_t(version)) % 2 : (k < owners.size() / 2 ? 0 : 1);
      }
      auto map = *ps::ChunkMap::FromOwners(layout, 2, owners, version);
      REQUIRE(lead.ProposePlan(map, change_batches ? b : std::vector<uint32_t>(), from).ok());
      // Announced (a newer proposal would replace one still waiting).
      REQUIRE(lead.AwaitStats(
          [&](const ps::ShardServerStats& s) {
            return s.plan_next == version || s.plan_version == version;
          },
          absl::Minutes(1)));
      ++version;
    }
    for (auto& t : threads) t.join();
    for (auto& s : c.servers) {
      REQUIRE(s->WaitFinished(absl::Seconds(30)));
      CHECK(s->GetStats().rounds_complete == 30);
      CHECK(s->GetStats().plan_switches == 2);
    }
    CHECK(c.workers[0]->params() == c.workers[1]->params());
    return c.workers[0]->params();
  };
  std::vector<int64_t> samples, moved_samples, even_samples;
  const std::vector<float> weighted = run(false, true, &samples);
  const std::vector<float> moved = run(true, true, &moved_samples);
  const std::vector<float> even = run(false, false, &even_samples);
  CHECK(weighted == moved);  // bit for bit
  CHECK(weighted != even);
  // Rounds 0-5 at 32 each, 6-15 at the first split, 16-29 at the second.
  CHECK(samples == std::vector<int64_t>{6 * 32 + 10 * 48 + 14 * 20, 6 * 32 + 10 * 16 + 14 * 44});
  CHECK(moved_samples == samples);
  CHECK(even_samples == std::vector<int64_t>{30 * 32, 30 * 32});
}

// Recovery under a plan: the job checkpoints after a plan moved chunks
// and split the batch 48/16; a second cluster resumes every server from
// its checkpoint, under the plan it records, and every worker at its
// position in its sample stream. It ends where the job did, bit for bit.
TEST_CASE("a job resumed from checkpoints taken under a plan ends where it did", "[bsp][wlbs]") {
  JobSpec job = SmallJob(30);
  job.batch_policy = "wlbs";
  auto store = storage::CheckpointStore::Open({MakeTestDir("bsp-plan-resume"), 10});
  REQUIRE(store.ok());
  const std::vector<uint32_t> split = {48, 16};
  std::vector<uint32_t> owners;
  std::vector<float> uninterrupted;
  {
    storage::CheckpointWriter w0(store->get()), w1(store->get());
    storage::CheckpointWriter* writers[] = {&w0, &w1};
    Cluster c(job, 2, 2, absl::Seconds(30), 0, [&](int s, ps::ShardServerConfig* sc) {
      sc->plan_lead = 1;
      sc->checkpoints = writers[s];
      sc->checkpoint_every_rounds = 5;
      sc->job_id = "job-plan-resume";
    });
    c.Start();
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] { CHECK(c.workers[w]->Run(0, nullptr).ok()); });
    }
    const auto layout =
        *ps::ChunkLayout::Create(c.workers[0]->params().size(), uint32_t(job.chunk_size));
    owners.resize(layout.num_chunks());
    for (uint32_t k = 0; k < owners.size(); ++k) owners[k] = (k % 3 == 0) ? 0 : 1;
    ps::ShardServer& lead = *c.servers[0];
    REQUIRE(lead.AwaitStats([](const ps::ShardServerStats& s) { return s.iteration + 2 <= 6; },
                            absl::Minutes(1)));
    REQUIRE(lead.ProposePlan(*ps::ChunkMap::FromOwners(layout, 2, owners, 2), split, 6).ok());
    for (auto& t : threads) t.join();
    uninterrupted = c.workers[0]->params();
    for (auto& s : c.servers) {
      REQUIRE(s->WaitFinished(absl::Seconds(30)));
      CHECK(s->GetStats().plan_switches == 1);
    }
    for (auto* w : writers) w->Drain();
  }
  // The newest round after the switch both servers hold, before the last.
  uint64_t round = 0;
  for (uint64_t r = 25; r >= 10 && round == 0; r -= 5) {
    if ((*store)->Read("job-plan-resume", 0, r).ok() &&
        (*store)->Read("job-plan-resume", 1, r).ok()) {
      round = r;
    }
  }
  INFO("resumed at round " << round);
  REQUIRE(round >= 10);
  std::vector<storage::Checkpoint> ckpt;
  for (uint32_t s = 0; s < 2; ++s) {
    auto c = (*store)->Read("job-plan-resume", s, round);
    REQUIRE(c.ok());
    // The plan of the round: the moved chunks, the split, and what each
    // worker drew: 6 rounds of 32, then the split's.
    CHECK(c->plan.num_servers == 2);
    CHECK(c->plan.chunk_server == owners);
    CHECK(c->plan.worker_batch == split);
    CHECK(c->plan.worker_samples ==
          std::vector<uint64_t>{6 * 32 + (round - 6) * 48, 6 * 32 + (round - 6) * 16});
    ckpt.push_back(std::move(*c));
  }
  Cluster c(
      job, 2, 2, absl::Seconds(30), 0,
      [&](int s, ps::ShardServerConfig* sc) { sc->resume = &ckpt[s]; },
      [&](int w, BspWorkerConfig* wc) {
        wc->start_plan.chunk_server = ckpt[0].plan.chunk_server;
        wc->start_plan.batch = ckpt[0].plan.worker_batch;
        wc->resume_samples = ckpt[0].plan.worker_samples[w];
      });
  for (auto& w : c.workers) w->ResumeAt(int64_t(round));
  c.Start();
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] { CHECK(c.workers[w]->Run(0, nullptr).ok()); });
  }
  for (auto& t : threads) t.join();
  CHECK(c.workers[0]->params() == uninterrupted);  // bit for bit
  for (auto& s : c.servers) {
    REQUIRE(s->WaitFinished(absl::Seconds(30)));
    CHECK(s->GetStats().rounds_complete == 30 - round);
    CHECK(s->GetStats().plan_switches == 0);  // started under it
  }
  // A worker told to resume under a plan of another model is refused.
  BspWorkerConfig bad;
  bad.job = job;
  bad.workers = 2;
  bad.endpoint.key = transport::testing::TestKey();
  bad.start_plan.chunk_server = {0, 1};
  bad.start_plan.batch = split;
  std::unique_ptr<train::Backend> cpu = train::NewCpuBackend();
  CHECK(BspWorker::Create(bad, cpu.get()).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hetps
