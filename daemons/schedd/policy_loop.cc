#include "daemons/schedd/policy_loop.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "lib/policy/adlb.h"
#include "lib/policy/policy_value.h"

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

std::optional<v1::Policy> PolicyLoop::Tick(const PolicyJob& job, const LinkTable& links,
                                           int64_t now_ms) {
  const int64_t chunks = job.num_chunks;
  const size_t servers = job.servers.size();
  if (job.job_id != job_id_ || job.recovery_epoch != epoch_) {
    // A new job, or a recovery: every psd starts again from the even split.
    if (job.job_id != job_id_) history_.clear();
    job_id_ = job.job_id;
    epoch_ = job.recovery_epoch;
    current_ = v1::Policy();
    current_.set_version(1);
    current_.set_job_id(job.job_id);
    current_.set_recovery_epoch(job.recovery_epoch);
    current_.set_load_policy("average");
    std::vector<int64_t> even = ChunkCounts(std::vector<double>(servers, 1.0), chunks);
    for (size_t s = 0, c = 0; s < servers; ++s) {
      current_.add_server_chunks(even[s]);
      for (int64_t k = 0; k < even[s]; ++k, ++c) current_.add_chunk_server(uint32_t(s));
    }
    next_ms_ = now_ms + job.update_time_ms;
    last_decision_ = "waiting for the first update period";
    return std::nullopt;
  }
  if (now_ms < next_ms_) return std::nullopt;
  next_ms_ = now_ms + job.update_time_ms;
  // Each psd's host: what one of its nodes moved at once. A node's flows
  // of one phase run together (a psd takes every push of a round at once,
  // a worker every pull), so the sum of the fresh rates into a node, or
  // out of it, is what the host's link carried for it then.
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
      last_decision_ = absl::StrCat("no link of ", job.servers[s], "'s host measured in the last ",
                                    3 * job.update_time_ms / 1000, " s");
      return std::nullopt;
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
      last_decision_ =
          absl::StrCat("kept version ", current_.version(), ": every psd's throughput within ",
                       job.update_rate, " of the plan's (largest change ", moved, ")");
      return std::nullopt;
    }
  }
  absl::StatusOr<std::vector<double>> shares = PolicyShares(job.load_policy, rate);
  if (!shares.ok()) {
    last_decision_ = std::string(shares.status().message());
    return std::nullopt;
  }
  const std::vector<int64_t> counts = WithProbes(ChunkCounts(*shares, chunks), job.probe_chunks);
  std::vector<int> previous(current_.chunk_server().begin(), current_.chunk_server().end());
  std::vector<int> ids(servers);
  std::iota(ids.begin(), ids.end(), 0);
  absl::StatusOr<std::vector<int>> owners = policy::RebalanceChunks(previous, ids, counts);
  if (!owners.ok()) {
    last_decision_ = std::string(owners.status().message());
    return std::nullopt;
  }
  policy::PolicyValue from, to;
  from.version = current_.version();
  from.chunk_server = previous;
  to.chunk_server = *owners;
  // And only a map that differs by update_rate: a few chunks back and
  // forth cost their moves and gain nothing measurable.
  absl::StatusOr<policy::UpdateResult> update = policy::Update(from, to, job.update_rate);
  if (!update.ok()) {
    last_decision_ = std::string(update.status().message());
    return std::nullopt;
  }
  if (!update->issued || update->diff.chunks_moved == 0) {
    // About the same map: the new throughputs are its basis from now on.
    current_.clear_server_throughput_bytes_per_second();
    for (double r : rate) current_.add_server_throughput_bytes_per_second(r);
    last_decision_ =
        absl::StrCat("kept version ", current_.version(), ": ", update->diff.chunks_moved, " of ",
                     chunks, " chunks would move, under update_rate");
    return std::nullopt;
  }
  v1::Policy next;
  next.set_version(update->value.version);
  next.set_job_id(job.job_id);
  next.set_recovery_epoch(job.recovery_epoch);
  next.set_issued_unix_ms(now_ms);
  next.set_load_policy(job.load_policy);
  next.set_changed_fraction(update->diff.rate);
  for (double r : rate) next.add_server_throughput_bytes_per_second(r);
  for (int64_t c : counts) next.add_server_chunks(c);
  for (int o : *owners) next.add_chunk_server(uint32_t(o));
  history_.push_back(current_);
  if (history_.size() > kHistoryMax) history_.erase(history_.begin());
  current_ = next;
  last_decision_ = absl::StrCat("issued version ", next.version(), ": ", update->diff.chunks_moved,
                                " of ", chunks, " chunks move");
  return next;
}

}  // namespace hetps
