#include "daemons/schedd/policy_loop.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace hetps {
namespace {

v1::LinkReport Link(const std::string& from, const std::string& to, double Bps) {
  v1::LinkReport l;
  l.set_from_node_id(from);
  l.set_to_node_id(to);
  l.set_throughput_bytes_per_second(Bps);
  return l;
}

// An elastic job of two psds, each on its own host with a worker.
PolicyJob TwoHostJob(const std::string& id, int64_t chunks) {
  PolicyJob job;
  job.job_id = id;
  job.load_policy = "elastic";
  job.update_time_ms = 1000;
  job.num_chunks = chunks;
  job.servers = {"p0", "p1"};
  job.host_of = {{"p0", "h0"}, {"w0", "h0"}, {"p1", "h1"}, {"w1", "h1"}};
  return job;
}

TEST_CASE("chunk counts follow the shares and sum to the chunks", "[policy]") {
  CHECK(ChunkCounts({1, 1, 1}, 10) == std::vector<int64_t>{4, 3, 3});
  CHECK(ChunkCounts({0.5, 0.25, 0.25}, 7) == std::vector<int64_t>{3, 2, 2});
  CHECK(ChunkCounts({0, 1}, 5) == std::vector<int64_t>{0, 5});
  CHECK(ChunkCounts({0, 0}, 5) == std::vector<int64_t>{0, 0});
  using V = std::vector<int64_t>;
  CHECK(WithProbes({0, 5, 3}, {1, 1, 1}) == V{1, 4, 3});
  CHECK(WithProbes({0, 1}, {1, 1}) == V{0, 1});  // 1 chunk, 2 servers: as it is
  CHECK(WithProbes({0, 0, 3}, {1, 1, 1}) == V{1, 1, 1});
  CHECK(WithProbes({0, 5, 3}, {2, 2, 2}) == V{2, 3, 3});
  CHECK(WithProbes({0, 6}, {3, 3}) == V{3, 3});
  CHECK(WithProbes({0, 5}, {3, 3}) == V{0, 5});           // not enough for both
  CHECK(WithProbes({0, 0, 5}, {0, 2, 2}) == V{0, 2, 3});  // server 0 needs none
}

// A psd shares its host with one of the job's workers: that worker's
// flows measure the host, so the psd needs no probe slice; a psd alone
// on its host (or beside a worker that left) keeps job.probe_chunks.
TEST_CASE("probe slices only where no worker of the job measures the host", "[policy]") {
  PolicyJob job = TwoHostJob("j", 8);
  job.workers = {"w0", "w1"};
  job.probe_chunks = 3;
  CHECK(ProbeChunks(job) == std::vector<int64_t>{0, 0});
  job.servers.push_back("p2");
  job.host_of["p2"] = "h2";
  CHECK(ProbeChunks(job) == std::vector<int64_t>{0, 0, 3});
  job.gone.insert("w1");
  CHECK(ProbeChunks(job) == std::vector<int64_t>{0, 3, 3});
}

TEST_CASE("the link table checks what a node reports", "[policy]") {
  LinkTable t;
  CHECK(t.Record("b", Link("a", "b", 1e6), 5).ok());
  CHECK(t.Find("a", "b")->measured_unix_ms() == 5);
  CHECK(!t.Record("c", Link("a", "b", 1e6), 5).ok());  // not into the reporter
  CHECK(!t.Record("b", Link("b", "b", 1e6), 5).ok());
  CHECK(!t.Record("b", Link("a", "b", -1), 5).ok());
  CHECK(!t.Record("b", Link("a", "b", std::nan("")), 5).ok());
  v1::LinkReport lossy = Link("a", "b", 1e6);
  lossy.set_loss_fraction(2);
  CHECK(!t.Record("b", lossy, 5).ok());
  CHECK(t.All().size() == 1);
}

// An adlb job of four psds (p0-p3), each on a host of its own with a
// worker (w0-w3).
PolicyJob FourHostAdlbJob() {
  PolicyJob job;
  job.job_id = "job-1";
  job.load_policy = "adlb";
  job.update_time_ms = 1000;
  job.update_rate = 0.1;
  job.num_chunks = 40;
  job.servers = {"p0", "p1", "p2", "p3"};
  return job;
}

// Host s of FourHostAdlbJob read at r[s] bytes/s both ways, at `now`.
void MeasureFourHosts(LinkTable* links, const double* r, int64_t now) {
  for (int s = 0; s < 4; ++s) {
    const std::string p = "p" + std::to_string(s), w = "w" + std::to_string(s);
    REQUIRE(links->Record(p, Link(w, p, r[s]), now).ok());
    REQUIRE(links->Record(w, Link(p, w, r[s]), now).ok());
  }
}

TEST_CASE("the policy loop issues a plan when the links say so, and not for noise", "[policy]") {
  PolicyJob job = FourHostAdlbJob();
  LinkTable links;
  PolicyLoop loop;
  CHECK(!loop.Tick(job, links, 0));  // the job is new: version 1, the even split
  CHECK(loop.current().version() == 1);
  CHECK(loop.current().chunk_server_size() == 40);
  CHECK(!loop.Tick(job, links, 1000));  // nothing measured
  CHECK(loop.last_decision().find("no link of p0") != std::string::npos);

  // Four hosts, rates spanning 10x: each psd's links are its host's.
  const double rate[] = {100e6 / 8, 50e6 / 8, 25e6 / 8, 10e6 / 8};
  auto measure = [&](const double* r, int64_t now) { MeasureFourHosts(&links, r, now); };
  measure(rate, 1500);
  std::optional<v1::Policy> plan = loop.Tick(job, links, 2000);
  REQUIRE(plan.has_value());
  CHECK(plan->version() == 2);
  CHECK(plan->chunk_server_size() == 40);
  // ADLB's exact optimum for these rates: the slowest aggregates nothing
  // but the one chunk that keeps its links measured.
  CHECK(plan->server_chunks(3) == 1);
  CHECK(plan->server_chunks(0) > plan->server_chunks(1));
  CHECK(plan->server_chunks(1) > plan->server_chunks(2));
  int64_t sum = 0;
  for (int64_t c : plan->server_chunks()) sum += c;
  CHECK(sum == 40);
  // Every psd closed its first round (schedd hears it from heartbeats).
  job.plan_settled_ms = 2000;

  // 3% noise: under update_rate, nothing recomputed.
  const double noisy[] = {rate[0] * 1.03, rate[1] * 0.97, rate[2], rate[3]};
  measure(noisy, 2500);
  CHECK(!loop.Tick(job, links, 3000));
  CHECK(loop.current().version() == 2);
  CHECK(loop.last_decision().find("kept version 2") != std::string::npos);
  // The fast hosts read far from their rates (as they do when their
  // slower peers hold them down) while the slowest still bounds the round:
  // no map predicts a shorter one, so none is issued.
  // (Throughputs that moved are read again a window later: a drop shows
  // only once the readings before it are that old.)
  const double swung[] = {rate[0] * 0.6, rate[1] * 1.5, rate[2] * 0.8, rate[3]};
  measure(swung, 3500);
  CHECK(!loop.Tick(job, links, 4000));
  CHECK(loop.last_decision().find("waiting for 1 s of readings since") != std::string::npos);
  measure(swung, 4500);
  CHECK(!loop.Tick(job, links, 5000));
  CHECK(loop.current().version() == 2);
  CHECK(loop.last_decision().find("predicted transfer") != std::string::npos);
  // Rates permuted: a new plan, moving chunks from the new slowest.
  const double permuted[] = {rate[3], rate[2], rate[1], rate[0]};
  measure(permuted, 5500);
  CHECK(!loop.Tick(job, links, 6000));
  measure(permuted, 6500);
  plan = loop.Tick(job, links, 7000);
  REQUIRE(plan.has_value());
  CHECK(plan->version() == 3);
  CHECK(plan->server_chunks(0) == 1);
  CHECK(loop.history().size() == 2);
  job.plan_settled_ms = 7500;

  // Stale links (probed over a period ago) are not used.
  CHECK(!loop.Tick(job, links, 9000));
  // A recovery epoch starts again from the even split; the history keeps
  // the plan that was in force.
  job.recovery_epoch = 1;
  CHECK(!loop.Tick(job, links, 9500));
  CHECK(loop.current().version() == 1);
  CHECK(loop.current().server_chunks(3) == 10);
  REQUIRE(loop.history().size() == 3);
  CHECK(loop.history().back().version() == 3);
  // One that resumed under its checkpoint's plan goes on from that plan.
  v1::Policy start;
  start.set_version(1);
  for (int k = 0; k < 40; ++k) start.add_chunk_server(k < 37 ? 0 : 1 + k % 3);
  v1::WorkerBatch* b = start.add_worker_batches();
  b->set_worker_node_id("w0");
  b->set_batch_size(20);
  b->set_resume_samples(400);
  job.start = start;
  job.recovery_epoch = 2;
  CHECK(!loop.Tick(job, links, 9600));
  CHECK(loop.current().version() == 1);
  CHECK(loop.current().recovery_epoch() == 2);
  CHECK(loop.current().server_chunks(0) == 37);
  CHECK(loop.current().server_chunks(3) == 1);
  REQUIRE(loop.current().worker_batches_size() == 1);
  CHECK(loop.current().worker_batches(0).batch_size() == 20);
  CHECK(loop.current().worker_batches(0).resume_samples() == 0);
}

// Both maps' costs come from the same readings: a predicted gain of
// kMapGain x update_rate moves chunks, one under it does not.
TEST_CASE("a new map is issued when it is predicted kMapGain x update_rate faster", "[policy]") {
  PolicyJob job = FourHostAdlbJob();
  LinkTable links;
  PolicyLoop loop;
  CHECK(!loop.Tick(job, links, 0));
  const double rate[] = {100e6 / 8, 50e6 / 8, 25e6 / 8, 10e6 / 8};
  MeasureFourHosts(&links, rate, 1500);
  std::optional<v1::Policy> plan = loop.Tick(job, links, 2000);
  REQUIRE(plan.has_value());
  REQUIRE(std::vector<int64_t>(plan->server_chunks().begin(), plan->server_chunks().end()) ==
          std::vector<int64_t>{31, 7, 1, 1});
  job.plan_settled_ms = 2000;
  // Host 0 drops to 35%, host 2 rises by half: ADLB's map for these
  // readings is predicted 3.7% shorter. Kept.
  const double small[] = {rate[0] * 0.35, rate[1], rate[2] * 1.5, rate[3]};
  MeasureFourHosts(&links, small, 3500);
  CHECK(!loop.Tick(job, links, 4000));  // moved: a window of readings first
  MeasureFourHosts(&links, small, 4500);
  CHECK(!loop.Tick(job, links, 5000));
  CHECK(loop.last_decision().find("shorten the predicted transfer by 0.037") != std::string::npos);
  CHECK(loop.last_decision().find("not over 0.04 (0.4 x update_rate)") != std::string::npos);
  // Host 0 at 31.4%: ADLB's map is predicted between 4% and 6% shorter,
  // over 0.4 x update_rate: issued.
  const double more[] = {rate[0] * 0.314, rate[1], rate[2] * 1.5, rate[3]};
  MeasureFourHosts(&links, more, 5500);
  CHECK(!loop.Tick(job, links, 6000));
  MeasureFourHosts(&links, more, 6500);
  plan = loop.Tick(job, links, 7000);
  INFO(loop.last_decision());
  REQUIRE(plan.has_value());
  CHECK(plan->version() == 3);
  const std::vector<int64_t> before = {31, 7, 1, 1};
  const std::vector<int64_t> after(plan->server_chunks().begin(), plan->server_chunks().end());
  const std::vector<double> read(std::begin(more), std::end(more));
  const double gain = 1 - MapCost(after, read) / MapCost(before, read);
  CHECK(gain > 0.04);
  CHECK(gain < 0.06);
}

// A map kept at a look between periods, with that look's readings made
// its basis, is recorded: the ticks after it compare with that basis
// ("within update_rate of the plan's"), and psctl policy show must show
// the readings it came from.
TEST_CASE("a map kept between periods with new readings is recorded", "[policy]") {
  PolicyJob job = FourHostAdlbJob();
  LinkTable links;
  PolicyLoop loop;
  auto measure = [&](const std::vector<double>& r, int64_t now) {
    MeasureFourHosts(&links, r.data(), now);
  };
  const std::vector<double> rate = {100e6 / 8, 50e6 / 8, 25e6 / 8, 10e6 / 8};
  CHECK(!loop.Tick(job, links, 0));
  measure(rate, 1500);
  REQUIRE(loop.Tick(job, links, 2000).has_value());
  job.plan_settled_ms = 2000;
  measure(rate, 2500);
  CHECK(!loop.Tick(job, links, 3000));  // a period: within update_rate
  // The fast hosts swing; the slowest still bounds every map's round.
  const std::vector<double> swung = {rate[0] * 0.6, rate[1] * 1.5, rate[2] * 0.8, rate[3]};
  measure(swung, 3100);
  CHECK(!loop.Tick(job, links, 3250));  // a look: the move begins
  const size_t before = loop.decisions().size();
  measure(swung, 3900);
  CHECK(!loop.Tick(job, links, 4000));  // a period: waiting a window
  CHECK(loop.decisions().size() == before + 1);
  measure(swung, 4100);
  CHECK(!loop.Tick(job, links, 4250));  // a look, a window on: kept, rebased
  REQUIRE(loop.decisions().size() == before + 2);
  const v1::PolicyDecision& d = loop.decisions().back();
  CHECK(d.unix_ms() == 4250);
  CHECK(d.why().find("predicted transfer") != std::string::npos);
  REQUIRE(d.server_throughput_bytes_per_second_size() == 4);
  CHECK(d.server_throughput_bytes_per_second(1) ==
        Approx(loop.current().server_throughput_bytes_per_second(1)));
  // A look that only waits is not recorded.
  CHECK(!loop.Tick(job, links, 4500));
  CHECK(loop.decisions().size() == before + 2);
}

// TwoHostJob and a third host with only a worker (w2), the loop past
// its first tick (version 1, the even split).
struct ThreeHosts {
  ThreeHosts(const std::string& id, int64_t chunks) : job(TwoHostJob(id, chunks)) {
    job.host_of["w2"] = "h2";
    loop.Tick(job, links, 0);
  }
  PolicyJob job;
  LinkTable links;
  PolicyLoop loop;
};

TEST_CASE("a psd's throughput is its host's: links of any node there count", "[policy]") {
  ThreeHosts h("job-2", 10);
  auto& [job, links, loop] = h;
  // A host's throughput: the fastest link into or out of one of its
  // nodes; links within a host do not count.
  REQUIRE(links.Record("w1", Link("p0", "w1", 1e6), 500).ok());
  REQUIRE(links.Record("p0", Link("w1", "p0", 3e6), 500).ok());
  REQUIRE(links.Record("p0", Link("w0", "p0", 90e6), 500).ok());  // within h0: not counted
  REQUIRE(links.Record("w0", Link("p1", "w0", 5e6), 500).ok());
  REQUIRE(links.Record("p0", Link("w2", "p0", 9e6), 500).ok());
  REQUIRE(links.Record("w2", Link("p1", "w2", 2e6), 500).ok());
  std::optional<v1::Policy> plan = loop.Tick(job, links, 1000);
  REQUIRE(plan.has_value());
  // h0: w2 -> p0; h1: p1 -> w0.
  CHECK(plan->server_throughput_bytes_per_second(0) == 9e6);
  CHECK(plan->server_throughput_bytes_per_second(1) == 5e6);
  CHECK(plan->server_chunks(0) == 6);
  CHECK(plan->server_chunks(1) == 4);
}

v1::NodeTraffic Traffic(int64_t first_ms, std::vector<uint64_t> bins) {
  v1::NodeTraffic t;
  t.set_first_bin_unix_ms(first_ms);
  t.set_bin_ms(LinkTable::kTrafficBinMs);
  for (uint64_t b : bins) t.add_in_bytes(b);
  return t;
}

TEST_CASE("node traffic is checked, and a host's rate adds its nodes at each moment", "[policy]") {
  LinkTable t;
  const int64_t now = 100'000;
  v1::NodeTraffic odd = Traffic(now - 1000, {1, 2});
  odd.set_bin_ms(100);
  CHECK(!t.RecordTraffic("p0", odd, now).ok());
  CHECK(!t.RecordTraffic("p0", Traffic(now - 1000, std::vector<uint64_t>(1025, 1)), now).ok());
  CHECK(!t.RecordTraffic("p0", Traffic(now - 200'000, {1}), now).ok());  // a clock far off
  CHECK(!t.RecordTraffic("p0", Traffic(now + 61'000, {1}), now).ok());
  CHECK(!t.RecordTraffic("p0", Traffic(now - 1000, {uint64_t(2e11)}), now).ok());
  CHECK(t.PeakRate({"p0"}, now - 2000, now) == 0);  // nothing refused was kept

  // p0 busy in the first 200 ms, w0 in the next: their host never
  // carried both at once, so each moment counts only what ran then.
  const int64_t at = now - 2000;
  CHECK(t.RecordTraffic("p0", Traffic(at, {1000, 1000, 1000, 1000, 0, 0, 0, 0}), now).ok());
  CHECK(t.RecordTraffic("w0", Traffic(at, {0, 0, 0, 0, 1000, 1000, 1000, 1000}), now).ok());
  CHECK(t.PeakRate({"p0", "w0"}, at, now) == Approx(4000 / 0.2));
  // Overlapping, they add up.
  CHECK(t.RecordTraffic("w0", Traffic(at, {0, 0, 1000, 1000, 1000, 1000, 0, 0}), now).ok());
  CHECK(t.PeakRate({"p0", "w0"}, at, now) == Approx(6000 / 0.2));
  CHECK(t.PeakRate({"p0"}, at, now) == Approx(4000 / 0.2));
  // A later report replaces the bins it covers (a flow counts when it
  // ends, so the recent past is sent again), and a grid a few ms off
  // snaps to schedd's.
  CHECK(t.RecordTraffic("p0", Traffic(at + 7, {500, 500, 500, 500}), now).ok());
  CHECK(t.PeakRate({"p0", "w0"}, at, now) == Approx(5000 / 0.2));
  // Only windows within [from, to).
  CHECK(t.PeakRate({"p0", "w0"}, at + 200, now) == Approx(2000 / 0.2));
  CHECK(t.PeakRate({"p0", "w0"}, at, at + 150) == 0);
  // A minute later it is gone.
  CHECK(t.RecordTraffic("p1", Traffic(now + 61'000, {1}), now + 61'000).ok());
  CHECK(t.PeakRate({"p0", "w0"}, 0, now + 61'000) == 0);
}

TEST_CASE("a saturated host reads what all its flows carried at once", "[policy]") {
  ThreeHosts h("job-3", 20);
  auto& [job, links, loop] = h;
  // Each of h0's links shows its share of h0's link; h1 has a fast one.
  REQUIRE(links.Record("p0", Link("w2", "p0", 0.4e6), 500).ok());
  REQUIRE(links.Record("w0", Link("p1", "w0", 0.4e6), 500).ok());
  REQUIRE(links.Record("p1", Link("w2", "p1", 2e6), 500).ok());
  std::optional<v1::Policy> plan = loop.Tick(job, links, 1000);
  REQUIRE(plan.has_value());
  CHECK(plan->server_throughput_bytes_per_second(0) == 0.4e6);
  CHECK(plan->server_chunks(0) == 3);
  // The map holds until every psd closed its first round, whatever was
  // measured meanwhile.
  CHECK(!loop.Tick(job, links, 2000));
  CHECK(loop.last_decision().find("waiting for every psd to close its first round") !=
        std::string::npos);
  // Settled at 2500: a period of its rounds is needed.
  job.plan_settled_ms = 2500;
  CHECK(!loop.Tick(job, links, 3000));
  CHECK(loop.last_decision().find("measured for 0.5 s") != std::string::npos);
  // h0's nodes report 1 MB/s together at their busiest: more than any
  // of its links showed, and so its throughput.
  const std::vector<uint64_t> busy = {25'000, 25'000, 25'000, 25'000};
  REQUIRE(links.RecordTraffic("p0", Traffic(3200, busy), 3900).ok());
  REQUIRE(links.RecordTraffic("w0", Traffic(3200, busy), 3900).ok());
  // h1's traffic, below its fastest link, changes nothing there; that
  // link was reported again under the new map (reported before it
  // settled, it would not count).
  REQUIRE(links.RecordTraffic("p1", Traffic(3200, busy), 3900).ok());
  REQUIRE(links.Record("p1", Link("w2", "p1", 2e6), 3600).ok());
  CHECK(!loop.Tick(job, links, 4000));  // h0 moved: a window of readings since first
  for (const char* n : {"p0", "w0", "p1"}) {
    REQUIRE(links.RecordTraffic(n, Traffic(4200, busy), 4900).ok());
  }
  REQUIRE(links.Record("p1", Link("w2", "p1", 2e6), 4600).ok());
  plan = loop.Tick(job, links, 5000);
  REQUIRE(plan.has_value());
  CHECK(plan->server_throughput_bytes_per_second(0) == Approx(1e6));
  CHECK(plan->server_throughput_bytes_per_second(1) == 2e6);
  CHECK(plan->server_chunks(0) == 7);
  CHECK(plan->server_chunks(1) == 13);
  // The decision says where each reading came from.
  const v1::PolicyDecision& d = loop.decisions().back();
  REQUIRE(d.server_throughput_source_size() == 2);
  CHECK(d.server_throughput_source(0) == "traffic");
  CHECK(d.server_throughput_source(1) == "link w2>p1");
  // The first map's readings were h0's links alone (both at 0.4 MB/s:
  // the first of them read).
  const v1::PolicyDecision& first = loop.decisions().front();
  REQUIRE(first.server_throughput_source_size() == 2);
  CHECK(first.server_throughput_source(0).rfind("link ", 0) == 0);
}

TEST_CASE("a map's successor is made only from readings taken after it settled", "[policy]") {
  ThreeHosts h("job-settle", 20);
  auto& [job, links, loop] = h;
  // h0 at 1 MB/s, h1 at 3 (links to and from w2, alone on h2).
  REQUIRE(links.Record("p0", Link("w2", "p0", 1e6), 500).ok());
  REQUIRE(links.Record("w2", Link("p1", "w2", 3e6), 500).ok());
  std::optional<v1::Policy> plan = loop.Tick(job, links, 1000);
  REQUIRE(plan.has_value());
  CHECK(plan->server_chunks(0) == 5);
  CHECK(plan->server_chunks(1) == 15);
  // During the switch, h1's flows read slow and h0's fast: the map they
  // would make is not made.
  REQUIRE(links.Record("w2", Link("p1", "w2", 0.5e6), 1500).ok());
  REQUIRE(links.Record("p0", Link("w2", "p0", 4e6), 1600).ok());
  CHECK(!loop.Tick(job, links, 2000));
  CHECK(loop.last_decision().find("waiting for every psd to close its first round") !=
        std::string::npos);
  job.plan_settled_ms = 2200;
  CHECK(!loop.Tick(job, links, 3000));
  CHECK(loop.last_decision().find("measured for 0.8 s") != std::string::npos);
  // Nothing reported since it settled: the loop says so rather than
  // deciding on the switch's readings.
  CHECK(!loop.Tick(job, links, 4000));
  CHECK(loop.last_decision().find("no link of p0's host measured") != std::string::npos);
  // Readings of the settled map, as before it, keep it.
  REQUIRE(links.Record("p0", Link("w2", "p0", 1e6), 4500).ok());
  REQUIRE(links.Record("w2", Link("p1", "w2", 3e6), 4500).ok());
  CHECK(!loop.Tick(job, links, 5000));
  CHECK(loop.current().version() == 2);
  CHECK(loop.last_decision().find("within 0.1 of the plan's") != std::string::npos);
  // Each update period's decision is kept, with what it read: 1000
  // (issued) to 5000 (the job's first tick, at 0, decides nothing).
  REQUIRE(loop.decisions().size() == 5);
  CHECK(loop.decisions().front().why().find("issued version 2") == 0);
  CHECK(loop.decisions().front().server_throughput_bytes_per_second(1) == 3e6);
  CHECK(loop.decisions()[1].server_throughput_bytes_per_second_size() == 0);  // read none
  CHECK(loop.decisions().back().unix_ms() == 5000);
  CHECK(loop.decisions().back().why() == loop.last_decision());
  CHECK(loop.decisions().back().server_throughput_bytes_per_second(0) == 1e6);

  // Servers that never say when a map settled: its successor waits
  // kSettleWaitPeriods, then reads the last period as usual.
  ThreeHosts quiet("job-quiet", 20);
  REQUIRE(quiet.links.Record("p0", Link("w2", "p0", 1e6), 500).ok());
  REQUIRE(quiet.links.Record("w2", Link("p1", "w2", 3e6), 500).ok());
  REQUIRE(quiet.loop.Tick(quiet.job, quiet.links, 1000).has_value());
  REQUIRE(quiet.links.Record("p0", Link("w3", "p0", 9e6), 2500).ok());  // long before
  REQUIRE(quiet.links.Record("p0", Link("w2", "p0", 3e6), 5200).ok());
  REQUIRE(quiet.links.Record("w2", Link("p1", "w2", 1e6), 5200).ok());
  for (int64_t t = 2000; t < 6000; t += 1000) {
    CHECK(!quiet.loop.Tick(quiet.job, quiet.links, t));
    CHECK(quiet.loop.last_decision().find("waiting for every psd") != std::string::npos);
  }
  CHECK(!quiet.loop.Tick(quiet.job, quiet.links, 6000));  // moved
  REQUIRE(quiet.links.Record("p0", Link("w2", "p0", 3e6), 6500).ok());
  REQUIRE(quiet.links.Record("w2", Link("p1", "w2", 1e6), 6500).ok());
  plan = quiet.loop.Tick(quiet.job, quiet.links, 7000);
  REQUIRE(plan.has_value());
  CHECK(plan->server_throughput_bytes_per_second(0) == 3e6);
  CHECK(plan->server_chunks(0) == 15);
  CHECK(plan->server_chunks(1) == 5);
}

// ThreeHosts' readings at `at`: h0 at `h0` B/s (w2 -> p0), h1 at `h1`
// (p1 -> w2).
void ReadHosts(LinkTable* links, double h0, double h1, int64_t at) {
  REQUIRE(links->Record("p0", Link("w2", "p0", h0), at).ok());
  REQUIRE(links->Record("w2", Link("p1", "w2", h1), at).ok());
}

// Two maps of ThreeHosts: 5 / 15 from h0 at 1 MB/s and h1 at 3, whose
// first round of its own took 1000 ms, then 15 / 5 from readings that
// had them the other way round (wrong: see below), settled at 4000 with
// its first round of its own taking `round_ms`.
void SecondMapFromReadingsThatTurn(ThreeHosts* h, double round_ms) {
  auto& [job, links, loop] = *h;
  ReadHosts(&links, 1e6, 3e6, 500);
  REQUIRE(loop.Tick(job, links, 1000).has_value());
  job.plan_settled_ms = 1500;
  job.plan_round_ms = 1000;
  for (int64_t at : {2100, 3100}) {
    ReadHosts(&links, 3e6, 1e6, at);
  }
  CHECK(!loop.Tick(job, links, 2500));  // moved: a window of readings first
  std::optional<v1::Policy> plan = loop.Tick(job, links, 3500);
  REQUIRE(plan.has_value());
  CHECK(plan->server_chunks(0) == 15);
  job.plan_settled_ms = 4000;
  job.plan_round_ms = round_ms;
}

// A map is checked against its own rounds: its first round after the
// switch's, over the round Eq. 9 predicted from the readings it was made
// from (with two psds, the slower host's model time). Far over what that
// ratio was for the maps before it, the readings were wrong, and the
// next map is made from the rounds of this one alone, without waiting a
// period of them or for moves to settle.
TEST_CASE("a map whose rounds run far over its prediction is replaced early", "[policy]") {
  for (double round_ms : {1500.0, 2000.0}) {
    ThreeHosts h("job-wrong", 20);
    SecondMapFromReadingsThatTurn(&h, round_ms);
    // Its rounds show h0 at 1 MB/s and h1 at 3 again.
    ReadHosts(&h.links, 1e6, 3e6, 4100);
    std::optional<v1::Policy> plan = h.loop.Tick(h.job, h.links, 4250);
    if (round_ms == 1500) {
      // 1.5x the map before's: the usual wait for a period of its rounds.
      CHECK(!plan.has_value());
      CHECK(h.loop.last_decision().find("a decision needs one update period") != std::string::npos);
    } else {
      // 2x: made at once, from the 0.25 s of readings since it settled.
      REQUIRE(plan.has_value());
      CHECK(plan->version() == 4);
      CHECK(plan->server_chunks(0) == 5);
      CHECK(h.loop.last_decision().find(
                "made without waiting: version 3's first round of its own ran 2x") !=
            std::string::npos);
    }
  }
}

// A wrong map's ratio is no norm: the next map is compared with the maps
// before that were not found wrong. Counted in, it would have made the
// norm 1.5x the right map's, and 1.9x that would have passed.
TEST_CASE("a map found wrong does not set what the next is compared with", "[policy]") {
  ThreeHosts h("job-norm", 20);
  SecondMapFromReadingsThatTurn(&h, 2000);
  auto& [job, links, loop] = h;
  ReadHosts(&links, 1e6, 3e6, 4100);
  REQUIRE(loop.Tick(job, links, 4250).has_value());  // version 4, early
  job.plan_settled_ms = 5000;
  job.plan_round_ms = 1900;
  ReadHosts(&links, 3e6, 1e6, 5100);
  std::optional<v1::Policy> plan = loop.Tick(job, links, 5250);
  REQUIRE(plan.has_value());
  CHECK(plan->version() == 5);
  CHECK(loop.last_decision().find("version 4's first round of its own ran 1.9x") !=
        std::string::npos);
}

// Once per map: a slow first round whose readings call for no new map
// leaves the usual waits in force after that look.
TEST_CASE("a map's early decision is made once", "[policy]") {
  ThreeHosts h("job-once", 20);
  SecondMapFromReadingsThatTurn(&h, 3000);
  auto& [job, links, loop] = h;
  // Its readings moved by a little: h0 read 3.1 MB/s against the map's
  // 3. The early look keeps it (under update_rate), and the next waits.
  ReadHosts(&links, 3.1e6, 1e6, 4100);
  CHECK(!loop.Tick(job, links, 4250));
  CHECK(loop.last_decision().find("within 0.1 of the plan's") != std::string::npos);
  ReadHosts(&links, 1e6, 3e6, 4400);
  CHECK(!loop.Tick(job, links, 4500));
  CHECK(loop.last_decision().find("a decision needs one update period") != std::string::npos);
}

// A link's estimate is the largest of its recent probes: a report may
// carry a rate probed well before it (sample_age_ms), which counts by
// when it was probed. A host that dropped shows it once its last probe
// of the old rate is a period old, however often that rate is reported.
TEST_CASE("a link counts by when it was probed, not when it was reported", "[policy]") {
  LinkTable t;
  v1::LinkReport aged = Link("a", "b", 1e6);
  aged.set_sample_age_ms(uint64_t(LinkTable::kSampleAgeMaxMs) + 1);
  CHECK(!t.Record("b", aged, 5).ok());
  CHECK(t.All().empty());

  PolicyJob job = TwoHostJob("job-probed", 20);
  REQUIRE(t.Record("w1", Link("p0", "w1", 4e6), 3000).ok());
  v1::LinkReport old_fast = Link("p1", "w0", 9e6);  // probed at 2900, reported at 4100
  old_fast.set_sample_age_ms(1200);
  REQUIRE(t.Record("w0", old_fast, 4100).ok());
  REQUIRE(t.Record("p0", Link("w1", "p0", 2e6), 3950).ok());  // h1 -> h0 now
  absl::StatusOr<std::vector<double>> r = HostRates(job, t, 3800);
  REQUIRE(r.ok());  // 2900 is within the period before 3800: h0 and h1 at 9e6
  CHECK((*r)[0] == 9e6);
  CHECK((*r)[1] == 9e6);
  r = HostRates(job, t, 4100);  // [3100, 4100]: only the probe at 3950
  REQUIRE(r.ok());
  CHECK((*r)[0] == 2e6);
  CHECK((*r)[1] == 2e6);
  r = HostRates(job, t, 5000);
  CHECK(r.status().code() == absl::StatusCode::kUnavailable);
  CHECK(r.status().message().find("in the last 1 s") != std::string::npos);
}

v1::LinkReport Probed(v1::LinkReport l, const std::vector<std::pair<double, uint64_t>>& probes) {
  for (const auto& [Bps, age_ms] : probes) {
    v1::LinkProbe* p = l.add_probes();
    p->set_bytes_per_second(Bps);
    p->set_age_ms(age_ms);
  }
  return l;
}

// A link's estimate is its largest recent probe, which may be older than
// the window schedd reads while the link carried flows since: its newer
// probes, slower, still say what it carried in the window.
TEST_CASE("a link counts at its fastest probe within the window, not only its largest",
          "[policy]") {
  LinkTable t;
  // The estimate (9e6) was probed at 2900, a slower probe at 4000.
  v1::LinkReport l = Link("p1", "w0", 9e6);
  l.set_sample_age_ms(1200);
  REQUIRE(t.Record("w0", Probed(l, {{9e6, 1200}, {3e6, 100}}), 4100).ok());
  const v1::LinkReport* held = t.Find("p1", "w0");
  REQUIRE(held != nullptr);
  CHECK(FastestSince(*held, 2900) == 9e6);
  CHECK(FastestSince(*held, 2901) == 3e6);
  CHECK(FastestSince(*held, 4001) == 0);
  PolicyJob job = TwoHostJob("job-probes", 20);
  absl::StatusOr<std::vector<double>> r = HostRates(job, t, 4100);  // [3100, 4100]
  REQUIRE(r.ok());
  CHECK(*r == std::vector<double>{3e6, 3e6});
  // A node that keeps more probes than it sends: its estimate is one too.
  v1::LinkReport kept = Link("p1", "w0", 7e6);  // probed at 3900, not among those sent
  kept.set_sample_age_ms(200);
  REQUIRE(t.Record("w0", Probed(kept, {{3e6, 100}}), 4100).ok());
  CHECK(FastestSince(*t.Find("p1", "w0"), 3100) == 7e6);
  // A node that sends no probes: its estimate alone, out of the window.
  REQUIRE(t.Record("w0", l, 4100).ok());
  CHECK(FastestSince(*t.Find("p1", "w0"), 2901) == 0);
  CHECK(HostRates(job, t, 4100).status().code() == absl::StatusCode::kUnavailable);

  // Probes are checked: at most kProbesMax, each a rate and an age.
  std::vector<std::pair<double, uint64_t>> nine(LinkTable::kProbesMax + 1, {1e6, 10});
  CHECK(!t.Record("w0", Probed(Link("p1", "w0", 1e6), nine), 5000).ok());
  CHECK(!t.Record("w0", Probed(Link("p1", "w0", 1e6), {{std::nan(""), 10}}), 5000).ok());
  CHECK(!t.Record("w0", Probed(Link("p1", "w0", 1e6), {{0, 10}}), 5000).ok());
  CHECK(!t.Record("w0",
                  Probed(Link("p1", "w0", 1e6), {{1e6, uint64_t(LinkTable::kSampleAgeMaxMs) + 1}}),
                  5000)
             .ok());
  CHECK(t.Find("p1", "w0")->measured_unix_ms() == 4100);  // none of them was taken
}

// A host that aggregates nothing is fed only at what the psds with chunks
// send its worker: its readings are lower bounds that swing with who
// feeds it, so the best of kIdlePeriods counts; a host with chunks is
// read over the last period, where a drop shows.
TEST_CASE("a host without chunks keeps its best reading for kIdlePeriods", "[policy]") {
  PolicyJob job = TwoHostJob("job-idle", 20);
  job.host_of["w2"] = "h2";
  LinkTable t;
  REQUIRE(t.Record("p0", Link("w2", "p0", 2e6), 1000).ok());    // h2 -> h0
  REQUIRE(t.Record("w2", Link("p1", "w2", 3e6), 1000).ok());    // h1 -> h2
  REQUIRE(t.Record("w0", Link("w2", "w0", 1e6), 2400).ok());    // h2 -> h0
  REQUIRE(t.Record("w1", Link("w2", "w1", 0.5e6), 2400).ok());  // h2 -> h1
  using V = std::vector<int64_t>;
  const V h1_idle = {20, 0}, both = {10, 10}, h0_idle = {0, 20};
  absl::StatusOr<std::vector<double>> r = HostRates(job, t, 2500, 0, &h1_idle);
  REQUIRE(r.ok());
  CHECK((*r)[0] == 1e6);  // 2e6 was probed over a period ago
  CHECK((*r)[1] == 3e6);  // idle: its best of 3 periods
  r = HostRates(job, t, 2500, 0, &both);
  REQUIRE(r.ok());
  CHECK((*r)[1] == 0.5e6);
  r = HostRates(job, t, 2500, 0, &h0_idle);
  REQUIRE(r.ok());
  CHECK((*r)[0] == 2e6);
  CHECK((*r)[1] == 0.5e6);
  // Its own link held its pushes: it reads its window, as a loaded one.
  r = HostRates(job, t, 2500, 0, &h1_idle);
  REQUIRE(r.ok());
  ReadOwnLinks(job, t, 2500, 0, {1}, &*r);
  CHECK((*r)[1] == 0.5e6);
  CHECK((*r)[0] == 1e6);
  // Past kIdlePeriods even an idle host reads only what is recent.
  REQUIRE(t.Record("w0", Link("w2", "w0", 1e6), 3900).ok());
  r = HostRates(job, t, 1000 + kIdlePeriods * 1000 + 1, 0, &h1_idle);
  REQUIRE(r.ok());
  CHECK((*r)[1] == 0.5e6);
}

// Four hosts hi, each with psd pi and worker wi.
PolicyJob FourHostJob() {
  PolicyJob job;
  job.update_rate = 0.1;
  for (int i = 0; i < 4; ++i) {
    const std::string n = std::to_string(i);
    job.servers.push_back("p" + n);
    job.workers.push_back("w" + n);
    job.host_of["p" + n] = job.host_of["w" + n] = "h" + n;
  }
  return job;
}

// Links (from, to, rate) into the receivers, probed at 1000.
void Feed(LinkTable* t, const std::vector<std::tuple<std::string, std::string, double>>& links) {
  for (const auto& [from, to, r] : links) REQUIRE(t->Record(to, Link(from, to, r), 1000).ok());
}

// An idle host's worker pushes into the psds with chunks. Where those
// took its pushes, together, at kFedShare of the fastest they took from
// another host, its link did not hold them and may be any faster: it is
// taken as fast as the fastest host. Taken clearly slower, its own link
// held them.
TEST_CASE("an idle host whose pushes went as fast as others' is taken as the fastest", "[policy]") {
  const PolicyJob job = FourHostJob();
  const std::vector<int64_t> chunks = {29, 29, 0, 0};
  LinkTable t;
  // p0 takes w1 at 6, w2 at 6 (h2 as fast as h1), w3 at 2 (h3's own link
  // is slower); p1 takes w0 at 5, w2 at 4.8, w3 at 2.
  Feed(&t, {{"w1", "p0", 6},
            {"w2", "p0", 6},
            {"w3", "p0", 2},
            {"w0", "p1", 5},
            {"w2", "p1", 4.8},
            {"w3", "p1", 2}});
  std::vector<double> rate = {40, 30, 12, 10};
  CHECK(LiftFedHosts(job, chunks, t, 500, &rate) == std::vector<size_t>{2});
  CHECK(rate == std::vector<double>{40, 30, 40, 10});
  // One psd's probe of it read low does not decide: together they took
  // 0.82 of the others.
  REQUIRE(t.Record("p1", Link("w2", "p1", 3), 1000).ok());
  rate = {40, 30, 12, 10};
  CHECK(LiftFedHosts(job, chunks, t, 500, &rate) == std::vector<size_t>{2});
  // Taken at half the others' rate: its own link held it.
  REQUIRE(t.Record("p0", Link("w2", "p0", 3), 1000).ok());
  REQUIRE(t.Record("p1", Link("w2", "p1", 2.5), 1000).ok());
  rate = {40, 30, 12, 10};
  CHECK(LiftFedHosts(job, chunks, t, 500, &rate).empty());
  // Links probed before from_ms say nothing; neither do hosts with chunks.
  REQUIRE(t.Record("p0", Link("w2", "p0", 6), 1000).ok());
  REQUIRE(t.Record("p1", Link("w2", "p1", 4.8), 1000).ok());
  CHECK(LiftFedHosts(job, chunks, t, 1001, &rate).empty());
  CHECK(LiftFedHosts(job, {1, 1, 1, 1}, t, 500, &rate).empty());
  CHECK(LiftFedHosts(job, {1, 1}, t, 500, &rate).empty());
  // A push whose largest probe came before from_ms counts at its newer
  // ones: into p0 at 2 since 500 (its 9 at 400), with p1's 4.8 it comes
  // to 0.62 of the others, so w2's own link held it.
  v1::LinkReport into_p0 = Link("w2", "p0", 9);
  into_p0.set_sample_age_ms(600);
  REQUIRE(t.Record("p0", Probed(into_p0, {{9, 600}, {2, 100}}), 1000).ok());
  rate = {40, 30, 12, 10};
  CHECK(LiftFedHosts(job, chunks, t, 500, &rate).empty());
  // Without its probes (an older node), only p1's push said anything.
  REQUIRE(t.Record("p0", into_p0, 1000).ok());
  CHECK(LiftFedHosts(job, chunks, t, 500, &rate) == std::vector<size_t>{2});
}

// A psd paces its broadcast so that its flows end together: it sends
// every worker as slowly as the slowest takes it, and an idle slow host's
// pull reads like anyone's. Its pushes show its link.
TEST_CASE("an idle host is not lifted by pulls that end together", "[policy]") {
  const PolicyJob job = FourHostJob();
  LinkTable t;
  Feed(&t, {{"p0", "w1", 5.5},
            {"p0", "w2", 5.2},
            {"p0", "w3", 5.6},
            {"p1", "w0", 5.1},
            {"p1", "w2", 5.0},
            {"p1", "w3", 5.2},
            {"w1", "p0", 12},
            {"w2", "p0", 5.4},
            {"w3", "p0", 48},
            {"w0", "p1", 13},
            {"w2", "p1", 5.7},
            {"w3", "p1", 8.5}});
  std::vector<double> rate = {36, 33, 10.7, 48};
  std::vector<size_t> own;
  CHECK(LiftFedHosts(job, {29, 29, 0, 0}, t, 500, &rate, &own).empty());
  CHECK(rate == std::vector<double>{36, 33, 10.7, 48});
  CHECK(own == std::vector<size_t>{2});  // its own link held its pushes
}

// A psd with fewer chunks than a probe's worth moves flows the meters
// ignore: its host shows only its worker's flows, as an idle one.
TEST_CASE("a host with less than a probe's worth of chunks counts as idle", "[policy]") {
  PolicyJob job = FourHostJob();
  job.probe_chunks = 4;
  LinkTable t;
  Feed(&t, {{"w1", "p0", 6}, {"w2", "p0", 6}, {"w0", "p1", 5}, {"w2", "p1", 5}});
  std::vector<double> rate = {40, 30, 12, 10};
  CHECK(LiftFedHosts(job, {27, 28, 3, 0}, t, 500, &rate) == std::vector<size_t>{2});
  rate = {40, 30, 12, 10};
  CHECK(LiftFedHosts(job, {26, 28, 4, 0}, t, 500, &rate).empty());
}

// Another idle host counts too: a loaded host's link also carries its
// psd's broadcast, so its worker's push is no faster than a slow idle
// host's; an idle host whose pushes went faster says what the psds take.
TEST_CASE("an idle host is compared with every host that pushed to the psds", "[policy]") {
  const PolicyJob job = FourHostJob();
  LinkTable t;
  // h1 (loaded) and h2 (idle, slow) push alike; h3 (idle) twice as fast.
  Feed(&t, {{"w1", "p0", 3},
            {"w2", "p0", 3},
            {"w3", "p0", 6},
            {"w0", "p1", 3},
            {"w2", "p1", 3},
            {"w3", "p1", 6}});
  std::vector<double> rate = {40, 30, 12, 20};
  CHECK(LiftFedHosts(job, {29, 29, 0, 0}, t, 500, &rate) == std::vector<size_t>{3});
  CHECK(rate == std::vector<double>{40, 30, 12, 40});
}

// The loop looks every kLookMs: the first map waits a whole period of
// readings, a map's successor one past its settling, and then each is
// made when the readings allow, not at the period's next tick. The
// batches stay on the period's ticks.
// LiftFedHosts reads each push at its fastest probe in the window, so
// one fast probe of the slowest idle host keeps it found fed for a
// window. A lift waits until it has been found so at every look since,
// and by the pushes probed after the first look alone (or for over a
// window, by when that probe has aged out): a host that rose keeps its
// pushes fast.
TEST_CASE("an idle host is lifted once its newer pushes show it fed too", "[policy]") {
  // adlb over h0-h3 at 40/30/2/1, so h2 and h3 are idle under its map;
  // w4 on h4 reads h0 and h1. Pushes into p0 and p1: 3 from the loaded
  // hosts (w1 into p0, w0 into p1), 2 from h2, 1 from h3. Each Tick's
  // links are probed at its own ms.
  struct At {
    double h0 = 40, h1 = 30;
    double w2_push = 2, others_push = 3;
    double w2_pull = 0, w3_pull = 0;  // a pull from p0 probed now (0: none)
  };
  std::vector<v1::Policy> plans;
  std::vector<std::string> whys;
  std::deque<v1::PolicyDecision> decisions;
  auto run = [&](const std::function<At(int64_t)>& at, int64_t until) {
    plans.clear();
    whys.clear();
    PolicyJob job = FourHostJob();
    job.job_id = "job-lift";
    job.load_policy = "adlb";
    job.update_time_ms = 4000;
    job.num_chunks = 58;
    job.host_of["w4"] = "h4";
    LinkTable links;
    PolicyLoop loop;
    // Each link's probes, as its receiver reports them: the largest of
    // the last 2 s (the node's window) with its age, and those probes.
    std::map<std::pair<std::string, std::string>, std::deque<std::pair<int64_t, double>>> probed;
    for (int64_t ms = 0; ms <= until; ms += PolicyLoop::kLookMs) {
      const At a = at(ms);
      auto rec = [&](const std::string& from, const std::string& to, double r) {
        if (r <= 0) return;
        auto& h = probed[{from, to}];
        h.emplace_back(ms, r);
        while (h.front().first < ms - 2000 || h.size() > LinkTable::kProbesMax) h.pop_front();
        std::vector<std::pair<double, uint64_t>> probes;
        std::pair<int64_t, double> top = h.back();
        for (const auto& [t, v] : h) {
          probes.emplace_back(v, uint64_t(ms - t));
          if (v > top.second) top = {t, v};
        }
        v1::LinkReport l = Link(from, to, top.second);
        l.set_sample_age_ms(uint64_t(ms - top.first));
        REQUIRE(links.Record(to, Probed(l, probes), ms).ok());
      };
      rec("p0", "w4", a.h0);
      rec("p1", "w4", a.h1);
      rec("w1", "p0", a.others_push);
      rec("w0", "p1", a.others_push);
      rec("w2", "p0", a.w2_push);
      rec("w2", "p1", a.w2_push);
      rec("w3", "p0", 1);
      rec("w3", "p1", 1);
      rec("p0", "w2", a.w2_pull);
      rec("p0", "w3", a.w3_pull);
      std::optional<v1::Policy> plan = loop.Tick(job, links, ms);
      whys.push_back(loop.last_decision());
      decisions = loop.decisions();
      if (!plan) continue;
      plans.push_back(*plan);
      job.plan_settled_ms = ms + 250;
      job.measure_window_ms = 1000;
    }
  };
  {
    // h1 drops at 8250, which shows at 9250, once its faster probes are
    // a window old. Hosts keep beginning to move (h0 reads 46 at 9250 and
    // again at 11750, h3 and h2 read faster pulls at 10000 and 10750), so
    // the map would be decided kMoveWaitWindows after the first move, at
    // 12250. But the one probe of h2's pushes at 11750 came as fast as
    // the others': the map waits for that, and once the probe is a window
    // old h2's pushes are slow again: decided at 13000, h2 not lifted.
    run(
        [](int64_t ms) {
          At a;
          if (ms >= 8250) a.h1 = 20;
          if (ms == 9250 || ms == 11750) a.h0 = 46;
          if (ms == 10000) a.w3_pull = 1.5;
          if (ms == 10750) a.w2_pull = 3.5;
          if (ms == 11750) a.w2_push = 3.5;
          return a;
        },
        13000);
    REQUIRE(plans.size() == 1);
    REQUIRE(plans[0].server_chunks(2) == 0);
    REQUIRE(plans[0].server_chunks(3) == 0);
    CHECK(whys[12250 / PolicyLoop::kLookMs].find(
              "p2's host pushed as fast as the others from 0.5 s ago: lifted once its pushes "
              "since do too, or after 1 s") != std::string::npos);
    CHECK(whys[12750 / PolicyLoop::kLookMs].find("waiting") != std::string::npos);
    // h2 read at its own 3.5: lifted to h0's 46 it would take chunks.
    CHECK(decisions.back().unix_ms() == 13000);
    CHECK(decisions.back().server_throughput_bytes_per_second(2) == 3.5);
    CHECK(decisions.back().why().find("a new map would shorten") != std::string::npos);
  }
  {
    // The others' pushes slow to 2.5 at 9500, h2's rise to 2.1: from
    // 10500, when the others' 3 are a window old, h2's keep up with them,
    // while its reading moved by under update_rate. The pushes probed
    // after that look show it too: lifted at the next, 10750, and moving
    // since 10500. Its pushes are not probed after 11750: lifted still, a
    // window on.
    run(
        [](int64_t ms) {
          At a;
          if (ms >= 9500) a.w2_push = 2.1, a.others_push = 2.5;
          if (ms > 11750) a.w2_push = 0;
          return a;
        },
        13000);
    CHECK(whys[10250 / PolicyLoop::kLookMs].find("within 0.1 of the plan's (largest change "
                                                 "0.05)") != std::string::npos);
    CHECK(whys[10500 / PolicyLoop::kLookMs].find(
              "p2's host pushed as fast as the others from 0 s ago") != std::string::npos);
    CHECK(whys[10750 / PolicyLoop::kLookMs].find("the last 0.25 s ago, waiting") !=
          std::string::npos);
    REQUIRE(decisions.size() >= 2);
    CHECK(decisions[decisions.size() - 2].unix_ms() == 11500);
    CHECK(decisions[decisions.size() - 2].server_throughput_bytes_per_second(2) == 40);
    CHECK(decisions[decisions.size() - 2].server_throughput_source(2).find(", lifted") !=
          std::string::npos);
    CHECK(decisions.back().unix_ms() == 12000);  // the period's
    CHECK(decisions.back().server_throughput_bytes_per_second(2) == 40);
    CHECK(whys.back().find("within 0.1 of the plan's") != std::string::npos);
  }
}

TEST_CASE("a map is made as soon as a period of readings allows it", "[policy]") {
  PolicyJob job = TwoHostJob("job-look", 20);
  job.update_time_ms = 4000;
  job.host_of["w2"] = "h2";  // measures h0 and h1 apart
  LinkTable links;
  PolicyLoop loop;
  CHECK(!loop.Tick(job, links, 0));
  CHECK(!loop.Due(job.job_id, 0, 100));
  CHECK(loop.Due(job.job_id, 0, PolicyLoop::kLookMs));
  REQUIRE(links.Record("p0", Link("w2", "p0", 1e6), 200).ok());
  REQUIRE(links.Record("w2", Link("p1", "w2", 3e6), 200).ok());
  CHECK(!loop.Tick(job, links, 250));
  CHECK(loop.last_decision().find("measured for 0.25 s") != std::string::npos);
  CHECK(loop.decisions().empty());  // between periods nothing is kept
  CHECK(!loop.Tick(job, links, 3900));
  CHECK(!loop.Tick(job, links, 4000));  // looked at 3900: the next look is at 4150
  std::optional<v1::Policy> plan = loop.Tick(job, links, 4150);
  REQUIRE(plan.has_value());
  CHECK(plan->server_chunks(0) == 5);
  job.plan_settled_ms = 4600;
  // Readings reach back a window of 1 s from here. h0 speeds up; its new
  // rate is probed at 8700, a period past the settling; the loop sees it
  // at the next look, and makes the map a window of readings after the
  // last host moved, not at the period's tick (12150).
  job.measure_window_ms = 1000;
  REQUIRE(links.Record("p0", Link("w2", "p0", 1e6), 8000).ok());
  REQUIRE(links.Record("w2", Link("p1", "w2", 3e6), 8000).ok());
  CHECK(!loop.Tick(job, links, 8500));
  CHECK(loop.last_decision().find("measured for 3.9 s") != std::string::npos);
  REQUIRE(links.Record("p0", Link("w2", "p0", 3e6), 8700).ok());
  CHECK(!loop.Tick(job, links, 8700));  // looked at 8500: not yet
  CHECK(!loop.Tick(job, links, 8750));
  CHECK(loop.last_decision().find("waiting for 1 s of readings since") != std::string::npos);
  // h1 drops too before the window is over: the wait starts again from
  // the last host to move. A drop shows once the window's readings are
  // all low, so it counts as begun half a window before it was found
  // (8750), and a window of readings since then ends at 9750, not 10250.
  REQUIRE(links.Record("p0", Link("w2", "p0", 3e6), 9200).ok());
  REQUIRE(links.Record("w2", Link("p1", "w2", 1e6), 9200).ok());
  CHECK(!loop.Tick(job, links, 9250));
  CHECK(loop.last_decision().find("the last 0.5 s ago") != std::string::npos);
  CHECK(!loop.Tick(job, links, 9500));
  plan = loop.Tick(job, links, 9750);
  REQUIRE(plan.has_value());
  CHECK(plan->issued_unix_ms() == 9750);
  CHECK(plan->server_chunks(0) == 15);
  CHECK(loop.decisions().back().unix_ms() == 9750);
  CHECK(loop.decisions().back().why().find("issued version 3") == 0);
}

// A host's reading is the best of a window's probes: one that misses
// its fast probes for a moment reads low, and back within as soon as the
// next one comes. That is one move that flickered, not a new one each
// time: the wait runs from when it first moved, until it has read back
// within for a whole window.
TEST_CASE("a host that flickers across update_rate does not restart the wait", "[policy]") {
  struct Run {
    PolicyJob job = TwoHostJob("job-flicker", 20);
    LinkTable links;
    PolicyLoop loop;
  };
  // Settled at 5 of 20 chunks on h0 (1e6) and 15 on h1 (3e6); h1 drops
  // at 9000 and is probed fast once more at 9200.
  auto run = [](Run* r) {
    r->job.update_time_ms = 4000;
    r->job.host_of["w2"] = "h2";
    REQUIRE(!r->loop.Tick(r->job, r->links, 0));
    REQUIRE(r->links.Record("p0", Link("w2", "p0", 1e6), 200).ok());
    REQUIRE(r->links.Record("w2", Link("p1", "w2", 3e6), 200).ok());
    std::optional<v1::Policy> plan = r->loop.Tick(r->job, r->links, 4150);
    REQUIRE(plan.has_value());
    REQUIRE(plan->server_chunks(0) == 5);
    r->job.plan_settled_ms = 4600;
    r->job.measure_window_ms = 1000;
    for (int64_t ms = 7500; ms <= 11000; ms += 500) {
      REQUIRE(r->links.Record("p0", Link("w2", "p0", 1e6), ms).ok());
    }
    REQUIRE(r->links.Record("w2", Link("p1", "w2", 3e6), 7900).ok());
    CHECK(!r->loop.Tick(r->job, r->links, 8750));
    CHECK(r->loop.last_decision().find("within 0.1") != std::string::npos);
    REQUIRE(r->links.Record("w2", Link("p1", "w2", 1e6), 8900).ok());
    CHECK(!r->loop.Tick(r->job, r->links, 9000));
    // A drop: begun half a window before it was found.
    CHECK(r->loop.last_decision().find("the last 0.5 s ago") != std::string::npos);
    REQUIRE(r->links.Record("w2", Link("p1", "w2", 3e6), 9200).ok());
    CHECK(!r->loop.Tick(r->job, r->links, 9250));
    CHECK(r->loop.last_decision().find("within 0.1") != std::string::npos);
  };
  {
    // Its node's estimate drops again once the fast probe is a window
    // old: a window after it first moved, the map is made.
    Run r;
    run(&r);
    for (int64_t ms : {9500, 9750, 10000}) CHECK(!r.loop.Tick(r.job, r.links, ms));
    REQUIRE(r.links.Record("w2", Link("p1", "w2", 1e6), 10200).ok());
    std::optional<v1::Policy> plan = r.loop.Tick(r.job, r.links, 10250);
    REQUIRE(plan.has_value());
    CHECK(plan->server_chunks(0) == 10);
  }
  {
    // Probed fast for a whole window, it stopped moving; a drop after
    // that is a new move, and waits a window of its own.
    Run r;
    run(&r);
    REQUIRE(r.links.Record("w2", Link("p1", "w2", 3e6), 10000).ok());
    for (int64_t ms : {9500, 9750, 10000, 10250, 10500, 10750}) {
      CHECK(!r.loop.Tick(r.job, r.links, ms));
    }
    REQUIRE(r.links.Record("w2", Link("p1", "w2", 1e6), 10900).ok());
    CHECK(!r.loop.Tick(r.job, r.links, 11000));
    CHECK(r.loop.last_decision().find("the last 0.5 s ago") != std::string::npos);
  }
}

// Shares of a loaded link swing by more than update_rate: some host may
// begin to move in every window. A map still comes kMoveWaitWindows
// windows after the first move still in force began.
TEST_CASE("hosts that keep beginning to move do not hold a map back", "[policy]") {
  PolicyJob job;
  job.job_id = "job-restless";
  job.load_policy = "elastic";
  job.update_time_ms = 4000;
  job.num_chunks = 24;
  for (int i = 0; i < 4; ++i) {
    job.servers.push_back("p" + std::to_string(i));
    job.host_of["p" + std::to_string(i)] = "h" + std::to_string(i);
  }
  job.host_of["w4"] = "h4";  // measures each psd's host apart
  // h3 drops from 3e6 to 1e6 at 8900; h0, h1 and h2 each read 1.5e6 in
  // one report every 2500 ms, in turn 750 ms apart: each such move ends
  // a window after it, and the next host's begins within a window of the
  // last, so a window since the last move never comes.
  auto rate = [](int host, int64_t ms) {
    if (host == 3) return ms < 8900 ? 3e6 : 1e6;
    const int64_t first = 9250 + 750 * host;
    return ms >= first && (ms - first) % 2500 == 0 ? 1.5e6 : 1e6;
  };
  const int64_t kMoveMs = 8500;  // h3's drop, seen at 9000: half a window before
  LinkTable links;
  PolicyLoop loop;
  std::optional<int64_t> at;  // when the map after h3's drop came
  for (int64_t ms = 0; ms <= 20000 && !at; ms += 250) {
    for (int h = 0; h < 4; ++h) {
      REQUIRE(links.Record("w4", Link("p" + std::to_string(h), "w4", rate(h, ms)), ms).ok());
    }
    std::optional<v1::Policy> plan = loop.Tick(job, links, ms);
    if (!plan) continue;
    if (plan->version() == 2) {
      REQUIRE(plan->server_chunks(3) == 12);
      job.plan_settled_ms = ms + 250;
      job.measure_window_ms = 1000;
      continue;
    }
    CHECK(plan->server_chunks(3) < 12);
    at = ms;
  }
  REQUIRE(at.has_value());
  CHECK(*at == kMoveMs + PolicyLoop::kMoveWaitWindows * 1000);
}

TEST_CASE("the predicted transfer is ADLB's slowest node", "[policy]") {
  // Eq. 9 with 4 nodes: t_i = (1 + 2 m_i) / S_i.
  CHECK(PredictedTransfer({1, 1, 1, 1}, {4, 4, 4, 1}) == Approx(1.5));
  CHECK(PredictedTransfer({3, 3, 2, 0}, {4, 4, 4, 1}) == Approx(1.0));
  CHECK(PredictedTransfer({8, 0, 0, 0}, {4, 4, 4, 1}) == Approx(1.0));
  CHECK(PredictedTransfer({}, {}) == 0);
  CHECK(PredictedTransfer({1, 1}, {1}) == 0);
}

// The testbed's job: 4 hosts with a psd and a worker each, the mlp in
// 58 chunks of 16 KiB, 64 KiB segments (bench/adaptive.sh).
PolicyJob PairedHostsJob() {
  PolicyJob job = FourHostJob();
  job.job_id = "job-1";
  job.load_policy = "adlb";
  job.update_time_ms = 1000;
  job.num_chunks = 58;
  job.probe_chunks = 4;
  job.chunk_bytes = 16384;
  job.segment_chunks = 4;
  return job;
}

std::vector<double> Mbit(const std::vector<double>& mbit) {
  std::vector<double> bps;
  for (double m : mbit) bps.push_back(m * 1e6 / 8);
  return bps;
}

// Both maps leave the 10 Mbit/s host nothing, and its worker's own push
// and pull bound their rounds: Eq. 9 calls them within 1%. A psd with 7
// chunks on the 25 Mbit/s host sends its last segment back only after
// that slowest push, into every worker's tail.
TEST_CASE("the round model weighs a light psd's last segment against its bytes", "[policy]") {
  const PolicyJob job = PairedHostsJob();
  const std::vector<double> rate = Mbit({50, 25, 10, 100});
  const std::vector<int64_t> light = {26, 7, 0, 25}, left_out = {29, 0, 0, 29};
  CHECK(PredictedTransfer(light, rate) == Approx(PredictedTransfer(left_out, rate)));
  CHECK(MapCost(light, rate) < 1.01 * MapCost(left_out, rate));
  const double with = ModelRound(job, light, rate), without = ModelRound(job, left_out, rate);
  CHECK(without > 58 * 16384 / rate[2]);  // the slow host's downlink: the model
  CHECK(with > 1.04 * without);
}

TEST_CASE("the round model covers psds and workers on hosts it can read", "[policy]") {
  PolicyJob job = PairedHostsJob();
  const std::vector<double> rate = Mbit({50, 25, 10, 100});
  const std::vector<int64_t> counts = {29, 0, 0, 29};
  CHECK(ModelRound(job, counts, rate) > 0);
  CHECK(ModelRound(job, {29, 29}, rate) == 0);  // sizes differ
  PolicyJob no_chunks = job;
  no_chunks.chunk_bytes = 0;
  CHECK(ModelRound(no_chunks, counts, rate) == 0);
  // A worker on a host with no psd: nothing reads that host's link.
  job.workers.push_back("w9");
  job.host_of["w9"] = "h9";
  CHECK(ModelRound(job, counts, rate) == 0);
  job.gone.insert("w9");  // gone from the job: the rest is covered
  CHECK(ModelRound(job, counts, rate) > 0);
  // Two psds on one host share its link: the same as one psd there
  // holding both shares, where its worker pushes and pulls either way.
  PolicyJob shared = PairedHostsJob();
  shared.servers.push_back("p4");
  shared.host_of["p4"] = shared.HostOf("p0");
  CHECK(ModelRound(shared, {15, 0, 0, 29, 14}, rate) ==
        Approx(ModelRound(shared, {29, 0, 0, 29, 0}, rate)).epsilon(0.05));
  // At most kRoundModelPairsMax server-worker pairs: 16 x 16, not 16 x 17.
  PolicyJob big;
  big.chunk_bytes = 16384;
  big.segment_chunks = 4;
  std::vector<int64_t> big_counts;
  std::vector<double> big_rate;
  for (int h = 0; h < 16; ++h) {
    const std::string n = std::to_string(h);
    big.servers.push_back("p" + n);
    big.workers.push_back("w" + n);
    big.host_of["p" + n] = big.host_of["w" + n] = "10.0.1." + n;
    big_counts.push_back(4);
    big_rate.push_back(100e6 / 8);
  }
  CHECK(ModelRound(big, big_counts, big_rate) > 0);
  big.workers.push_back("w16");
  big.host_of["w16"] = "10.0.1.0";
  CHECK(ModelRound(big, big_counts, big_rate) == 0);
  // One flow per psd without segments: slower than pipelined segments.
  PolicyJob whole = PairedHostsJob();
  whole.segment_chunks = 0;
  CHECK(ModelRound(whole, counts, rate) > ModelRound(PairedHostsJob(), counts, rate));
}

TEST_CASE("ADLB's map leaves out a light host where the round model says it costs", "[policy]") {
  const PolicyJob job = PairedHostsJob();
  auto adlb = [&](const std::vector<double>& rate) {
    absl::StatusOr<std::vector<double>> shares = PolicyShares("adlb", rate);
    REQUIRE(shares.ok());
    return WithProbes(ChunkCounts(*shares, job.num_chunks), ProbeChunks(job));
  };
  // A live run's readings after the first change: the fast hosts read
  // low (their peers hold them back), so the 25 Mbit/s host looks near
  // them and ADLB gives it 7 chunks.
  const std::vector<double> read = Mbit({36.3, 23.9, 11.1, 36.3});
  REQUIRE(adlb(read) == std::vector<int64_t>{26, 7, 0, 25});
  CHECK(FastestByRound(job, read, adlb(read)) == std::vector<int64_t>{29, 0, 0, 29});
  // At the true rates ADLB gives the 50 Mbit/s host 10 chunks: one psd
  // alone on the 100 Mbit/s host ends the round sooner.
  const std::vector<double> rate = Mbit({100, 50, 25, 10});
  REQUIRE(adlb(rate) == std::vector<int64_t>{48, 10, 0, 0});
  CHECK(FastestByRound(job, rate, adlb(rate)) == std::vector<int64_t>{58, 0, 0, 0});
  // Two equal hosts: neither is left out (each holds the most).
  const std::vector<double> two = Mbit({50, 50, 25, 10});
  REQUIRE(adlb(two) == std::vector<int64_t>{29, 29, 0, 0});
  CHECK(FastestByRound(job, two, adlb(two)) == adlb(two));
  // A host holding an even share or more is not a candidate, however the
  // model weighs it.
  const std::vector<int64_t> even = {15, 15, 14, 14};
  CHECK(FastestByRound(job, Mbit({10, 10, 10, 10}), even) == even);
  // Not covered by the round model: ADLB's map as it is.
  PolicyJob eq9 = job;
  eq9.chunk_bytes = 0;
  CHECK(FastestByRound(eq9, read, adlb(read)) == adlb(read));
}

TEST_CASE("the loop issues the map the round model calls fastest", "[policy]") {
  for (bool model : {true, false}) {
    PolicyJob job = PairedHostsJob();
    if (!model) job.chunk_bytes = 0;
    LinkTable links;
    PolicyLoop loop;
    CHECK(!loop.Tick(job, links, 0));
    const std::vector<double> read = Mbit({36.3, 23.9, 11.1, 36.3});
    // Each host read by a link into its psd from a node elsewhere (a link
    // between two of the job's hosts would count for both).
    for (int h = 0; h < 4; ++h) {
      const std::string p = "p" + std::to_string(h);
      REQUIRE(links.Record(p, Link("x" + std::to_string(h), p, read[size_t(h)]), 1500).ok());
    }
    std::optional<v1::Policy> plan = loop.Tick(job, links, 2000);
    INFO(loop.last_decision());
    REQUIRE(plan.has_value());
    CHECK(std::vector<int64_t>(plan->server_chunks().begin(), plan->server_chunks().end()) ==
          (model ? std::vector<int64_t>{29, 0, 0, 29} : std::vector<int64_t>{26, 7, 0, 25}));
  }
}

// Host 3 bounds every map at 1; a map that loads host 2 to that bound
// ties with one that leaves it at half under the max, not under MapCost.
TEST_CASE("maps that tie on the slowest host differ by the hosts near it", "[policy]") {
  const std::vector<double> rate = {4, 4, 2, 1};
  const std::vector<int64_t> near = {2, 2, 4, 0};  // t = .375, .375, 1, 1
  const std::vector<int64_t> room = {4, 4, 0, 0};  // t = .5, .5, .5, 1
  CHECK(PredictedTransfer(near, rate) == Approx(PredictedTransfer(room, rate)));
  CHECK(MapCost(near, rate) == Approx(std::pow(2 + 2 * std::pow(0.375, 4), 0.25)));
  CHECK(MapCost(room, rate) == Approx(std::pow(1 + 3 * std::pow(0.5, 4), 0.25)));
  CHECK(MapCost(room, rate) * 1.1 < MapCost(near, rate));  // over update_rate: it moves
  CHECK(MapCost(near, rate) >= PredictedTransfer(near, rate));
  CHECK(MapCost({}, {}) == 0);
  CHECK(MapCost({1, 1}, {1}) == 0);
}

TEST_CASE("elastic and Algorithm 1 shares", "[policy]") {
  auto elastic = PolicyShares("elastic", {3, 1});
  REQUIRE(elastic.ok());
  CHECK((*elastic)[0] == Approx(0.75));
  auto alg1 = PolicyShares("adlb-alg1", {10, 5, 2.5, 1});
  REQUIRE(alg1.ok());
  CHECK((*alg1)[0] > (*alg1)[3]);
  CHECK(!PolicyShares("average", {1, 1}).ok());
}

TEST_CASE("WLBS batches follow the speeds, capped, summing to the global batch", "[policy]") {
  CHECK(*WlbsBatches({1, 1, 1, 0.5}, 64, 256) == std::vector<uint32_t>{73, 73, 73, 37});
  CHECK(*WlbsBatches({1, 1}, 32, 128) == std::vector<uint32_t>{32, 32});
  // One worker 10x faster: capped at batch_max, the rest split again.
  CHECK(*WlbsBatches({10, 1, 1}, 10, 20) == std::vector<uint32_t>{20, 5, 5});
  // Every worker gets at least one sample.
  CHECK(*WlbsBatches({1000, 1}, 4, 8) == std::vector<uint32_t>{7, 1});
  CHECK(!WlbsBatches({}, 4, 8).ok());
  CHECK(!WlbsBatches({1, 1}, 4, 3).ok());
}

TEST_CASE("the policy loop rebalances batches when compute times diverge, not for noise",
          "[policy]") {
  PolicyJob job;
  job.job_id = "job-w";
  job.load_policy = "average";  // batches only: no links needed
  job.batch_policy = "wlbs";
  job.batch_size = 64;
  job.batch_max = 256;
  job.update_time_ms = 1000;
  job.update_rate = 0.1;
  job.num_chunks = 8;
  job.servers = {"p0"};
  job.workers = {"w0", "w1", "w2", "w3"};
  LinkTable links;
  PolicyLoop loop;
  CHECK(!loop.Tick(job, links, 0).has_value());  // version 1: equal batches
  REQUIRE(loop.current().worker_batches_size() == 4);
  CHECK(loop.current().worker_batches(3).batch_size() == 64);
  // A period in which w3 computed at half the others' speed.
  double secs = 0;
  auto period = [&](const std::vector<double>& speed, const std::vector<uint32_t>& batch) {
    secs += 1;
    for (size_t k = 0; k < 4; ++k) {
      if (speed[k] <= 0) continue;  // gone: computes nothing
      WorkerWork& w = job.work[job.workers[k]];
      w.samples += int64_t(batch[k]) * 10;
      w.compute_s += batch[k] * 10 / speed[k];
    }
  };
  period({640, 640, 640, 320}, {64, 64, 64, 64});
  std::optional<v1::Policy> p = loop.Tick(job, links, 1000);
  REQUIRE(p.has_value());
  CHECK(p->version() == 2);
  std::vector<uint32_t> got;
  for (const auto& b : p->worker_batches()) got.push_back(b.batch_size());
  CHECK(got == std::vector<uint32_t>{73, 73, 73, 37});
  CHECK(p->chunk_server_size() == 8);  // the chunk map stays the even split
  CHECK(loop.last_decision().find("batches rebalanced") != std::string::npos);
  // The slowest iteration: 64/320 s before, 37/320 s after: 0.42 shorter.
  // Balanced now, with a little noise: kept.
  period({650, 640, 630, 322}, got);
  CHECK(!loop.Tick(job, links, 2000).has_value());
  CHECK(loop.last_decision().find("batches kept") != std::string::npos);
  // Not due before the next period.
  CHECK(!loop.Tick(job, links, 2500).has_value());
  // A worker that computed nothing keeps the split.
  job.work["w2"].compute_s += 0;
  for (const char* w : {"w0", "w1", "w3"}) job.work[w].samples += 100;
  CHECK(!loop.Tick(job, links, 3000).has_value());
  CHECK(loop.last_decision().find("computed nothing") != std::string::npos);
  // w1 dies: its share goes to the others at once, one sample left to it.
  job.gone = {"w1"};
  period({640, 640, 640, 320}, got);
  p = loop.Tick(job, links, 4000);
  REQUIRE(p.has_value());
  got.clear();
  for (const auto& b : p->worker_batches()) got.push_back(b.batch_size());
  CHECK(got[1] == 1);
  CHECK(got[0] + got[2] + got[3] == 255);
  CHECK(got[3] * 2 == Approx(got[0]).margin(2));
  CHECK(loop.last_decision().find("gone") != std::string::npos);
  // Then kept: nothing more to move.
  period({640, 0, 640, 320}, got);
  CHECK(!loop.Tick(job, links, 5000).has_value());
}

}  // namespace
}  // namespace hetps
