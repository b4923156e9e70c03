#include "daemons/schedd/policy_loop.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "lib/policy/adlb.h"
#include "lib/policy/policy_value.h"
#include "lib/policy/wlbs.h"

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
  const double rate = link.throughput_bytes_per_second();
  if (!std::isfinite(rate) || rate <= 0 || rate > 1e13 || !std::isfinite(link.rtt_ms()) ||
      link.rtt_ms() < 0 || !std::isfinite(link.loss_fraction()) || link.loss_fraction() < 0 ||
      link.loss_fraction() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("link ", link.from_node_id(), " -> ", reporter, ": a value out of range"));
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

std::vector<int64_t> WithProbes(std::vector<int64_t> counts, int64_t probe) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if (probe < 1 || total < int64_t(counts.size()) * probe) return counts;
  for (size_t i = 0; i < counts.size(); ++i) {
    while (counts[i] < probe) {
      // From the server with the most (the first of them).
      *std::max_element(counts.begin(), counts.end()) -= 1;
      ++counts[i];
    }
  }
  return counts;
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

double PredictedTransfer(const std::vector<int64_t>& counts, const std::vector<double>& rate) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if (total <= 0 || counts.size() != rate.size()) return 0;
  policy::LoadDistribution d;
  for (int64_t c : counts) d.share_bytes.push_back(double(c) / double(total));
  policy::EvaluateLoad(1.0, rate, &d);
  return d.max_time_s;
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
    } else if (current_.version() > 0) {
      history_.push_back(current_);
      if (history_.size() > kHistoryMax) history_.erase(history_.begin());
    }
    job_id_ = job.job_id;
    servers_ = job.servers;
    epoch_ = job.recovery_epoch;
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
    last_decision_ = "waiting for the first update period";
    return std::nullopt;
  }
  if (now_ms < next_ms_) return std::nullopt;
  next_ms_ = now_ms + job.update_time_ms;
  v1::Policy next = current_;
  std::string load_why, batch_why;
  const bool load =
      job.load_policy != "average" && DecideLoad(job, links, now_ms, &next, &load_why);
  const bool batches = job.batch_policy == "wlbs" && DecideBatches(job, &next, &batch_why);
  last_decision_ = load_why.empty() || batch_why.empty() ? load_why + batch_why
                                                         : absl::StrCat(load_why, "; ", batch_why);
  if (!load && !batches) return std::nullopt;
  if (!load) next.set_changed_fraction(0);
  next.set_version(current_.version() + 1);
  next.set_job_id(job.job_id);
  next.set_recovery_epoch(job.recovery_epoch);
  next.set_issued_unix_ms(now_ms);
  next.set_load_policy(job.load_policy);
  history_.push_back(current_);
  if (history_.size() > kHistoryMax) history_.erase(history_.begin());
  current_ = next;
  last_decision_ = absl::StrCat("issued version ", next.version(), ": ", last_decision_);
  return next;
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

