#include "daemons/schedd/policy_loop.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "lib/policy/adlb.h"
#include "lib/policy/policy_value.h"
#include "lib/policy/wlbs.h"
#include "lib/sim/sharded_round.h"

namespace hetps {

absl::Status LinkTable::Record(const std::string& reporter, const v1::LinkReport& link,
                               int64_t now_ms) {
  if (link.to_node_id() != reporter) {
    return absl::InvalidArgumentError(absl::StrCat("a node reports links into itself; ", reporter,
                                                   " sent one into ", link.to_node_id()));
  }
  if (link.from_node_id().empty() || link.from_node_id().size() > 256 ||
      link.from_node_id() == reporter) {
    return absl::InvalidArgumentError("link: from_node_id empty, too long, or the reporter");
  }
  // A probe (the estimate is one): a rate some link can carry, probed
  // within the longest update period.
  auto probe_ok = [](double bytes_per_s, uint64_t age_ms) {
    return std::isfinite(bytes_per_s) && bytes_per_s > 0 && bytes_per_s <= 1e13 &&
           age_ms <= uint64_t(kSampleAgeMaxMs);
  };
  if (!probe_ok(link.throughput_bytes_per_second(), link.sample_age_ms()) ||
      !std::isfinite(link.rtt_ms()) || link.rtt_ms() < 0 || !std::isfinite(link.loss_fraction()) ||
      link.loss_fraction() < 0 || link.loss_fraction() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("link ", link.from_node_id(), " -> ", reporter, ": a value out of range"));
  }
  if (link.probes_size() > kProbesMax) {
    return absl::InvalidArgumentError(absl::StrCat("link ", link.from_node_id(), " -> ", reporter,
                                                   ": ", link.probes_size(), " probes; at most ",
                                                   kProbesMax));
  }
  for (const v1::LinkProbe& p : link.probes()) {
    if (!probe_ok(p.bytes_per_second(), p.age_ms())) {
      return absl::InvalidArgumentError(
          absl::StrCat("link ", link.from_node_id(), " -> ", reporter, ": a probe out of range"));
    }
  }
  const auto key = std::make_pair(link.from_node_id(), reporter);
  if (links_.size() >= kLinksMax && links_.find(key) == links_.end()) {
    auto oldest = std::min_element(links_.begin(), links_.end(), [](const auto& a, const auto& b) {
      return a.second.measured_unix_ms() < b.second.measured_unix_ms();
    });
    links_.erase(oldest);
  }
  v1::LinkReport& l = links_[key];
  l = link;
  l.set_measured_unix_ms(now_ms);
  return absl::OkStatus();
}

double FastestSince(const v1::LinkReport& link, int64_t from_ms) {
  auto since = [&](uint64_t age_ms) {
    return link.measured_unix_ms() - int64_t(age_ms) >= from_ms;
  };
  // The estimate is one of its probes (of the newest kProbesMax, or older
  // where a node keeps more).
  double fastest = since(link.sample_age_ms()) ? link.throughput_bytes_per_second() : 0;
  for (const v1::LinkProbe& p : link.probes()) {
    if (since(p.age_ms())) fastest = std::max(fastest, p.bytes_per_second());
  }
  return fastest;
}

