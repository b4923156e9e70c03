// ShardServer with a raw endpoint as the worker: an LTP push that loses
// packets is bubble-filled in whole packets (never a split float) and its
// missing elements get no update, while delivered ones get exactly theirs.
#include "lib/ps/shard_server.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "lib/base/test_dir.h"
#include "lib/transport/receiver_mux.h"
#include "lib/transport/test_flows.h"

namespace hetps {
namespace ps {
namespace {

using transport::DropReason;
using transport::Endpoint;
using transport::EndpointConfig;
using transport::FlowResult;
using transport::Header;
using transport::Peer;

constexpr uint64_t kSession = 0xB0BB1E5ull;

// The worker's side: parameters broadcast by the server, by iteration
// (0 to iterations - 1).
class ParamSink : public transport::Receiver {
 public:
  ParamSink(size_t n, uint32_t chunk_floats, uint32_t iterations = 2)
      : chunk_floats_(chunk_floats),
        iterations_(iterations),
        params_(iterations),
        done_(iterations, false) {
    for (auto& b : params_) b.assign(n, std::nanf(""));
  }
  DropReason AcceptFlow(const Peer&, const Header& h) override {
    // Parameters only: not a plan's announcement.
    if (h.iteration >= iterations_ || h.chunk_id == kPlanChunk) return DropReason::kUnexpected;
    absl::MutexLock lock(&mu_);
    tags_.emplace(h.iteration, std::make_pair(h.plan, h.samples));
    ++accepted_[h.iteration];
    return DropReason::kNone;
  }
  void OnData(const Peer&, const Header& h, const uint8_t* payload) override {
    absl::MutexLock lock(&mu_);
    std::memcpy(params_[h.iteration].data() + size_t(h.chunk_id) * chunk_floats_ + h.chunk_offset,
                payload, h.payload_bytes);
  }
  void OnFlowDone(const Peer&, const FlowResult& r) override {
    absl::MutexLock lock(&mu_);
    done_[r.iteration] = true;
    ++flows_;
  }
  // Flows ended here. A flow ends before its last ACK goes out, so once
  // its sender is done with it, it is counted.
  int flows() {
    absl::MutexLock lock(&mu_);
    return flows_;
  }
  // Until `n` flows ended here.
  bool WaitFlows(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> bool { return flows_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  }
  bool Wait(uint32_t iteration, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> bool { return done_[iteration]; };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  }
  std::vector<float> params(uint32_t iteration) {
    absl::MutexLock lock(&mu_);
    return params_[iteration];
  }
  // Flows of the iteration taken here (their first packet came).
  int accepted(uint32_t iteration) {
    absl::MutexLock lock(&mu_);
    return accepted_[iteration];
  }
  // The plan and layout plan (Header::samples) of the iteration's first flow.
  std::pair<uint32_t, uint32_t> tag(uint32_t iteration) {
    absl::MutexLock lock(&mu_);
    auto it = tags_.find(iteration);
    return it != tags_.end() ? it->second : std::make_pair(0u, 0u);
  }

 private:
  const uint32_t chunk_floats_;
  const uint32_t iterations_;
  absl::Mutex mu_;
  std::vector<std::vector<float>> params_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);
  int flows_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> tags_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, int> accepted_ ABSL_GUARDED_BY(mu_);
};

const Peer kServerAddr{htonl(0x0A000001), htons(7000)};
const Peer kWorkerAddr{htonl(0x0A000002), htons(7000)};

// A ShardServer on a simulated network in real time (its round thread has
// its own deadlines), detached from its endpoint before it goes.
struct SimServer {
  SimServer(transport::SimNetwork& net, const ShardServerConfig& sc, const std::vector<float>& init,
            const Peer& addr = kServerAddr) {
    auto ep = transport::testing::SimEndpoint(net, addr, sc.endpoint, &mux, RealClock::Get());
    REQUIRE(ep.ok());
    endpoint = std::move(*ep);
    auto s = ShardServer::Create(sc, init, endpoint.get());
    REQUIRE(s.ok());
    server = std::move(*s);
    mux.Set(server.get());
  }
  ~SimServer() { mux.Set(nullptr); }
  ShardServer* operator->() { return server.get(); }

