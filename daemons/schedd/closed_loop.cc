#include "daemons/schedd/closed_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "absl/status/statusor.h"
#include "daemons/schedd/policy_loop.h"
#include "lib/sim/flow_network.h"
#include "lib/sim/sharded_round.h"

namespace hetps {
namespace {

constexpr int64_t kBaseMs = 1'800'000'000'000;  // simulated unix time at t = 0
constexpr double kModelBytes = 235146 * 4.0;    // mlp
constexpr int64_t kChunks = 58;                 // chunk_size 4096 floats
constexpr double kChunkBytes = 4096 * 4.0;
constexpr double kComputeS = 0.010;
constexpr double kSegmentBytes = 65536;  // segment_bytes and probe_bytes
constexpr double kBinS = 0.050;
constexpr double kLookS = 0.250;

// One directed node-to-node link as the receiving node's meter keeps it.
struct Meter {
  std::deque<std::pair<double, double>> samples;  // (end s, bytes/s)
  uint64_t bytes = 0;
};

class Cluster {
 public:
  explicit Cluster(const PermutationOptions& o) : o_(o), rng_(o.seed) {
    hosts_ = int(o.rates_mbit.size());
    std::vector<double> cap;  // link 2h: host h's uplink, 2h + 1 its downlink
    for (int h = 0; h < 2 * hosts_; ++h) cap.push_back(Bps(o.rates_mbit[h / 2]));
    net_ = std::make_unique<sim::FlowNetwork>(cap);
    job_.job_id = "sim";
    job_.load_policy = "adlb";
    job_.batch_size = job_.batch_max = 64;
    job_.update_time_ms = o.update_time_s * 1000;
    job_.measure_window_ms =
        std::min<int64_t>(job_.update_time_ms, std::max<int64_t>(2000, job_.update_time_ms / 2));
    job_.num_chunks = kChunks;
    job_.probe_chunks = int64_t(std::ceil(kSegmentBytes / kChunkBytes));  // as schedd
    job_.chunk_bytes = kChunkBytes;
    job_.segment_chunks = int64_t(kSegmentBytes / kChunkBytes);
    layout_.hosts = hosts_;
    for (int h = 0; h < hosts_; ++h) {
      job_.servers.push_back("psd-" + std::to_string(h));
      job_.workers.push_back("worker-" + std::to_string(h));
      job_.host_of[job_.servers.back()] = job_.host_of[job_.workers.back()] =
          "10.0.0." + std::to_string(h);
      layout_.server_host.push_back(h);
      layout_.worker_host.push_back(h);
    }
    counts_.assign(hosts_, 0);
    for (int64_t c = 0; c < kChunks; ++c) ++counts_[c * hosts_ / kChunks];
  }

  static double Bps(double mbit) { return mbit * 1e6 / 8; }
  int64_t UnixMs(double t) const { return kBaseMs + int64_t(std::llround(t * 1000)); }

  void SetRates(const std::vector<double>& mbit) {
    for (int h = 0; h < hosts_; ++h) {
      net_->SetCapacity(2 * h, Bps(mbit[h]));
      net_->SetCapacity(2 * h + 1, Bps(mbit[h]));
    }
  }

  // One round under the map in force; returns its duration.
  double Round() {
    const double start = net_->now();
    if (pending_.has_value()) {
      counts_ = *pending_;
      pending_.reset();
      settle_version_ = version_;
    }
    Advance(start + kComputeS);
    std::vector<double> share;
    for (int64_t c : counts_) share.push_back(kModelBytes * double(c) / double(kChunks));
    round_.emplace(net_.get(), layout_, share, kSegmentBytes);
    round_->Start();
    while (!round_->done()) {
      for (int64_t tag : Advance(net_->NextCompletion())) round_->Finish(tag);
    }
    if (settle_version_ != 0 && job_.plan_settled_ms == 0) {
      job_.plan_settled_ms = UnixMs(net_->now());
    } else if (settle_version_ != 0 && job_.plan_round_ms == 0) {
      job_.plan_round_ms = (net_->now() - start) * 1000;  // the map's first of its own
    }
    return net_->now() - start;
  }