absl::Status LinkTable::RecordTraffic(const std::string& reporter, const v1::NodeTraffic& t,
                                      int64_t now_ms) {
  if (t.bin_ms() != kTrafficBinMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("traffic of ", reporter, ": bin_ms ", t.bin_ms(), ", not ", kTrafficBinMs));
  }
  if (t.in_bytes_size() > kTrafficBinsMax) {
    return absl::InvalidArgumentError(absl::StrCat("traffic of ", reporter, ": ", t.in_bytes_size(),
                                                   " bins; at most ", kTrafficBinsMax));
  }
  // Within a minute of schedd's clock either way (a node's clock may be
  // off by that much and still be useful: only one host's nodes are ever
  // added together, and they share a clock).
  const int64_t span = int64_t(t.in_bytes_size()) * kTrafficBinMs;
  if (t.first_bin_unix_ms() < now_ms - kTrafficKeepMs - span ||
      t.first_bin_unix_ms() > now_ms + kTrafficKeepMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "traffic of ", reporter, ": first bin at ", t.first_bin_unix_ms(), " ms, more than ",
        kTrafficKeepMs / 1000, " s from schedd's clock (", now_ms, " ms)"));
  }
  for (uint64_t b : t.in_bytes()) {
    // 16 Tbit/s in one bin: no access link carries that.
    if (b > uint64_t(1e11)) {
      return absl::InvalidArgumentError(
          absl::StrCat("traffic of ", reporter, ": a bin of ", b, " bytes"));
    }
  }
  if (traffic_.size() >= kLinksMax && traffic_.find(reporter) == traffic_.end()) {
    return absl::ResourceExhaustedError(absl::StrCat("traffic of ", kLinksMax, " nodes held"));
  }
  std::map<int64_t, double>& bins = traffic_[reporter];
  // The node's grid snapped to schedd's: the nodes of one host share one
  // clock, so they snap alike.
  const int64_t first = (t.first_bin_unix_ms() + kTrafficBinMs / 2) / kTrafficBinMs * kTrafficBinMs;
  for (int i = 0; i < t.in_bytes_size(); ++i) bins[first + i * kTrafficBinMs] = t.in_bytes(i);
  const int64_t oldest = std::min(now_ms, first) - kTrafficKeepMs;
  bins.erase(bins.begin(), bins.lower_bound(oldest));
  // Nodes that stopped reporting go once their last bin is that old.
  for (auto it = traffic_.begin(); it != traffic_.end();) {
    if (it->second.empty() || it->second.rbegin()->first < now_ms - kTrafficKeepMs) {
      it = traffic_.erase(it);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

double LinkTable::PeakRate(const std::vector<std::string>& nodes, int64_t from_ms,
                           int64_t to_ms) const {
  const int64_t first = (from_ms + kTrafficBinMs - 1) / kTrafficBinMs * kTrafficBinMs;
  const int64_t window = kHostWindowMs / kTrafficBinMs;
  if (to_ms - first < kHostWindowMs) return 0;
  std::vector<double> sum(size_t((to_ms - first) / kTrafficBinMs), 0.0);
  for (const std::string& n : nodes) {
    auto it = traffic_.find(n);
    if (it == traffic_.end()) continue;
    for (auto b = it->second.lower_bound(first); b != it->second.end(); ++b) {
      const size_t i = size_t((b->first - first) / kTrafficBinMs);
      if (i >= sum.size()) break;
      sum[i] += b->second;
    }
  }
  double best = 0, run = 0;
  for (size_t i = 0; i < sum.size(); ++i) {
    run += sum[i];
    if (i >= size_t(window)) run -= sum[i - window];
    if (i + 1 >= size_t(window)) best = std::max(best, run);
  }
  return best * 1000.0 / double(kHostWindowMs);
}

std::vector<v1::LinkReport> LinkTable::All() const {
  std::vector<v1::LinkReport> out;
  out.reserve(links_.size());
  for (const auto& [key, l] : links_) out.push_back(l);
  return out;
}

const v1::LinkReport* LinkTable::Find(const std::string& from, const std::string& to) const {
  auto it = links_.find({from, to});
  return it == links_.end() ? nullptr : &it->second;
}

std::vector<int64_t> ChunkCounts(const std::vector<double>& shares, int64_t chunks) {
  const double total = std::accumulate(shares.begin(), shares.end(), 0.0);
  std::vector<int64_t> counts(shares.size(), 0);
  if (shares.empty() || !(total > 0)) return counts;
  std::vector<std::pair<double, size_t>> rest;
  int64_t given = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    const double exact = std::max(0.0, shares[i]) / total * double(chunks);
    counts[i] = static_cast<int64_t>(std::floor(exact));
    given += counts[i];
    rest.push_back({exact - double(counts[i]), i});
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < chunks && k < rest.size(); ++k, ++given) ++counts[rest[k].second];
  return counts;
}

std::vector<int64_t> WithProbes(std::vector<int64_t> counts, const std::vector<int64_t>& probe) {
  int64_t total = 0, probes = 0;
  for (int64_t c : counts) total += c;
  for (int64_t p : probe) probes += std::max<int64_t>(p, 0);
  if (probe.size() != counts.size() || probes == 0 || total < probes) return counts;
  for (size_t i = 0; i < counts.size(); ++i) {
    while (counts[i] < probe[i]) {
      // From the server with the most (the first of them).
      *std::max_element(counts.begin(), counts.end()) -= 1;
      ++counts[i];
    }
  }
  return counts;
}

std::vector<int64_t> ProbeChunks(const PolicyJob& job) {
  std::set<std::string> measured;  // hosts with a worker still in the job
  for (const std::string& w : job.workers) {
    if (!job.gone.count(w)) measured.insert(job.HostOf(w));
  }
  std::vector<int64_t> probe(job.servers.size(), job.probe_chunks);
  for (size_t s = 0; s < job.servers.size(); ++s) {
    if (measured.count(job.HostOf(job.servers[s]))) probe[s] = 0;
  }
  return probe;
}

absl::StatusOr<std::vector<double>> PolicyShares(const std::string& load_policy,
                                                 const std::vector<double>& throughput_Bps) {
  // The model as one unit: only the ratios of the shares matter.
  absl::StatusOr<policy::LoadDistribution> d;
  if (load_policy == "elastic") {
    d = policy::LoadElastic(1.0, throughput_Bps);
  } else if (load_policy == "adlb-alg1") {
    // The paper's 1 s similarity threshold, relative to the even split's
    // round time here since the model is one unit.
    absl::StatusOr<policy::LoadDistribution> even = policy::LoadAverage(1.0, throughput_Bps);
    if (!even.ok()) return even.status();
    d = policy::SolveLoadAlgorithm1(1.0, throughput_Bps, 0.01 * even->max_time_s, 10'000);
  } else if (load_policy == "adlb") {
    d = policy::SolveLoadExact(1.0, throughput_Bps);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("load_policy ", load_policy, " has no shares"));
  }
  if (!d.ok()) return d.status();
  return d->share_bytes;
}

namespace {
// ADLB's Eq. 9 times of servers holding `counts` chunks (taken as
// equal-sized) at these throughputs; none when there are no chunks or
// the sizes differ.
std::optional<policy::LoadDistribution> CountsLoad(const std::vector<int64_t>& counts,
                                                   const std::vector<double>& rate) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if (total <= 0 || counts.size() != rate.size()) return std::nullopt;
  policy::LoadDistribution d;
  for (int64_t c : counts) d.share_bytes.push_back(double(c) / double(total));
  policy::EvaluateLoad(1.0, rate, &d);
  return d;
}
}  // namespace

double PredictedTransfer(const std::vector<int64_t>& counts, const std::vector<double>& rate) {
  const std::optional<policy::LoadDistribution> d = CountsLoad(counts, rate);
  return d ? d->max_time_s : 0;
}

double MapCost(const std::vector<int64_t>& counts, const std::vector<double>& rate) {
  const std::optional<policy::LoadDistribution> d = CountsLoad(counts, rate);
  if (!d || d->max_time_s <= 0) return 0;
  double sum = 0;
  for (double t : d->time_s) {
    const double x = t / d->max_time_s;  // <= 1: no overflow
    sum += x * x * x * x;
  }
  return d->max_time_s * std::sqrt(std::sqrt(sum));
}