  transport::ReceiverMux mux;
  std::unique_ptr<transport::Endpoint> endpoint;
  std::unique_ptr<ShardServer> server;
};

TEST_CASE("LTP push with 30% loss: whole-packet bubbles, no update where nothing arrived",
          "[shard_server][ltp]") {
  const uint64_t n = 20000;
  const uint32_t chunk = 4096;
  ShardServerConfig sc;
  sc.num_params = n;
  sc.chunk_floats = chunk;
  sc.total_iterations = 1;
  sc.optimizer.learning_rate = 1.0f;
  sc.optimizer.momentum = 0.0f;
  sc.round_deadline = absl::Seconds(20);
  sc.endpoint.key = transport::testing::TestKey();
  // The first pass decides: LT 1 ms after the first packet, deadline 20 ms
  // later, long before any retransmission can come back (50 ms one way).
  // The flow closes at LT if the critical packets and the last one are in, else at
  // the deadline, with the 70% the first pass carried either way.
  sc.endpoint.early_close.lt_fixed_us = 1000;
  sc.endpoint.early_close.min_fraction = 0.5;
  sc.endpoint.early_close.slack_us = 20'000;
  std::vector<float> init(n);
  for (uint64_t i = 0; i < n; ++i) init[i] = 0.001f * float(i % 1000);
  // Both on a seeded simulated network in real time (the server's round
  // thread has its own deadlines): the worker's link loses 30% and takes
  // 50 ms one way.
  transport::SimNetwork net(RealClock::Get(), 5);
  SimServer server(net, sc, init);
  const Peer worker_addr = kWorkerAddr;

  ParamSink sink(n, chunk);
  EndpointConfig wc;
  wc.key = transport::testing::TestKey();
  wc.packet_bytes = 1402;  // 330 floats: a datagram size that is no multiple of 4
  wc.congestion.initial_rate_bps = 10'000'000'000;  // the whole push in the first window
  transport::LinkImpairment imp;
  imp.loss = 0.3;
  imp.delay_us = 50'000;
  net.SetEgress(worker_addr, imp);
  auto worker = transport::testing::SimEndpoint(net, worker_addr, wc, &sink, RealClock::Get());
  REQUIRE(worker.ok());
  const uint32_t pf = wc.payload_floats();
  REQUIRE(pf == 330);

  server->SetWorkers({(*worker)->local()});
  server->Start();
  REQUIRE(sink.Wait(0, absl::Seconds(20)));
  CHECK(sink.params(0) == init);  // pull: exact despite 30% loss of its ACKs

  std::vector<float> grad(n);
  for (uint64_t i = 0; i < n; ++i) grad[i] = 1.0f + float(i % 7);
  std::vector<transport::PacketSpan> packets;
  for (uint32_t c = 0; c * uint64_t(chunk) < n; ++c) {
    const uint64_t off = uint64_t(c) * chunk;
    transport::AppendPackets(c, grad.data() + off, uint32_t(std::min<uint64_t>(chunk, n - off)), pf,
                             true, &packets);
  }
  transport::SendOptions lossy;
  lossy.loss_tolerant = true;
  lossy.plan = 1;  // the job's even split
  auto h = (*worker)->Send(server->local(), 0, std::move(packets), lossy);
  REQUIRE(h->Wait(absl::Seconds(20)));
  REQUIRE(sink.Wait(1, absl::Seconds(20)));
  REQUIRE(server->WaitFinished(absl::Seconds(5)));
  const std::vector<float> final = sink.params(1);

  // Per packet: every element updated by exactly its gradient, or none.
  uint64_t untouched = 0, packets_missing = 0;
  for (uint64_t c0 = 0; c0 < n; c0 += chunk) {
    const uint64_t cend = std::min<uint64_t>(n, c0 + chunk);
    for (uint64_t p0 = c0; p0 < cend; p0 += pf) {
      const uint64_t pend = std::min<uint64_t>(cend, p0 + pf);
      const bool missing = final[p0] == init[p0];
      packets_missing += missing;
      for (uint64_t i = p0; i < pend; ++i) {
        if (missing) {
          REQUIRE(final[i] == init[i]);
          ++untouched;
        } else {
          REQUIRE(final[i] == init[i] - grad[i]);
        }
      }
    }
  }
  const ShardServerStats st = server->GetStats();
  INFO("packets missing " << packets_missing);
  CHECK(packets_missing > 0);
  CHECK(st.partial_pushes == 1);
  CHECK(st.bubble_bytes == untouched * sizeof(float));
  CHECK(st.partial_elements == untouched);
  REQUIRE(st.last_delivered.size() == 1);
  CHECK(st.last_delivered[0].second == Approx(1.0 - double(untouched) / n));
  CHECK(st.last_delivered[0].second >= 0.5);
  CHECK((h->close_reason() == transport::CloseReason::kEarlyFraction ||
         h->close_reason() == transport::CloseReason::kDeadline));
}

// A checkpoint store in a fresh directory, and a writer over it.
struct Checkpoints {
  Checkpoints() {
    storage::CheckpointStoreConfig cfg;
    cfg.dir = MakeTestDir("shard-ckpt");
    auto s = storage::CheckpointStore::Open(cfg);
    REQUIRE(s.ok());
    store = std::move(*s);
    writer = std::make_unique<storage::CheckpointWriter>(store.get());
  }
  std::unique_ptr<storage::CheckpointStore> store;
  std::unique_ptr<storage::CheckpointWriter> writer;  // goes before the store
};

// SGD with momentum over `n` floats in 4096-float chunks, checkpointing
// every round through `writer` under `job_id`.
ShardServerConfig CheckpointingConfig(uint64_t n, storage::CheckpointWriter* writer,
                                      const std::string& job_id) {
  ShardServerConfig sc;
  sc.num_params = n;
  sc.chunk_floats = 4096;
  sc.optimizer.learning_rate = 0.5f;
  sc.optimizer.momentum = 0.9f;
  sc.endpoint.key = transport::testing::TestKey();
  sc.checkpoint_every_rounds = 1;
  sc.checkpoints = writer;
  sc.job_id = job_id;
  return sc;
}

// Pushes `grad`'s `chunks` (of `chunk` floats) for `iteration` and waits
// for the flow to end. `samples`: what the gradient averages over (0: not said).
void PushChunks(transport::Endpoint& worker, const Peer& server, uint32_t iteration,
                const std::vector<float>& grad, const std::vector<uint32_t>& chunks, uint32_t chunk,
                uint32_t payload_floats, uint32_t samples = 0, uint32_t plan = 1) {
  std::vector<transport::PacketSpan> packets;
  for (uint32_t c : chunks) {
    const uint64_t off = uint64_t(c) * chunk;
    transport::AppendPackets(c, grad.data() + off,
                             uint32_t(std::min<uint64_t>(chunk, grad.size() - off)), payload_floats,
                             false, &packets);
  }
  transport::SendOptions options;
  options.plan = plan;  // 1: the job's even split
  options.samples = samples;
  auto h = worker.Send(server, iteration, std::move(packets), options);
  REQUIRE(h->Wait(absl::Seconds(20)));
}

// Injects packets [lo, hi) of `packets` into the network as flow
// `flow_id` from `from` to `to`, forged as a worker's push of `iteration`
// under `plan`: a test holds some back to order what the server sees.
void InjectPush(transport::SimNetwork& net, transport::testing::Forger& forge, const Peer& from,
                const Peer& to, const std::vector<transport::PacketSpan>& packets, uint32_t flow_id,
                uint32_t iteration, uint32_t plan, size_t lo, size_t hi) {
  for (size_t i = lo; i < hi; ++i) {
    Header h;
    h.flow_id = flow_id;
    h.seq = uint32_t(i);
    h.total_packets = uint32_t(packets.size());
    h.chunk_id = packets[i].chunk_id;
    h.chunk_offset = packets[i].chunk_offset;
    h.iteration = iteration;
    h.plan = plan;
    std::vector<uint8_t> body(packets[i].floats * sizeof(float));
    std::memcpy(body.data(), packets[i].data, body.size());
    const std::vector<uint8_t> d = forge(h, body, from);
    net.Inject(from, to, d.data(), d.size());
  }
}

TEST_CASE("a checkpoint after the step holds the broadcast parameters and the momentum",
          "[shard_server][checkpoint]") {
  const uint64_t n = 10000;
  const uint32_t chunk = 4096;
  Checkpoints ck;
  storage::CheckpointWriter& writer = *ck.writer;
  auto& store = ck.store;
  ShardServerConfig sc = CheckpointingConfig(n, &writer, "job-ckpt");
  sc.num_servers = 2;
  sc.server_index = 1;  // owns some of the 3 chunks
  sc.total_iterations = 1;
  sc.spec_text = "model: mlp\n";
  std::vector<float> init(n);
  for (uint64_t i = 0; i < n; ++i) init[i] = 0.01f * float(i % 100);
  transport::SimNetwork net(RealClock::Get(), 9);
  SimServer server(net, sc, init);
  const Peer worker_addr = kWorkerAddr;
  ParamSink sink(n, chunk);
  EndpointConfig wc;
  wc.key = transport::testing::TestKey();
  auto worker = transport::testing::SimEndpoint(net, worker_addr, wc, &sink, RealClock::Get());
  REQUIRE(worker.ok());
  server->SetWorkers({(*worker)->local()});
  server->Start();
  REQUIRE(sink.Wait(0, absl::Seconds(20)));

  std::vector<float> grad(n);
  for (uint64_t i = 0; i < n; ++i) grad[i] = 0.25f * float(1 + i % 3);
  const std::vector<uint32_t> owned = server->owned_chunks();
  REQUIRE(!owned.empty());
  PushChunks(**worker, server->local(), 0, grad, owned, chunk, wc.payload_floats());
  REQUIRE(sink.Wait(1, absl::Seconds(20)));
  REQUIRE(server->WaitFinished(absl::Seconds(5)));
  writer.Drain();
  CHECK(writer.stats().written == 1);
  CHECK(server->GetStats().checkpoints_offered == 1);

  auto c = store->ReadNewest("job-ckpt", 1);
  REQUIRE(c.ok());
  CHECK(c->round == 1);
  CHECK(c->optimizer_steps == 1);
  CHECK(c->spec == "model: mlp\n");
  REQUIRE(c->chunks.size() == owned.size());
  const std::vector<float> final = sink.params(1);
  for (const storage::ChunkState& ch : c->chunks) {
    INFO("chunk " << ch.chunk_id);
    CHECK(ch.offset == uint64_t(ch.chunk_id) * chunk);
    const size_t len = std::min<uint64_t>(chunk, n - ch.offset);
    REQUIRE(ch.params.size() == len);
    CHECK(std::equal(ch.params.begin(), ch.params.end(), final.begin() + ch.offset));
    REQUIRE(ch.slots.size() == 1);  // SGD: the momentum buffer, = the gradient after one step
    CHECK(std::equal(ch.slots[0].begin(), ch.slots[0].end(), grad.begin() + ch.offset));
  }
}

TEST_CASE("a server resumed from a checkpoint goes on exactly as the first would have",
          "[shard_server][checkpoint]") {
  const uint64_t n = 10000;
  const uint32_t chunk = 4096;
  Checkpoints ck;
  storage::CheckpointWriter& writer = *ck.writer;
  auto& store = ck.store;
  ShardServerConfig sc = CheckpointingConfig(n, &writer, "job-resume");
  sc.total_iterations = 2;
  std::vector<float> init(n), g0(n), g1(n);
  for (uint64_t i = 0; i < n; ++i) {
    init[i] = 0.01f * float(i % 100);
    g0[i] = 0.25f * float(1 + i % 3);
    g1[i] = -0.125f * float(1 + i % 5);
  }
  EndpointConfig wc;
  wc.key = transport::testing::TestKey();
  transport::SimNetwork net(RealClock::Get(), 11);

  // The first server: rounds 0 and 1, a checkpoint after each.
  ParamSink first_sink(n, chunk, 3);
  std::vector<float> after1, after2;
  {
    SimServer first(net, sc, init);
    auto worker =
        transport::testing::SimEndpoint(net, kWorkerAddr, wc, &first_sink, RealClock::Get());
    REQUIRE(worker.ok());
    first->SetWorkers({(*worker)->local()});
    first->Start();
    REQUIRE(first_sink.Wait(0, absl::Seconds(20)));
    PushChunks(**worker, first->local(), 0, g0, first->owned_chunks(), chunk, wc.payload_floats());
    REQUIRE(first_sink.Wait(1, absl::Seconds(20)));
    writer.Drain();  // round 1's checkpoint is written before round 2's offer
    PushChunks(**worker, first->local(), 1, g1, first->owned_chunks(), chunk, wc.payload_floats());
    REQUIRE(first_sink.Wait(2, absl::Seconds(20)));
    REQUIRE(first->WaitFinished(absl::Seconds(5)));
    after1 = first_sink.params(1);
    after2 = first_sink.params(2);
  }
  writer.Drain();
  auto c1 = store->Read("job-resume", 0, 1);
  REQUIRE(c1.ok());

  // A second server from round 1's checkpoint (no checkpoints of its own).
  ShardServerConfig resumed = sc;
  resumed.resume = &*c1;
  resumed.checkpoints = nullptr;
  const Peer server2{htonl(0x0A000003), htons(7000)}, worker2{htonl(0x0A000004), htons(7000)};
  ParamSink sink(n, chunk, 3);
  SimServer second(net, resumed, init, server2);
  auto worker = transport::testing::SimEndpoint(net, worker2, wc, &sink, RealClock::Get());
  REQUIRE(worker.ok());
  second->SetWorkers({(*worker)->local()});
  CHECK(second->GetStats().iteration == 1);
  second->Start();
  REQUIRE(sink.Wait(1, absl::Seconds(20)));  // round 1 first: nothing of round 0
  CHECK(sink.params(1) == after1);
  PushChunks(**worker, second->local(), 1, g1, second->owned_chunks(), chunk, wc.payload_floats());
  REQUIRE(sink.Wait(2, absl::Seconds(20)));
  REQUIRE(second->WaitFinished(absl::Seconds(5)));
  CHECK(sink.params(2) == after2);  // momentum and step count came back too

  // A checkpoint that is not this server's shape is refused.
  storage::Checkpoint wrong = *c1;
  wrong.chunks.pop_back();
  resumed.resume = &wrong;
  auto other = transport::testing::SimEndpoint(net, Peer{htonl(0x0A000005), htons(7000)},
                                               resumed.endpoint, nullptr, RealClock::Get());
  REQUIRE(other.ok());
  auto refused = ShardServer::Create(resumed, init, other->get());
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
}

// Plans at the server: a push must carry the plan the server follows;
// one of an older or newer plan is refused and counted, and the round
// still closes with the right push. Proposals enter at server 0 only, in
// the job's shape, and a late one (an older version) is dropped.
TEST_CASE("a push of another plan is refused and counted; proposals are checked",
          "[shard_server][plan]") {
  const uint64_t n = 10000;
  const uint32_t chunk = 4096;
  ShardServerConfig sc;
  sc.num_params = n;
  sc.chunk_floats = chunk;
  sc.optimizer.learning_rate = 0.5f;
  sc.endpoint.key = transport::testing::TestKey();
  sc.total_iterations = 1;
  std::vector<float> init(n, 1.0f);
  transport::SimNetwork net(RealClock::Get(), 11);
  SimServer server(net, sc, init);
  ParamSink sink(n, chunk);
  EndpointConfig wc;
  wc.key = transport::testing::TestKey();
  auto worker = transport::testing::SimEndpoint(net, kWorkerAddr, wc, &sink, RealClock::Get());
  REQUIRE(worker.ok());
  server->SetWorkers({(*worker)->local()});
  server->Start();
  REQUIRE(sink.Wait(0, absl::Seconds(20)));

  std::vector<float> grad(n, 0.5f);
  for (uint32_t plan : {0u, 2u}) {
    std::vector<transport::PacketSpan> packets;
    for (uint32_t c = 0; c < 3; ++c) {
      transport::AppendPackets(c, grad.data() + c * chunk,
                               uint32_t(std::min<uint64_t>(chunk, n - c * chunk)),
                               wc.payload_floats(), false, &packets);
    }
    transport::SendOptions options;
    options.plan = plan;
    auto h = (*worker)->Send(server->local(), 0, std::move(packets), options);
    // Refused flows are never acknowledged: wait for the count, then give up on it.
    CHECK(server->AwaitStats(
        [&](const ShardServerStats& st) {
          return (plan == 0 ? st.stale_plan : st.plan_ahead) >= 1;
        },
        absl::Seconds(20)));
    (*worker)->Cancel(h);
    h->Wait(absl::Seconds(5));
  }
  CHECK(server->GetStats().iteration == 0);  // neither counted for the round
  PushChunks(**worker, server->local(), 0, grad, {0, 1, 2}, chunk, wc.payload_floats());
  REQUIRE(server->WaitFinished(absl::Seconds(20)));
  CHECK(server->GetStats().rounds_complete == 1);
  CHECK(sink.Wait(1, absl::Seconds(20)));
  CHECK(sink.params(1)[0] == 1.0f - 0.5f * 0.5f);

  const ChunkLayout layout = *ChunkLayout::Create(n, chunk);
  CHECK(server->ProposePlan(*ChunkMap::FromOwners(layout, 1, {0, 0, 0}, 2), {}, 5).ok());
  CHECK(server->ProposePlan(*ChunkMap::FromOwners(layout, 1, {0, 0, 0}, 1), {}, 5).ok());
  CHECK(server->GetStats().plans_superseded == 1);  // version 1 came after 2
  CHECK(!server->ProposePlan(*ChunkMap::FromOwners(layout, 2, {0, 1, 0}, 3), {}, 5).ok());
  ShardServerConfig second = sc;
  second.num_servers = 2;
  second.server_index = 1;
  SimServer other(net, second, init, Peer{htonl(0x0A000009), htons(7000)});
  CHECK(other->ProposePlan(*ChunkMap::FromOwners(layout, 2, {0, 1, 0}, 2), {}, 5).code() ==
        absl::StatusCode::kFailedPrecondition);
}

const Peer kWorker2Addr{htonl(0x0A000003), htons(7000)};

// Workers a and b: threaded endpoints on `net`, each with a ParamSink,
// made the server's workers; the server started.
struct TwoWorkers {
  TwoWorkers(transport::SimNetwork& net, SimServer& server, uint64_t n, uint32_t chunk)
      : sink_a(n, chunk), sink_b(n, chunk) {
    wc.key = transport::testing::TestKey();
    auto ea = transport::testing::SimEndpoint(net, kWorkerAddr, wc, &sink_a, RealClock::Get());
    auto eb = transport::testing::SimEndpoint(net, kWorker2Addr, wc, &sink_b, RealClock::Get());
    REQUIRE(ea.ok());
    REQUIRE(eb.ok());
    a = std::move(*ea);
    b = std::move(*eb);
    server->SetWorkers({a->local(), b->local()});
    server->Start();
  }
  EndpointConfig wc;
  ParamSink sink_a, sink_b;  // outlive the endpoints that write them
  std::unique_ptr<Endpoint> a, b;
};

// WLBS: pushes averaged over different numbers of samples are weighted by
// them, so the step is the mean over every sample of the global batch; a
// push claiming more samples than a worker may have is refused.
TEST_CASE("pushes of unequal batches are averaged by their samples", "[shard_server][wlbs]") {
  const uint64_t n = 5000;
  const uint32_t chunk = 4096;
  ShardServerConfig sc;
  sc.num_params = n;
  sc.chunk_floats = chunk;
  sc.optimizer.learning_rate = 1.0f;
  sc.optimizer.momentum = 0.0f;
  sc.endpoint.key = transport::testing::TestKey();
  sc.total_iterations = 1;
  sc.num_workers = 2;
  sc.batch_size = 2;  // a global batch of 4
  sc.batch_max = 3;
  std::vector<float> init(n, 10.0f);
  transport::SimNetwork net(RealClock::Get(), 13);
  SimServer server(net, sc, init);
  TwoWorkers w(net, server, n, chunk);
  const EndpointConfig& wc = w.wc;
  REQUIRE(w.sink_a.Wait(0, absl::Seconds(20)));

  // First a push claiming more samples than batch_max: refused before any
  // state is taken (were it taken, worker a's real push below would be
  // refused and the mean would count 4 samples of it).
  std::vector<transport::PacketSpan> packets;
  const std::vector<float> ones(n, 1.0f), fives(n, 5.0f);
  transport::AppendPackets(0, ones.data(), chunk, wc.payload_floats(), false, &packets);
  transport::AppendPackets(1, ones.data() + chunk, uint32_t(n - chunk), wc.payload_floats(), false,
                           &packets);
  transport::SendOptions greedy;
  greedy.plan = 1;
  greedy.samples = 4;
  auto h = w.a->Send(server->local(), 0, std::move(packets), greedy);
  PushChunks(*w.a, server->local(), 0, ones, {0, 1}, chunk, wc.payload_floats(), 3);
  PushChunks(*w.b, server->local(), 0, fives, {0, 1}, chunk, wc.payload_floats(), 1);
  REQUIRE(w.sink_a.Wait(1, absl::Seconds(20)));
  REQUIRE(server->WaitFinished(absl::Seconds(20)));
  CHECK(server->GetStats().rounds_complete == 1);
  // 10 - (3 x 1 + 1 x 5) / 4; an unweighted mean would give 10 - 3.
  for (float x : w.sink_a.params(1)) REQUIRE(x == 8.0f);
  CHECK(server.endpoint->GetStats().drops[size_t(DropReason::kBadFlowSize)] >= 1);
  w.a->Cancel(h);
  h->Wait(absl::Seconds(5));
}

// Segments: a segment every live worker's push delivered is stepped and
// sent as the next round's while the round still waits for the rest.
// Worker b's push is forged packet by packet: its first chunk arrives, its
// second is held back until the streamed segment was checked, so nothing
// here depends on timing.
TEST_CASE("a segment every worker pushed is applied and sent before its round closes",
          "[shard_server][segments]") {
  const uint32_t chunk = 4096;
  const uint64_t n = 2 * chunk;
  ShardServerConfig sc;
  sc.num_params = n;
  sc.chunk_floats = chunk;
  sc.segment_chunks = 1;  // two segments
  sc.optimizer.learning_rate = 1.0f;
  sc.optimizer.momentum = 0.0f;
  sc.endpoint.key = transport::testing::TestKey();
  sc.total_iterations = 1;
  sc.num_workers = 2;
  sc.round_deadline = absl::Seconds(120);  // never: the test ends it
  std::vector<float> init(n, 10.0f);
  transport::SimNetwork net(RealClock::Get(), 17);
  SimServer server(net, sc, init);
  TwoWorkers w(net, server, n, chunk);
  const uint32_t pf = w.wc.payload_floats();
  ParamSink& sink_a = w.sink_a;
  ParamSink& sink_b = w.sink_b;
  const Peer b_addr = kWorker2Addr;
  REQUIRE(sink_a.Wait(0, absl::Seconds(20)));
  REQUIRE(sink_b.Wait(0, absl::Seconds(20)));

  const std::vector<float> ones(n, 1.0f), threes(n, 3.0f);
  PushChunks(*w.a, server->local(), 0, ones, {0, 1}, chunk, pf);
  // b's push of both chunks, as its endpoint would cut it; only chunk 0's
  // packets go now.
  std::vector<transport::PacketSpan> packets;
  transport::AppendPackets(0, threes.data(), chunk, pf, false, &packets);
  const size_t first = packets.size();
  transport::AppendPackets(1, threes.data() + chunk, chunk, pf, false, &packets);
  transport::testing::Forger forge(w.wc.key, 0xB0B);
  auto send = [&](size_t from, size_t to) {
    InjectPush(net, forge, b_addr, server->local(), packets, 900, 0, 1, from, to);
  };
  send(0, first);
  // Segment 0 of round 1 reaches both workers while round 0 is open.
  REQUIRE(sink_a.Wait(1, absl::Seconds(20)));
  REQUIRE(sink_b.Wait(1, absl::Seconds(20)));
  ShardServerStats st = server->GetStats();
  CHECK(st.iteration == 0);
  CHECK(st.round_open);
  CHECK(st.segments_streamed == 1);
  const std::vector<float> early = sink_a.params(1);
  for (uint64_t i = 0; i < chunk; ++i) REQUIRE(early[i] == 8.0f);  // 10 - (1 + 3) / 2
  for (uint64_t i = chunk; i < n; ++i) REQUIRE(std::isnan(early[i]));
  const std::vector<float> early_b = sink_b.params(1);
  CHECK(std::equal(early.begin(), early.begin() + chunk, early_b.begin()));

  send(first, packets.size());
  REQUIRE(server->WaitFinished(absl::Seconds(20)));
  st = server->GetStats();
  CHECK(st.rounds_complete == 1);
  // Segment 1 too when its last packet was counted before b's flow ended.
  CHECK(st.segments_streamed >= 1);
  // The rest came at the round's close or streamed; nothing twice.
  for (float x : sink_a.params(1)) REQUIRE(x == 8.0f);
  // Two segment flows of round 0, then two of round 1.
  CHECK(sink_a.flows() == 4);
}

constexpr uint32_t kChunk = 4096;

// Two chunks of kChunk floats on one server, SGD at `learning_rate`;
// the test ends every round (the deadline never comes).
ShardServerConfig TwoChunks(uint32_t iterations, float learning_rate) {
  ShardServerConfig sc;
  sc.num_params = 2 * kChunk;
  sc.chunk_floats = kChunk;
  sc.optimizer.learning_rate = learning_rate;
  sc.endpoint.key = transport::testing::TestKey();
  sc.total_iterations = iterations;
  sc.round_deadline = absl::Seconds(120);
  return sc;
}

// A switch at round t: the server broadcasts the round once the
// parameters of the chunks it takes over came, and their optimizer state
// may come after; the step waits for it. Server 1 is a raw endpoint that
// hands its chunk over in two flows, the state only once the worker has
// pushed round 1.
TEST_CASE("a switch broadcasts with the parameters taken over, the step waits for their state",
          "[shard_server][plan]") {
  const uint32_t chunk = kChunk;
  const uint64_t n = 2 * chunk;
  ShardServerConfig sc = TwoChunks(2, 1.0f);
  sc.num_servers = 2;
  sc.optimizer.momentum = 0.5f;
  std::vector<float> init(n, 10.0f);
  transport::SimNetwork net(RealClock::Get(), 23);
  SimServer server(net, sc, init);
  ParamSink sink(n, chunk, 3), other_sink(n, chunk, 3);
  EndpointConfig wc;
  wc.key = transport::testing::TestKey();
  const uint32_t pf = wc.payload_floats();
  auto worker = transport::testing::SimEndpoint(net, kWorkerAddr, wc, &sink, RealClock::Get());
  auto other = transport::testing::SimEndpoint(net, Peer{htonl(0x0A000009), htons(7000)}, wc,
                                               &other_sink, RealClock::Get());
  REQUIRE(worker.ok());
  REQUIRE(other.ok());
  const ChunkLayout layout = *ChunkLayout::Create(n, chunk);
  REQUIRE(ChunkMap::EvenSplit(layout, 2, 1)->owner(0) == 0);
  server->SetServers({server->local(), (*other)->local()});
  server->SetWorkers({(*worker)->local()});
  // Version 2: both chunks on server 0, from round 1.
  REQUIRE(server->ProposePlan(*ChunkMap::FromOwners(layout, 2, {0, 0}, 2), {}, 1).ok());
  server->Start();
  REQUIRE(sink.Wait(0, absl::Seconds(20)));
  CHECK(sink.tag(0).first == 1);
  const std::vector<float> ones(n, 1.0f);
  PushChunks(**worker, server->local(), 0, ones, {0}, chunk, pf);
  // Server 1 hands over chunk 1's parameters (7); round 1 goes out under
  // plan 2 with both chunks.
  auto hand_over = [&](uint32_t offset, float value) {
    std::vector<float> part(chunk, value);
    std::vector<transport::PacketSpan> packets;
    transport::AppendPackets(1, part.data(), chunk, pf, true, &packets);
    for (transport::PacketSpan& p : packets) p.chunk_offset += offset;
    transport::SendOptions options;
    options.plan = 2;
    auto h = (*other)->Send(server->local(), 1, std::move(packets), options);
    REQUIRE(h->Wait(absl::Seconds(20)));
  };
  hand_over(0, 7.0f);
  REQUIRE(sink.Wait(1, absl::Seconds(20)));
  CHECK(sink.tag(1).first == 2);
  const std::vector<float> one = sink.params(1);
  CHECK(one[0] == 9.0f);  // 10 - 1
  CHECK(one[chunk] == 7.0f);
  ShardServerStats st = server->GetStats();
  CHECK(st.plan_version == 2);
  CHECK(st.chunks_received == 0);  // its state has not come
  // The worker pushes round 1 by plan 2 (both chunks to server 0): taken,
  // but the step waits for chunk 1's momentum (2).
  PushChunks(**worker, server->local(), 1, ones, {0, 1}, chunk, pf, 0, 2);
  CHECK(server->GetStats().iteration == 1);
  hand_over(chunk, 2.0f);
  REQUIRE(sink.Wait(2, absl::Seconds(20)));
  const std::vector<float> two = sink.params(2);
  // Chunk 0: momentum 1 after round 0, 0.5 * 1 + 1 = 1.5 now: 9 - 1.5.
  CHECK(two[0] == 7.5f);
  // Chunk 1: its momentum came with it: 0.5 * 2 + 1 = 2, so 7 - 2.
  CHECK(two[chunk] == 5.0f);
  REQUIRE(server->WaitFinished(absl::Seconds(20)));
  st = server->GetStats();
  CHECK(st.rounds_complete == 2);
  CHECK(st.chunks_received == 1);
  CHECK(st.plan_switches == 1);
  CHECK(st.plan_from == 1);
}

// A switch's first round goes to the workers ahead of the switch,
// segment by segment, as soon as each segment's chunks are here: the kept
// chunk once its step of the round before was applied, the one taken over
// once its parameters came, both while that round still waits for the
// worker's push of the chunk given up. The switch then sends none again.
// Plan 2 (from round 1) keeps chunk 0 on server 0, moves chunk 1 to
// server 1 (a raw endpoint) and chunk 2 from it; one chunk per segment.
TEST_CASE("a switch's first round streams each segment once its chunks are here",
          "[shard_server][plan][segments]") {
  const uint32_t chunk = kChunk;
  const uint64_t n = 4 * chunk;
  ShardServerConfig sc = TwoChunks(2, 1.0f);
  sc.num_params = n;
  sc.num_servers = 2;
  sc.segment_chunks = 1;
  sc.optimizer.momentum = 0.0f;
  std::vector<float> init(n, 10.0f);
  transport::SimNetwork net(RealClock::Get(), 31);
  SimServer server(net, sc, init);
  ParamSink sink(n, chunk, 3), other_sink(n, chunk, 3);
  EndpointConfig wc;
  wc.key = transport::testing::TestKey();
  const uint32_t pf = wc.payload_floats();
  auto worker = transport::testing::SimEndpoint(net, kWorkerAddr, wc, &sink, RealClock::Get());
  const Peer other_addr{htonl(0x0A000009), htons(7000)};
  auto other = transport::testing::SimEndpoint(net, other_addr, wc, &other_sink, RealClock::Get());
  REQUIRE(worker.ok());
  REQUIRE(other.ok());
  const ChunkLayout layout = *ChunkLayout::Create(n, chunk);
  REQUIRE(ChunkMap::EvenSplit(layout, 2, 1)->ChunksOf(0) == std::vector<uint32_t>{0, 1});
  server->SetServers({server->local(), (*other)->local()});
  server->SetWorkers({(*worker)->local()});
  REQUIRE(server->ProposePlan(*ChunkMap::FromOwners(layout, 2, {0, 1, 0, 1}, 2), {}, 1).ok());
  server->Start();
  REQUIRE(sink.Wait(0, absl::Seconds(20)));
  REQUIRE(sink.WaitFlows(2, absl::Seconds(20)));  // round 0: chunks 0 and 1

  // The worker's push of round 0 (plan 1: chunks 0 and 1), packet by
  // packet: chunk 1's packets wait until the test has checked.
  const std::vector<float> ones(n, 1.0f);
  std::vector<transport::PacketSpan> packets;
  transport::AppendPackets(0, ones.data(), chunk, pf, false, &packets);
  const size_t first = packets.size();
  transport::AppendPackets(1, ones.data() + chunk, chunk, pf, false, &packets);
  transport::testing::Forger forge(wc.key, 0xA11);
  auto send = [&](size_t from, size_t to) {
    InjectPush(net, forge, kWorkerAddr, server->local(), packets, 901, 0, 1, from, to);
  };
  send(0, first);
  // Chunk 0, kept, is stepped and goes as round 1's first segment under plan 2.
  REQUIRE(sink.Wait(1, absl::Seconds(20)));
  CHECK(sink.tag(1).first == 2);
  std::vector<float> one = sink.params(1);
  for (uint64_t i = 0; i < chunk; ++i) REQUIRE(one[i] == 9.0f);  // 10 - 1
  CHECK(std::isnan(one[2 * chunk]));
  ShardServerStats st = server->GetStats();
  CHECK(st.iteration == 0);
  CHECK(st.round_open);
  CHECK(st.segments_ahead == 1);

  // Server 1 hands chunk 2's parameters (7) over: its segment goes too.
  auto hand_over = [&](uint32_t offset, float value) {
    std::vector<float> part(chunk, value);
    std::vector<transport::PacketSpan> moved;
    transport::AppendPackets(2, part.data(), chunk, pf, true, &moved);
    for (transport::PacketSpan& p : moved) p.chunk_offset += offset;
    transport::SendOptions options;
    options.plan = 2;
    auto h = (*other)->Send(server->local(), 1, std::move(moved), options);
    REQUIRE(h->Wait(absl::Seconds(20)));
  };
  hand_over(0, 7.0f);
  REQUIRE(sink.WaitFlows(4, absl::Seconds(20)));
  one = sink.params(1);
  for (uint64_t i = 2 * chunk; i < 3 * chunk; ++i) REQUIRE(one[i] == 7.0f);
  st = server->GetStats();
  CHECK(st.iteration == 0);
  CHECK(st.round_open);
  CHECK(st.segments_ahead == 2);

  // The rest of the push: round 0 closes, chunk 1 leaves for server 1.
  send(first, packets.size());
  PushChunks(**worker, server->local(), 1, ones, {0, 2}, chunk, pf, 0, 2);
  hand_over(chunk, 0.0f);  // chunk 2's momentum: the step waits for it
  REQUIRE(server->WaitFinished(absl::Seconds(20)));
  const std::vector<float> two = sink.params(2);
  CHECK(two[0] == 8.0f);
  CHECK(two[2 * chunk] == 6.0f);
  st = server->GetStats();
  CHECK(st.rounds_complete == 2);
  CHECK(st.plan_switches == 1);
  CHECK(st.segments_ahead == 2);
  CHECK(other_sink.params(1)[chunk] == 9.0f);  // chunk 1, stepped, moved
  // Round 1 came to the worker once, ahead: the switch sent none of it
  // again. (A flow sent at the switch would have come before the final
  // round's, which the server saw land: the simulated link keeps order.)
  CHECK(sink.accepted(1) == 2);
}

// Server 0 announces a proposal at once, from the next round: one
// proposed before any push of the round came, and one proposed once a
// push came (waiting for the next round's open would start it a round
// later).
TEST_CASE("a plan proposed during a round starts at the next round", "[shard_server][plan]") {
  const uint32_t chunk = kChunk;
  const uint64_t n = 2 * chunk;
  const ShardServerConfig sc = TwoChunks(4, 0.5f);
  std::vector<float> init(n, 1.0f);
  transport::SimNetwork net(RealClock::Get(), 29);
  SimServer server(net, sc, init);
  ParamSink sink_a(n, chunk, 5), sink_b(n, chunk, 5);
  EndpointConfig wc;
  wc.key = transport::testing::TestKey();
  const uint32_t pf = wc.payload_floats();
  auto a = transport::testing::SimEndpoint(net, kWorkerAddr, wc, &sink_a, RealClock::Get());
  auto b = transport::testing::SimEndpoint(net, kWorker2Addr, wc, &sink_b, RealClock::Get());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  server->SetServers({server->local()});
  server->SetWorkers({(*a)->local(), (*b)->local()});
  server->Start();
  const ChunkLayout layout = *ChunkLayout::Create(n, chunk);
  const std::vector<float> grad(n, 0.5f);
  REQUIRE(sink_a.Wait(0, absl::Seconds(20)));
  REQUIRE(server->ProposePlan(*ChunkMap::FromOwners(layout, 1, {0, 0}, 2), {}, 0).ok());
  REQUIRE(server->AwaitStats([](const ShardServerStats& st) { return st.plan_next == 2; },
                             absl::Seconds(20)));
  CHECK(server->GetStats().plan_next_from == 1);  // not 2: round 1 had not opened
  for (auto* w : {&*a, &*b}) PushChunks(**w, server->local(), 0, grad, {0, 1}, chunk, pf);
  REQUIRE(sink_a.Wait(1, absl::Seconds(20)));
  CHECK(sink_a.tag(1).first == 2);
  // Worker a's push of round 1 is in (its flow ended there before the
  // sender saw it done): version 3 still starts at round 2.
  PushChunks(**a, server->local(), 1, grad, {0, 1}, chunk, pf, 0, 2);
  REQUIRE(server->ProposePlan(*ChunkMap::FromOwners(layout, 1, {0, 0}, 3), {}, 0).ok());
  REQUIRE(server->AwaitStats([](const ShardServerStats& st) { return st.plan_next == 3; },
                             absl::Seconds(20)));
  CHECK(server->GetStats().plan_next_from == 2);
  PushChunks(**b, server->local(), 1, grad, {0, 1}, chunk, pf, 0, 2);
  REQUIRE(sink_b.Wait(2, absl::Seconds(20)));
  CHECK(sink_b.tag(2).first == 3);
  for (auto* w : {&*a, &*b}) PushChunks(**w, server->local(), 2, grad, {0, 1}, chunk, pf, 0, 3);
  REQUIRE(sink_a.Wait(3, absl::Seconds(20)));
  CHECK(sink_a.tag(3).first == 3);
  for (auto* w : {&*a, &*b}) PushChunks(**w, server->local(), 3, grad, {0, 1}, chunk, pf, 0, 3);
  REQUIRE(server->WaitFinished(absl::Seconds(20)));
  const ShardServerStats st = server->GetStats();
  CHECK(st.rounds_complete == 4);
  CHECK(st.plan_version == 3);
  CHECK(st.plan_from == 2);
  CHECK(st.rounds_reopened == 0);
}

}  // namespace
}  // namespace ps
}  // namespace hetps