  // Moves time to t (at most the next completion), ticking and binning on
  // the way; returns the tags of the flows that finished.
  std::vector<int64_t> Advance(double t) {
    std::vector<int64_t> finished;
    while (true) {
      const double next = std::min({t, next_bin_, next_look_});
      std::vector<int64_t> done;
      net_->AdvanceTo(next, &done);
      for (int64_t tag : done) Probe(round_->flow(tag));
      finished.insert(finished.end(), done.begin(), done.end());
      if (next >= next_bin_) Bin();
      if (next >= next_look_) Look();
      if (next >= t) return finished;
    }
  }

  void SetCounts(std::vector<int64_t> counts) { counts_ = std::move(counts); }
  uint64_t version() const { return version_; }
  double now() const { return net_->now(); }

 private:
  void Probe(const sim::ShardedRound::Flow& f) {
    const double end = net_->now();
    // The meter ignores spans below probe_bytes (64 KB): a segment's tail.
    if (f.bytes < kSegmentBytes) return;
    double rate = f.bytes / std::max(1e-9, end - f.start_s);
    if (o_.noise > 0)
      rate *= std::uniform_real_distribution<double>(1 - o_.noise, 1 + o_.noise)(rng_);
    const std::string& worker = job_.workers[size_t(f.worker)];
    const std::string& server = job_.servers[size_t(f.server)];
    const std::string& from = f.push ? worker : server;
    const std::string& to = f.push ? server : worker;
    Meter& m = meters_[{from, to}];
    m.samples.emplace_back(end, rate);
    m.bytes += uint64_t(f.bytes);
    while (m.samples.size() > 4) m.samples.pop_front();
    v1::LinkReport l;
    double best = 0, best_end = end;
    for (const auto& [e, r] : m.samples) {
      if (e < end - job_.window_ms() / 1000.0) continue;
      if (r > best) best = r, best_end = e;
      v1::LinkProbe* p = l.add_probes();
      p->set_bytes_per_second(r);
      p->set_age_ms(uint64_t(std::llround((end - e) * 1000)));
    }
    l.set_from_node_id(from);
    l.set_to_node_id(to);
    l.set_throughput_bytes_per_second(best);
    l.set_rtt_ms(20);
    l.set_bytes_observed(m.bytes);
    l.set_flow_bytes(uint64_t(f.bytes));
    l.set_sample_age_ms(uint64_t(std::llround((end - best_end) * 1000)));
    (void)links_.Record(to, l, UnixMs(end));
  }

  // What each host's link delivered in the bin that ends now, as its
  // worker's node traffic (schedd adds a host's nodes up anyway).
  void Bin() {
    const std::vector<double>& carried = net_->carried_bytes();
    last_carried_.resize(carried.size(), 0);
    for (int h = 0; h < hosts_; ++h) {
      const double in = carried[2 * h + 1] - last_carried_[2 * h + 1];
      v1::NodeTraffic t;
      t.set_first_bin_unix_ms(UnixMs(next_bin_ - kBinS));
      t.set_bin_ms(uint32_t(kBinS * 1000));
      t.add_in_bytes(uint64_t(std::max(0.0, in)));
      (void)links_.RecordTraffic(job_.workers[h], t, UnixMs(next_bin_));
    }
    last_carried_ = carried;
    next_bin_ += kBinS;
  }

  void Look() {
    std::optional<v1::Policy> plan = loop_.Tick(job_, links_, UnixMs(next_look_));
    if (plan.has_value()) {
      std::vector<int64_t> c(hosts_, 0);
      for (uint32_t s : plan->chunk_server()) ++c[s];
      pending_ = c;
      version_ = plan->version();
      job_.plan_settled_ms = 0;
      job_.plan_round_ms = 0;
      settle_version_ = 0;
      if (o_.verbose) {
        std::printf("  %7.2f s  version %llu: chunks", net_->now(), (unsigned long long)version_);
        for (int64_t n : c) std::printf(" %lld", (long long)n);
        std::printf("  read");
        for (double r : plan->server_throughput_bytes_per_second()) {
          std::printf(" %.1f", r * 8 / 1e6);
        }
        std::printf(" Mbit/s\n");
      }
    }
    next_look_ += kLookS;
  }