double ModelRound(const PolicyJob& job, const std::vector<int64_t>& counts,
                  const std::vector<double>& rate) {
  const size_t servers = job.servers.size();
  if (!(job.chunk_bytes > 0) || servers == 0 || servers > kRoundModelPairsMax ||
      counts.size() != servers || rate.size() != servers) {
    return 0;
  }
  sim::ShardedLayout layout;
  std::map<std::string, int> host_index;
  std::vector<double> host_Bps;
  double total = 0;
  std::vector<double> share;
  for (size_t s = 0; s < servers; ++s) {
    auto [it, added] = host_index.emplace(job.HostOf(job.servers[s]), layout.hosts);
    if (added) {
      ++layout.hosts;
      host_Bps.push_back(rate[s]);
    }
    layout.server_host.push_back(it->second);
    share.push_back(double(std::max<int64_t>(counts[s], 0)) * job.chunk_bytes);
    total += share.back();
  }
  for (const std::string& w : job.workers) {
    if (job.gone.count(w)) continue;
    auto it = host_index.find(job.HostOf(w));
    if (it == host_index.end()) return 0;
    layout.worker_host.push_back(it->second);
  }
  if (servers * layout.worker_host.size() > kRoundModelPairsMax) return 0;
  const double segment =
      job.segment_chunks > 0 ? double(job.segment_chunks) * job.chunk_bytes : total;
  return sim::ShardedRoundTime(layout, host_Bps, share, segment);
}

std::vector<int64_t> FastestByRound(const PolicyJob& job, const std::vector<double>& rate,
                                    const std::vector<int64_t>& counts) {
  const size_t servers = rate.size();
  double best_s = ModelRound(job, counts, rate);
  if (best_s <= 0) return counts;
  const std::vector<int64_t> probe = ProbeChunks(job);
  std::vector<int64_t> best = counts;
  std::vector<bool> out(servers, false);
  // A host left out gains the others nothing when ADLB's map for them is
  // the same map; a model within this fraction is no better (float noise).
  constexpr double kBetter = 1e-3;
  while (true) {
    std::optional<size_t> drop;
    std::vector<int64_t> drop_counts;
    double drop_s = best_s * (1 - kBetter);
    for (size_t s = 0; s < servers; ++s) {
      // Only a host lighter than an even share: the model is trusted to
      // weigh a light psd's tail against its bytes, not to restructure
      // the map (every psd's traffic is also what measures its host).
      if (out[s] || best[s] <= probe[s] || best[s] * int64_t(servers) >= job.num_chunks) continue;
      std::vector<double> kept;
      for (size_t k = 0; k < servers; ++k) {
        if (!out[k] && k != s) kept.push_back(rate[k]);
      }
      if (kept.empty()) continue;
      absl::StatusOr<std::vector<double>> part = PolicyShares("adlb", kept);
      if (!part.ok()) continue;
      std::vector<double> shares(servers, 0);
      for (size_t k = 0, i = 0; k < servers; ++k) {
        if (!out[k] && k != s) shares[k] = (*part)[i++];
      }
      const std::vector<int64_t> c = WithProbes(ChunkCounts(shares, job.num_chunks), probe);
      const double t = ModelRound(job, c, rate);
      if (t > 0 && t < drop_s) {
        drop = s;
        drop_s = t;
        drop_counts = c;
      }
    }
    if (!drop) return best;
    out[*drop] = true;
    best = std::move(drop_counts);
    best_s = drop_s;
  }
}

absl::StatusOr<std::vector<uint32_t>> WlbsBatches(const std::vector<double>& speed,
                                                  uint32_t batch_size, uint32_t batch_max) {
  const size_t n = speed.size();
  if (n == 0 || batch_size == 0 || batch_max < batch_size) {
    return absl::InvalidArgumentError("wlbs: no workers, or a batch_max below batch_size");
  }
  std::vector<uint32_t> out(n, 0);
  std::vector<bool> capped(n, false);
  int64_t left = int64_t(n) * batch_size;
  // Proportional shares; a worker over batch_max gets batch_max and the
  // rest is split again over the others (at most n rounds).
  for (size_t round = 0; round < n; ++round) {
    std::vector<size_t> open;
    std::vector<double> weights;
    for (size_t k = 0; k < n; ++k) {
      if (!capped[k]) {
        open.push_back(k);
        weights.push_back(speed[k]);
      }
    }
    absl::StatusOr<std::vector<int64_t>> split = policy::SplitProportional(left, weights, 1);
    if (!split.ok()) return split.status();
    bool over = false;
    for (size_t i = 0; i < open.size(); ++i) {
      if ((*split)[i] > int64_t(batch_max)) {
        capped[open[i]] = true;
        out[open[i]] = batch_max;
        left -= batch_max;
        over = true;
      }
    }
    if (over) continue;
    for (size_t i = 0; i < open.size(); ++i) out[open[i]] = uint32_t((*split)[i]);
    return out;
  }
  return absl::InvalidArgumentError("wlbs: batch_max too small for the global batch");
}