bool PolicyLoop::DecideLoad(const PolicyJob& job, const LinkTable& links, int64_t now_ms,
                            v1::Policy* next, std::string* why) {
  const int64_t chunks = job.num_chunks;
  const size_t servers = job.servers.size();
  // Each psd's host: what one of its nodes moved at once. A node's flows
  // of one phase run together (a psd takes every push of a round at once,
  // a worker every pull), so the sum of the fresh rates into a node, or
  // out of it, is what the host's link carried for it then. The largest:
  // a fast host is only seen moving what its slower peers let it, so each
  // sum is a lower bound (docs/results/2026-11-24-adaptive.md has why
  // preferring the sum over the most bytes, which reads burst-sized flows
  // right, made fast hosts read at their slowest senders' rates).
  const int64_t fresh_ms = now_ms - 3 * job.update_time_ms;
  auto host = [&](const std::string& node) {
    auto it = job.host_of.find(node);
    return it != job.host_of.end() ? it->second : node;
  };
  std::map<std::string, double> in, out;  // by node
  for (const v1::LinkReport& l : links.All()) {
    // A link within a host never crosses its access link.
    if (l.measured_unix_ms() < fresh_ms || host(l.from_node_id()) == host(l.to_node_id())) {
      continue;
    }
    in[l.to_node_id()] += l.throughput_bytes_per_second();
    out[l.from_node_id()] += l.throughput_bytes_per_second();
  }
  std::vector<double> rate(servers, 0.0);
  for (size_t s = 0; s < servers; ++s) {
    const std::string h = host(job.servers[s]);
    for (const auto* sums : {&in, &out}) {
      for (const auto& [node, sum] : *sums) {
        if (host(node) == h) rate[s] = std::max(rate[s], sum);
      }
    }
    if (rate[s] <= 0) {
      *why = absl::StrCat("no link of ", job.servers[s], "'s host measured in the last ",
                          3 * job.update_time_ms / 1000, " s");
      return false;
    }
  }
  // Measurement noise does not move chunks: only a host whose throughput
  // moved by more than update_rate since the plan in force was made.
  if (current_.server_throughput_bytes_per_second_size() == int(servers)) {
    double moved = 0;
    for (size_t s = 0; s < servers; ++s) {
      const double was = current_.server_throughput_bytes_per_second(int(s));
      moved = std::max(moved, std::abs(rate[s] - was) / was);
    }
    if (moved <= job.update_rate) {
      *why = absl::StrCat("kept version ", current_.version(), ": every psd's throughput within ",
                          job.update_rate, " of the plan's (largest change ", moved, ")");
      return false;
    }
  }
  absl::StatusOr<std::vector<double>> shares = PolicyShares(job.load_policy, rate);
  if (!shares.ok()) {
    *why = std::string(shares.status().message());
    return false;
  }
  const std::vector<int64_t> counts = WithProbes(ChunkCounts(*shares, chunks), job.probe_chunks);
  // ADLB's own cost model decides whether a new map pays: a fast host is
  // only ever measured as fast as its slower peers let it move (its
  // estimate follows the plan), so its throughput swings without any
  // map doing better than the one in force. Only a predicted round
  // shorter by more than update_rate moves chunks.
  if ((job.load_policy == "adlb" || job.load_policy == "adlb-alg1") &&
      current_.server_chunks_size() == int(servers)) {
    const double was = PredictedTransfer(
        std::vector<int64_t>(current_.server_chunks().begin(), current_.server_chunks().end()),
        rate);
    const double will = PredictedTransfer(counts, rate);
    if (!(will * (1 + job.update_rate) < was)) {
      current_.clear_server_throughput_bytes_per_second();
      for (double r : rate) current_.add_server_throughput_bytes_per_second(r);
      *next->mutable_server_throughput_bytes_per_second() =
          current_.server_throughput_bytes_per_second();
      *why = absl::StrCat("kept version ", current_.version(),
                          ": a new map would shorten the predicted transfer by ",
                          was > 0 ? 1 - will / was : 0, ", not over update_rate");
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
    current_.clear_server_throughput_bytes_per_second();
    for (double r : rate) current_.add_server_throughput_bytes_per_second(r);
    *next->mutable_server_throughput_bytes_per_second() =
        current_.server_throughput_bytes_per_second();
    *why = absl::StrCat("kept version ", current_.version(), ": ", update->diff.chunks_moved,
                        " of ", chunks, " chunks would move, under update_rate");
    return false;
  }
  next->set_changed_fraction(update->diff.rate);
  next->clear_server_throughput_bytes_per_second();
  for (double r : rate) next->add_server_throughput_bytes_per_second(r);
  next->clear_server_chunks();
  for (int64_t c : counts) next->add_server_chunks(c);
  next->clear_chunk_server();
  for (int o : *owners) next->add_chunk_server(uint32_t(o));
  *why = absl::StrCat(update->diff.chunks_moved, " of ", chunks, " chunks move");
  return true;
}

}  // namespace hetps