  PermutationOptions o_;
  std::mt19937 rng_;
  int hosts_ = 0;
  std::unique_ptr<sim::FlowNetwork> net_;
  PolicyJob job_;
  PolicyLoop loop_;
  LinkTable links_;
  std::map<std::pair<std::string, std::string>, Meter> meters_;
  sim::ShardedLayout layout_;
  std::optional<sim::ShardedRound> round_;  // the round under way
  std::vector<int64_t> counts_;
  std::optional<std::vector<int64_t>> pending_;
  uint64_t version_ = 1;
  uint64_t settle_version_ = 0;
  std::vector<double> last_carried_;
  double next_bin_ = kBinS;
  double next_look_ = kLookS;
};

// The round time of ADLB's map for the true rates (its third round, no
// plans): what a recovered cluster reaches.
double BestRound(const PermutationOptions& o, const std::vector<double>& mbit) {
  std::vector<double> bps;
  for (double r : mbit) bps.push_back(Cluster::Bps(r));
  absl::StatusOr<std::vector<double>> shares = PolicyShares("adlb", bps);
  if (!shares.ok()) return 0;
  PermutationOptions fixed = o;
  fixed.rates_mbit = mbit;
  fixed.update_time_s = 1'000'000;  // the loop never decides
  fixed.noise = 0;
  Cluster c(fixed);
  c.SetCounts(ChunkCounts(*shares, kChunks));
  double t = 0;
  for (int k = 0; k < 3; ++k) t = c.Round();
  return t;
}

}  // namespace

std::vector<ChangeResult> RunPermutation(const PermutationOptions& o, std::string* error) {
  const size_t hosts = o.rates_mbit.size();
  if (hosts < 2 || hosts > 64 || !(o.period_s >= 10 && o.period_s <= 3600) || o.changes < 1 ||
      o.changes > 100 || o.update_time_s < 1 || o.update_time_s > 600 || !(o.noise >= 0) ||
      o.noise >= 1 || std::any_of(o.rates_mbit.begin(), o.rates_mbit.end(), [](double r) {
        return !(r > 0 && r <= 1e5);
      })) {
    *error =
        "2-64 rates in (0, 1e5] Mbit/s, period_s 10-3600, changes 1-100, update_time_s 1-600, "
        "noise in [0, 1)";
    return {};
  }
  struct Round {
    double start, end;
    uint64_t version;
  };
  std::vector<Round> rounds;
  std::vector<ChangeResult> out;
  Cluster c(o);
  for (int k = 0; k <= o.changes; ++k) {
    std::vector<double> rates(hosts);
    for (size_t h = 0; h < hosts; ++h) rates[h] = o.rates_mbit[(h + size_t(k)) % hosts];
    const double at = k * o.period_s;
    if (k > 0) c.SetRates(rates);
    const size_t first = rounds.size();
    while (c.now() < at + o.period_s) {
      const double start = c.now();
      c.Round();
      rounds.push_back({start, c.now(), c.version()});
    }
    if (k == 0) continue;  // the start: no change to recover from
    ChangeResult r;
    r.rates_mbit = rates;
    r.best_s = BestRound(o, rates);
    std::vector<double> late;  // the period's second half
    for (size_t q = first; q < rounds.size(); ++q) {
      if (rounds[q].start >= at + o.period_s / 2) late.push_back(rounds[q].end - rounds[q].start);
    }
    std::sort(late.begin(), late.end());
    r.settled_s = late.empty() ? 0 : late[late.size() / 2];
    for (size_t q = first; q + 2 < rounds.size(); ++q) {
      bool in = true;
      for (size_t i = q; i < q + 3; ++i)
        in = in && rounds[i].end - rounds[i].start <= 1.1 * r.best_s;
      if (in) {
        r.recovered_s = rounds[q].end - at;
        break;
      }
    }
    r.goal_s = 2.0 * double(o.update_time_s) + r.best_s;
    r.met = r.recovered_s >= 0 && r.recovered_s <= r.goal_s;
    uint64_t last = rounds[first].version;
    for (size_t q = first; q < rounds.size(); ++q) {
      if (rounds[q].version != last) r.versions.push_back(rounds[q].version);
      last = rounds[q].version;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace hetps