std::optional<v1::Policy> PolicyLoop::Tick(const PolicyJob& job, const LinkTable& links,
                                           int64_t now_ms) {
  const int64_t chunks = job.num_chunks;
  const size_t servers = job.servers.size();
  if (job.job_id != job_id_ || job.recovery_epoch != epoch_) {
    // A new job, or a recovery: every psd starts again from the even split.
    // A recovery keeps the history: the epoch's plan in force goes in first.
    if (job.job_id != job_id_) {
      history_.clear();
      decisions_.clear();
    } else if (current_.version() > 0) {
      history_.push_back(current_);
      if (history_.size() > kHistoryMax) history_.erase(history_.begin());
    }
    job_id_ = job.job_id;
    servers_ = job.servers;
    epoch_ = job.recovery_epoch;
    began_ms_ = now_ms;
    moved_at_ms_.clear();
    back_at_ms_.clear();
    fed_since_ms_.clear();
    map_predicted_ = map_ratio_ = 0;
    map_wrong_ = map_redecided_ = false;
    ratios_.clear();
    work_seen_ = job.work;
    current_ = v1::Policy();
    current_.set_version(1);
    current_.set_job_id(job.job_id);
    current_.set_recovery_epoch(job.recovery_epoch);
    current_.set_load_policy("average");
    if (job.start.has_value() && job.start->chunk_server_size() == chunks) {
      // Resumed under its checkpoint's plan: the chunks are where it says.
      *current_.mutable_chunk_server() = job.start->chunk_server();
      std::vector<int64_t> counts(servers, 0);
      for (uint32_t o : job.start->chunk_server()) {
        if (o < servers) ++counts[o];
      }
      for (int64_t c : counts) current_.add_server_chunks(c);
      *current_.mutable_worker_batches() = job.start->worker_batches();
      for (v1::WorkerBatch& b : *current_.mutable_worker_batches()) b.clear_resume_samples();
    } else {
      std::vector<int64_t> even = ChunkCounts(std::vector<double>(servers, 1.0), chunks);
      for (size_t s = 0, c = 0; s < servers; ++s) {
        current_.add_server_chunks(even[s]);
        for (int64_t k = 0; k < even[s]; ++k, ++c) current_.add_chunk_server(uint32_t(s));
      }
      for (const std::string& w : job.workers) {
        v1::WorkerBatch* b = current_.add_worker_batches();
        b->set_worker_node_id(w);
        b->set_batch_size(job.batch_size);
      }
    }
    next_ms_ = now_ms + job.update_time_ms;
    next_look_ms_ = now_ms + std::min(kLookMs, job.update_time_ms);
    last_decision_ = "waiting for the first update period";
    return std::nullopt;
  }
  if (now_ms < next_look_ms_) return std::nullopt;
  next_look_ms_ = now_ms + std::min(kLookMs, job.update_time_ms);
  // The batches are decided once a period, from the speeds over it; the
  // map whenever its readings allow (DecideLoad).
  const bool period = now_ms >= next_ms_;
  if (period) next_ms_ = now_ms + job.update_time_ms;
  v1::Policy next = current_;
  std::string load_why, batch_why;
  last_rates_.clear();
  last_sources_.clear();
  rebased_ = false;
  const bool load =
      job.load_policy != "average" && DecideLoad(job, links, now_ms, &next, &load_why);
  const bool batches =
      period && job.batch_policy == "wlbs" && DecideBatches(job, &next, &batch_why);
  if (!period && !load) {
    // Between periods only a new map, or a new basis, is news; the
    // period's decision says the rest.
    if (!load_why.empty()) last_decision_ = load_why;
    if (rebased_) Record(now_ms);
    return std::nullopt;
  }
  last_decision_ = load_why.empty() || batch_why.empty() ? load_why + batch_why
                                                         : absl::StrCat(load_why, "; ", batch_why);
  if (!load && !batches) {
    Record(now_ms);
    return std::nullopt;
  }
  next_ms_ = now_ms + job.update_time_ms;
  if (!load) next.set_changed_fraction(0);
  if (load) {
    // A wrong map's ratio says what wrong readings cost, not a map.
    if (map_ratio_ > 0 && !map_wrong_) {
      ratios_.push_back(map_ratio_);
      if (ratios_.size() > kRatiosMax) ratios_.pop_front();
    }
    const std::vector<int64_t> counts(next.server_chunks().begin(), next.server_chunks().end());
    const std::vector<double> rate(next.server_throughput_bytes_per_second().begin(),
                                   next.server_throughput_bytes_per_second().end());
    map_predicted_ = PredictedTransfer(counts, rate);
    map_ratio_ = 0;
    map_wrong_ = map_redecided_ = false;
  }
  next.set_version(current_.version() + 1);
  next.set_job_id(job.job_id);
  next.set_recovery_epoch(job.recovery_epoch);
  next.set_issued_unix_ms(now_ms);
  next.set_load_policy(job.load_policy);
  history_.push_back(current_);
  if (history_.size() > kHistoryMax) history_.erase(history_.begin());
  current_ = next;
  last_decision_ = absl::StrCat("issued version ", next.version(), ": ", last_decision_);
  Record(now_ms);
  return next;
}

void PolicyLoop::Record(int64_t now_ms) {
  v1::PolicyDecision d;
  d.set_unix_ms(now_ms);
  d.set_why(last_decision_);
  for (double r : last_rates_) d.add_server_throughput_bytes_per_second(r);
  for (const std::string& from : last_sources_) d.add_server_throughput_source(from);
  decisions_.push_back(std::move(d));
  if (decisions_.size() > kDecisionsMax) decisions_.pop_front();
}

bool PolicyLoop::DecideBatches(const PolicyJob& job, v1::Policy* next, std::string* why) {
  // Each worker's speed over the last period: samples per second of
  // compute (what a bigger batch costs it).
  std::vector<double> speed(job.workers.size());
  std::vector<double> time(job.workers.size());
  std::map<std::string, uint32_t> batch;
  for (const v1::WorkerBatch& b : current_.worker_batches()) {
    batch[b.worker_node_id()] = b.batch_size();
  }
  bool measured = true;
  for (size_t k = 0; k < job.workers.size(); ++k) {
    const std::string& id = job.workers[k];
    if (job.gone.count(id) > 0) {  // WLBS: a failed worker's work goes to the others
      speed[k] = 0;
      time[k] = 0;
      continue;
    }
    auto now = job.work.find(id);
    auto was = work_seen_.find(id);
    const WorkerWork before = was != work_seen_.end() ? was->second : WorkerWork();
    const int64_t samples = now != job.work.end() ? now->second.samples - before.samples : 0;
    const double secs = now != job.work.end() ? now->second.compute_s - before.compute_s : 0;
    if (samples <= 0 || secs <= 0) {
      *why = absl::StrCat("batches kept: worker ", id, " computed nothing in the last period");
      measured = false;
      break;
    }
    speed[k] = double(samples) / secs;
    const uint32_t b = batch.count(id) > 0 ? batch[id] : job.batch_size;
    time[k] = b / speed[k];
  }
  work_seen_ = job.work;
  if (!measured || job.workers.empty()) return false;
  // WLBS's minor adjustment, all workers at once: the split in proportion
  // to the speeds, issued only when it would shorten an iteration's
  // compute (its slowest worker's) by more than update_rate at the speeds
  // just measured. Speeds on a shared machine wobble; this keeps the wobble
  // from moving batches, and still moves them for any imbalance worth it.
  absl::StatusOr<std::vector<uint32_t>> split = WlbsBatches(speed, job.batch_size, job.batch_max);
  if (!split.ok()) {
    *why = std::string(split.status().message());
    return false;
  }
  double now_s = 0, then_s = 0;
  for (size_t k = 0; k < job.workers.size(); ++k) {
    if (speed[k] <= 0) continue;  // gone
    now_s = std::max(now_s, time[k]);
    then_s = std::max(then_s, (*split)[k] / speed[k]);
  }
  const double gain = now_s > 0 ? (now_s - then_s) / now_s : 0;
  // A worker gone with more than its one sample: its share is computed by
  // nobody until it moves, whatever that costs the others.
  bool reclaim = false;
  for (const std::string& id : job.gone) {
    auto it = batch.find(id);
    reclaim = reclaim || (it != batch.end() ? it->second : job.batch_size) > 1;
  }
  if (!reclaim && gain <= job.update_rate) {
    *why = absl::StrCat("batches kept: a new split would shorten compute by ", gain,
                        ", not over update_rate");
    return false;
  }
  next->clear_worker_batches();
  for (size_t k = 0; k < job.workers.size(); ++k) {
    v1::WorkerBatch* b = next->add_worker_batches();
    b->set_worker_node_id(job.workers[k]);
    b->set_batch_size((*split)[k]);
  }
  *why = reclaim ? absl::StrCat("batches rebalanced: ", job.gone.size(),
                                " gone worker(s)' share moved to the others")
                 : absl::StrCat("batches rebalanced: compute ", gain, " shorter");
  return true;
}

absl::StatusOr<std::vector<double>> HostRates(const PolicyJob& job, const LinkTable& links,
                                              int64_t now_ms, int64_t since_ms,
                                              const std::vector<int64_t>* server_chunks,
                                              std::vector<std::string>* source) {
  const size_t servers = job.servers.size();
  // Each psd's host: the largest of two lower bounds on what its access
  // link carries, both from training traffic.
  // - Any one link into or out of a node there: a flow's packets leave
  //   the bottleneck no closer than the link's rate. A fast host is fed
  //   at its senders' rates, and one flow that ran alone shows it best.
  // - The most its nodes received together in a short window
  //   (LinkTable::PeakRate): flows that shared the host's link at one
  //   moment, counted together; what a saturated host carries, where
  //   each of its links shows only its share.
  // Adding link rates up instead (the rates into one node) adds maxima
  // of different moments, which is no bound at all: it reads a saturated
  // host above its link.
  // Both over the job's measurement window, by when the bytes were
  // received: a link's estimate is the largest of its recent probes, so
  // a report may carry a rate probed a while before it, and a rate of
  // before a drop must not outlive the window it was measured in; the
  // probes in the window count at their own rates (FastestSince).
  // A host that aggregates nothing under the map in force is read over
  // kIdlePeriods update periods instead: only its worker's flows cross
  // its link, fed at what the psds with chunks can send it, so what it
  // shows is below what it could carry and swings with who feeds it; its
  // drops cost nothing until a map gives it chunks, and then show within
  // a window.
  std::set<std::string> loaded;
  const bool known = server_chunks != nullptr && server_chunks->size() == servers;
  for (size_t s = 0; s < servers; ++s) {
    if (!known || (*server_chunks)[s] > 0) loaded.insert(job.HostOf(job.servers[s]));
  }
  auto fresh = [&](const std::string& host) {
    const int64_t back =
        loaded.count(host) > 0 ? job.window_ms() : kIdlePeriods * job.update_time_ms;
    return std::max(now_ms - back, since_ms);
  };
  std::map<std::string, double> best;          // by host
  std::map<std::string, std::string> best_of;  // the link it came from
  for (const v1::LinkReport& l : links.All()) {
    const std::string from = job.HostOf(l.from_node_id()), to = job.HostOf(l.to_node_id());
    // A link within a host never crosses its access link.
    if (from == to) continue;
    for (const std::string* h : {&from, &to}) {
      const double r = FastestSince(l, fresh(*h));
      if (r > best[*h]) {
        best[*h] = r;
        if (source != nullptr) best_of[*h] = l.from_node_id() + ">" + l.to_node_id();
      }
    }
  }
  std::vector<double> rate(servers, 0.0);
  if (source != nullptr) source->assign(servers, "");
  for (size_t s = 0; s < servers; ++s) {
    const std::string h = job.HostOf(job.servers[s]);
    std::vector<std::string> nodes;
    for (const auto& [node, of] : job.host_of) {
      if (of == h) nodes.push_back(node);
    }
    if (nodes.empty()) nodes.push_back(job.servers[s]);
    const int64_t from_ms =
        std::min(fresh(h), std::max(now_ms - 2 * LinkTable::kHostWindowMs, since_ms));
    const double peak = links.PeakRate(nodes, from_ms, now_ms);
    rate[s] = std::max(best[h], peak);
    if (source != nullptr) (*source)[s] = best[h] >= peak ? "link " + best_of[h] : "traffic";
    if (rate[s] <= 0) {
      return absl::UnavailableError(absl::StrCat("no link of ", job.servers[s],
                                                 "'s host measured in the last ",
                                                 (now_ms - fresh(h)) / 1000.0, " s"));
    }
  }
  return rate;
}

std::vector<size_t> LiftFedHosts(const PolicyJob& job, const std::vector<int64_t>& chunks,
                                 const LinkTable& links, int64_t from_ms, std::vector<double>* rate,
                                 std::vector<size_t>* own, std::vector<size_t>* unmeasured) {
  const size_t servers = job.servers.size();
  std::vector<size_t> lifted;
  if (chunks.size() != servers || rate->size() != servers) return lifted;
  std::set<std::string> psds;           // psds that hold chunks
  std::map<std::string, int64_t> held;  // chunks by host
  double fastest = 0;
  for (size_t s = 0; s < servers; ++s) {
    fastest = std::max(fastest, (*rate)[s]);
    held[job.HostOf(job.servers[s])] += chunks[s];
    if (chunks[s] > 0) psds.insert(job.servers[s]);
  }
  // Hosts whose psds' flows are measured: fewer chunks than a probe's
  // worth move in flows the meters ignore, and such a host, like one
  // with none, shows only its worker's flows.
  std::set<std::string> loaded;
  for (const auto& [h, n] : held) {
    if (n >= std::max<int64_t>(1, job.probe_chunks)) loaded.insert(h);
  }
  // Into each psd with chunks: each other host's workers' fastest push
  // probed since from_ms.
  const std::set<std::string> workers(job.workers.begin(), job.workers.end());
  std::map<std::pair<std::string, std::string>, double> push;  // (psd, host)
  for (const v1::LinkReport& l : links.All()) {
    if (psds.count(l.to_node_id()) == 0 || workers.count(l.from_node_id()) == 0) continue;
    const double rate = FastestSince(l, from_ms);
    if (rate <= 0) continue;
    const std::string from = job.HostOf(l.from_node_id());
    if (from == job.HostOf(l.to_node_id())) continue;
    double& f = push[{l.to_node_id(), from}];
    f = std::max(f, rate);
  }
  for (size_t s = 0; s < servers; ++s) {
    const std::string h = job.HostOf(job.servers[s]);
    if (loaded.count(h) > 0) continue;
    if ((*rate)[s] >= fastest) {
      if (unmeasured != nullptr) unmeasured->push_back(s);
      continue;
    }
    double into_sum = 0, others_sum = 0;
    for (const std::string& p : psds) {
      auto into = push.find({p, h});
      if (into == push.end()) continue;
      double others = 0;
      for (auto it = push.lower_bound({p, std::string()}); it != push.end() && it->first.first == p;
           ++it) {
        if (it->first.second != h) others = std::max(others, it->second);
      }
      if (others <= 0) continue;
      into_sum += into->second;
      others_sum += others;
    }
    if (others_sum <= 0) {
      if (unmeasured != nullptr) unmeasured->push_back(s);
    } else if (into_sum >= kFedShare * others_sum) {
      (*rate)[s] = fastest;
      lifted.push_back(s);
    } else if (own != nullptr && into_sum < kOwnShare * others_sum) {
      own->push_back(s);
    }
  }
  return lifted;
}

void ReadOwnLinks(const PolicyJob& job, const LinkTable& links, int64_t now_ms, int64_t since_ms,
                  const std::vector<size_t>& own, std::vector<double>* rate,
                  std::vector<std::string>* source) {
  if (own.empty()) return;
  std::vector<std::string> recent_source;
  absl::StatusOr<std::vector<double>> recent =
      HostRates(job, links, now_ms, since_ms, nullptr, &recent_source);
  if (!recent.ok() || recent->size() != rate->size()) return;
  for (size_t s : own) {
    if (s >= rate->size()) continue;
    if (source != nullptr && s < source->size()) {
      if ((*recent)[s] < (*rate)[s]) (*source)[s] = recent_source[s];
      (*source)[s] += ", own link";
    }
    (*rate)[s] = std::min((*rate)[s], (*recent)[s]);
  }
}

bool PolicyLoop::DecideLoad(const PolicyJob& job, const LinkTable& links, int64_t now_ms,
                            v1::Policy* next, std::string* why) {
  const int64_t chunks = job.num_chunks;
  const size_t servers = job.servers.size();
  // The next map is made only from readings of the map in force: from
  // after every server closed its first round, which waits for the
  // chunks that move (its flows describe the switch, not the map), over
  // a whole update period. Readings that straddle a switch read a fast
  // host at what the switch let through, and each map made from them
  // costs its own slow first round.
  // The first map, too, is made from a whole period of readings.
  int64_t since_ms = began_ms_;
  std::string early;  // why the waits below were skipped
  bool wrong = false;
  if (current_.version() > 1 && current_.changed_fraction() > 0) {
    const int64_t held_ms = now_ms - current_.issued_unix_ms();
    since_ms = job.plan_settled_ms;
    if (since_ms == 0) {
      if (held_ms < kSettleWaitPeriods * job.update_time_ms) {
        *why = absl::StrCat("kept version ", current_.version(), ": issued ", held_ms / 1000.0,
                            " s ago, waiting for every psd to close its first round");
        return false;
      }
      since_ms = current_.issued_unix_ms() + 2 * job.update_time_ms;
    }
    wrong = job.plan_settled_ms > 0 && WrongMap(job, &early);
  }
  if (!wrong && now_ms - since_ms < job.update_time_ms) {
    *why = absl::StrCat("kept version ", current_.version(), ": its rounds measured for ",
                        std::max<int64_t>(0, now_ms - since_ms) / 1000.0,
                        " s, a decision needs one update period of them");
    return false;
  }
  const std::vector<int64_t> in_force(current_.server_chunks().begin(),
                                      current_.server_chunks().end());
  std::vector<std::string> source;
  absl::StatusOr<std::vector<double>> rate =
      HostRates(job, links, now_ms, since_ms, &in_force, &source);
  if (!rate.ok()) {
    *why = std::string(rate.status().message());
    return false;
  }
  std::vector<size_t> own, unmeasured;
  std::vector<double> fed_rate = *rate;
  const std::vector<size_t> fed =
      LiftFedHosts(job, in_force, links, std::max(now_ms - job.window_ms(), since_ms), &fed_rate,
                   &own, &unmeasured);
  // Lifted once found fed long enough (fed_since_ms_); looks before the
  // readings' start do not count, nor do ticks that stop before here.
  const double fastest = *std::max_element(rate->begin(), rate->end());
  auto among = [](const std::vector<size_t>& v, size_t s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  fed_since_ms_.resize(servers, 0);
  std::vector<size_t> lifted, pending;
  for (size_t s = 0; s < servers; ++s) {
    int64_t& fed_ms = fed_since_ms_[s];
    if (fed_ms < since_ms) fed_ms = 0;
    if (among(fed, s)) {
      if (fed_ms == 0) fed_ms = now_ms;
    } else if (!among(unmeasured, s)) {
      fed_ms = 0;
    }
    if (fed_ms == 0) continue;
    bool held = now_ms - fed_ms > job.window_ms();
    if (!held && fed_ms < now_ms) {
      std::vector<double> newer = *rate;
      held = among(LiftFedHosts(job, in_force, links, fed_ms + 1, &newer), s);
    }
    if (held) {
      (*rate)[s] = std::max((*rate)[s], fastest);
      source[s] += ", lifted";
      lifted.push_back(s);
    } else {
      pending.push_back(s);
    }
  }
  ReadOwnLinks(job, links, now_ms, since_ms, own, &*rate, &source);
  last_rates_ = *rate;
  last_sources_ = source;
  if (wrong) map_redecided_ = true;  // this look is its early decision
  // Measurement noise does not move chunks: only a host whose throughput
  // moved by more than update_rate since the plan in force was made.
  if (current_.server_throughput_bytes_per_second_size() == int(servers)) {
    double moved = 0;
    int64_t latest_ms = 0;  // when the last host to move began to
    int64_t first_ms = 0;   // when the first still moving began to
    moved_at_ms_.resize(servers, 0);
    back_at_ms_.resize(servers, 0);
    for (size_t s = 0; s < servers; ++s) {
      const double was = current_.server_throughput_bytes_per_second(int(s));
      const double by = std::abs((*rate)[s] - was) / was;
      moved = std::max(moved, by);
      // A host that moved and reads back within update_rate for a moment
      // is still moving (a reading near the threshold flickers across
      // it): its move began when it first crossed, until it has read
      // back within for a whole window. A host found fed moves from when
      // it was first found so, lifted or not yet.
      const int64_t fed_ms = fed_since_ms_[s];
      if (fed_ms != 0) {
        if (moved_at_ms_[s] == 0 || fed_ms < moved_at_ms_[s]) moved_at_ms_[s] = fed_ms;
        back_at_ms_[s] = 0;
      } else if (by > job.update_rate) {
        // A rise shows at its first probe: it began about now. A drop shows
        // once every reading of the window is low (a reading is the best
        // probe of its window), so it began before the window did; dated
        // half a window back, the wait below still gives the drops of the
        // same change on other hosts, whose last probes at the old rate
        // aged out a little later, half a window to show.
        const int64_t began =
            (*rate)[s] < was ? std::max(since_ms, now_ms - job.window_ms() / 2) : now_ms;
        if (moved_at_ms_[s] == 0) moved_at_ms_[s] = began;
        back_at_ms_[s] = 0;
      } else if (moved_at_ms_[s] != 0) {
        if (back_at_ms_[s] == 0) back_at_ms_[s] = now_ms;
        if (now_ms - back_at_ms_[s] >= job.window_ms()) moved_at_ms_[s] = back_at_ms_[s] = 0;
      }
      latest_ms = std::max(latest_ms, moved_at_ms_[s]);
      if (moved_at_ms_[s] != 0 && (first_ms == 0 || moved_at_ms_[s] < first_ms)) {
        first_ms = moved_at_ms_[s];
      }
    }
    auto name_pending = [&] {
      for (size_t s : pending) {
        absl::StrAppend(why, "; ", job.servers[s], "'s host pushed as fast as the others from ",
                        (now_ms - fed_since_ms_[s]) / 1000.0,
                        " s ago: lifted once its pushes since do too, or after ",
                        job.window_ms() / 1000.0, " s");
      }
    };
    if (moved <= job.update_rate) {
      *why = absl::StrCat("kept version ", current_.version(), ": every psd's throughput within ",
                          job.update_rate, " of the plan's (largest change ", moved, ")");
      name_pending();
      return false;
    }
    // A change shows host by host: a rise at once, a drop only once the
    // faster readings before it are a window old. A map made at the first
    // move would read the hosts that dropped at their old rates, so it
    // waits until a whole window of readings has come in since the last
    // host began to move (a move that was noise is gone by then), and no
    // longer than kMoveWaitWindows past the first still moving: shares
    // of a loaded link swing by more than update_rate, so some host may
    // begin to move in every window, and a map wrong for the readings
    // then stays until the rates change again. A change's first move
    // shows after it, its last (a drop) a window after it: three windows
    // past the first, the last window's readings are all from after the
    // change, even where noise began a move up to two windows before it.
    // A lift still to be decided is waited for past that: it is, either
    // way, within a window.
    if (!wrong && ((now_ms - latest_ms < job.window_ms() &&
                    now_ms - first_ms < kMoveWaitWindows * job.window_ms()) ||
                   !pending.empty())) {
      *why = absl::StrCat("kept version ", current_.version(), ": throughputs moved (by up to ",
                          moved, "), the last ", (now_ms - latest_ms) / 1000.0,
                          " s ago, waiting for ", job.window_ms() / 1000.0, " s of readings since");
      name_pending();
      return false;
    }
  }
  moved_at_ms_.clear();
  back_at_ms_.clear();
  absl::StatusOr<std::vector<double>> shares = PolicyShares(job.load_policy, *rate);
  if (!shares.ok()) {
    *why = std::string(shares.status().message());
    return false;
  }
  std::vector<int64_t> counts = WithProbes(ChunkCounts(*shares, chunks), ProbeChunks(job));
  if (job.load_policy == "adlb") counts = FastestByRound(job, *rate, counts);
  // ADLB's own cost model decides whether a new map pays: a fast host is
  // only ever measured as fast as its slower peers let it move (its
  // estimate follows the plan), so its throughput swings without any
  // map doing better than the one in force. Only a predicted round
  // shorter by more than kMapGain x update_rate moves chunks, by MapCost:
  // where one host sets every map's round, it tells apart a map that
  // loads another host up to near that bound from one that leaves it
  // room, and a fast host's swinging readings barely move it. (The
  // round model does not: its rounds do not vary, and a host loaded to
  // near the bound costs it nothing.)
  if ((job.load_policy == "adlb" || job.load_policy == "adlb-alg1") &&
      current_.server_chunks_size() == int(servers)) {
    const double was = MapCost(in_force, *rate);
    const double will = MapCost(counts, *rate);
    const double gain = was > 0 ? 1 - will / was : 0;
    if (!(gain > kMapGain * job.update_rate)) {
      Rebase(*rate, next);
      *why =
          absl::StrCat("kept version ", current_.version(),
                       ": a new map would shorten the predicted transfer by ", gain, ", not over ",
                       kMapGain * job.update_rate, " (", kMapGain, " x update_rate)", early);
      return false;
    }
  }
  std::vector<int> previous(current_.chunk_server().begin(), current_.chunk_server().end());
  std::vector<int> ids(servers);
  std::iota(ids.begin(), ids.end(), 0);
  absl::StatusOr<std::vector<int>> owners = policy::RebalanceChunks(previous, ids, counts);
  if (!owners.ok()) {
    *why = std::string(owners.status().message());
    return false;
  }
  policy::PolicyValue from, to;
  from.version = current_.version();
  from.chunk_server = previous;
  to.chunk_server = *owners;
  // And only a map that differs by update_rate: a few chunks back and
  // forth cost their moves and gain nothing measurable.
  absl::StatusOr<policy::UpdateResult> update = policy::Update(from, to, job.update_rate);
  if (!update.ok()) {
    *why = std::string(update.status().message());
    return false;
  }
  if (!update->issued || update->diff.chunks_moved == 0) {
    // About the same map: the new throughputs are its basis from now on.
    Rebase(*rate, next);
    *why = absl::StrCat("kept version ", current_.version(), ": ", update->diff.chunks_moved,
                        " of ", chunks, " chunks would move, under update_rate", early);
    return false;
  }
  next->set_changed_fraction(update->diff.rate);
  next->clear_server_throughput_bytes_per_second();
  for (double r : *rate) next->add_server_throughput_bytes_per_second(r);
  next->clear_server_chunks();
  for (int64_t c : counts) next->add_server_chunks(c);
  next->clear_chunk_server();
  for (int o : *owners) next->add_chunk_server(uint32_t(o));
  *why = absl::StrCat(update->diff.chunks_moved, " of ", chunks, " chunks move");
  auto name = [&](const char* what, const std::vector<size_t>& which) {
    for (size_t k = 0; k < which.size(); ++k) {
      absl::StrAppend(why, k == 0 ? what : ", ", job.servers[which[k]]);
    }
  };
  name("; held by their peers, taken as fast as the fastest: ", lifted);
  name("; idle, held by their own links, read over a window: ", own);
  name("; found fed, not lifted yet: ", pending);
  absl::StrAppend(why, early);
  return true;
}

bool PolicyLoop::WrongMap(const PolicyJob& job, std::string* note) {
  if (map_ratio_ <= 0 && job.plan_round_ms > 0 && map_predicted_ > 0) {
    map_ratio_ = job.plan_round_ms / map_predicted_;
  }
  if (map_ratio_ <= 0 || ratios_.empty()) return false;
  std::vector<double> before(ratios_.begin(), ratios_.end());
  std::sort(before.begin(), before.end());
  const size_t n = before.size();
  const double median = n % 2 == 1 ? before[n / 2] : (before[n / 2 - 1] + before[n / 2]) / 2;
  map_wrong_ = map_ratio_ > kWrongMapFactor * median;
  if (!map_wrong_ || map_redecided_) return false;
  *note = absl::StrCat("; made without waiting: version ", current_.version(),
                       "'s first round of its own ran ", map_ratio_ / median,
                       "x what its readings predicted, against the maps before it");
  return true;
}

void PolicyLoop::Rebase(const std::vector<double>& rate, v1::Policy* next) {
  current_.clear_server_throughput_bytes_per_second();
  for (double r : rate) current_.add_server_throughput_bytes_per_second(r);
  *next->mutable_server_throughput_bytes_per_second() =
      current_.server_throughput_bytes_per_second();
  rebased_ = true;
}

}  // namespace hetps
