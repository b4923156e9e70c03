#include "lib/policy/policy_value.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace hetps {
namespace policy {

PolicyDiff Diff(const PolicyValue& from, const PolicyValue& to) {
  PolicyDiff d;
  const size_t nc = std::max(from.chunk_server.size(), to.chunk_server.size());
  d.chunks = static_cast<int64_t>(nc);
  for (size_t c = 0; c < nc; ++c) {
    const int a = c < from.chunk_server.size() ? from.chunk_server[c] : -1;
    const int b = c < to.chunk_server.size() ? to.chunk_server[c] : -1;
    d.chunks_moved += a != b;
  }
  absl::flat_hash_map<int, size_t> from_tree;
  for (size_t i = 0; i < from.trees.size(); ++i) from_tree[from.trees[i].root] = i;
  absl::flat_hash_map<int, size_t> to_tree;
  for (size_t i = 0; i < to.trees.size(); ++i) to_tree[to.trees[i].root] = i;
  static const std::vector<Route> kNone;
  auto aux_of = [](const PolicyValue& p, size_t tree, size_t v) -> const std::vector<Route>& {
    if (tree >= p.auxiliary.size() || v >= p.auxiliary[tree].size()) return kNone;
    return p.auxiliary[tree][v];
  };
  auto edges = [](const AggregationTree& t) {
    int64_t e = 0;
    for (int p : t.parent) e += p >= 0;
    return e;
  };
  for (size_t i = 0; i < to.trees.size(); ++i) {
    const AggregationTree& t = to.trees[i];
    auto it = from_tree.find(t.root);
    if (it == from_tree.end()) {
      d.tree_edges += edges(t);
      d.tree_edges_changed += edges(t);
      continue;
    }
    const AggregationTree& f = from.trees[it->second];
    d.tree_edges += std::max(edges(t), edges(f));
    const size_t n = std::max(t.route.size(), f.route.size());
    for (size_t v = 0; v < n; ++v) {
      const bool in_t = v < t.parent.size() && t.parent[v] >= 0;
      const bool in_f = v < f.parent.size() && f.parent[v] >= 0;
      if (!in_t && !in_f) continue;
      if (in_t != in_f || t.route[v] != f.route[v]) ++d.tree_edges_changed;
      if (aux_of(to, i, v) != aux_of(from, it->second, v)) ++d.auxiliary_changed;
    }
  }
  for (const AggregationTree& f : from.trees) {
    if (to_tree.contains(f.root)) continue;
    d.tree_edges += edges(f);
    d.tree_edges_changed += edges(f);
  }
  const size_t nw = std::max(from.batch.size(), to.batch.size());
  d.workers = static_cast<int64_t>(nw);
  for (size_t w = 0; w < nw; ++w) {
    const int64_t a = w < from.batch.size() ? from.batch[w] : -1;
    const int64_t b = w < to.batch.size() ? to.batch[w] : -1;
    d.workers_changed += a != b;
  }
  const int64_t total = d.chunks + d.tree_edges + d.workers;
  if (total > 0) {
    d.rate = static_cast<double>(d.chunks_moved + d.tree_edges_changed + d.workers_changed) /
             static_cast<double>(total);
  }
  return d;
}

absl::StatusOr<UpdateResult> Update(const PolicyValue& current, PolicyValue proposal,
                                    double update_rate) {
  if (!(update_rate >= 0 && update_rate <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("update_rate ", update_rate, " not in [0, 1]"));
  }
  UpdateResult r;
  r.diff = Diff(current, proposal);
  const bool changed = r.diff.chunks_moved + r.diff.tree_edges_changed + r.diff.workers_changed +
                           r.diff.auxiliary_changed >
                       0;
  if (current.version == 0 || (changed && r.diff.rate >= update_rate)) {
    proposal.version = current.version + 1;
    r.value = std::move(proposal);
    r.issued = true;
  } else {
    r.value = current;
  }
  return r;
}

absl::StatusOr<std::vector<int>> RebalanceChunks(const std::vector<int>& previous,
                                                 const std::vector<int>& servers,
                                                 const std::vector<int64_t>& counts) {
  if (servers.size() != counts.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk map: ", servers.size(), " servers but ", counts.size(), " counts"));
  }
  int64_t total = 0;
  absl::flat_hash_map<int, size_t> slot;
  for (size_t i = 0; i < servers.size(); ++i) {
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk map: count ", counts[i]));
    }
    if (!slot.try_emplace(servers[i], i).second) {
      return absl::InvalidArgumentError(absl::StrCat("chunk map: server ", servers[i], " twice"));
    }
    total += counts[i];
  }
  if (!previous.empty() && static_cast<int64_t>(previous.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat("chunk map: previous map has ", previous.size(),
                                                   " chunks, the counts ", total));
  }
  std::vector<int> out(total, -1);
  std::vector<int64_t> left = counts;
  // Keep what can stay.
  for (size_t c = 0; c < previous.size(); ++c) {
    auto it = slot.find(previous[c]);
    if (it != slot.end() && left[it->second] > 0) {
      out[c] = previous[c];
      --left[it->second];
    }
  }
  // Fill the rest in chunk order, servers in the order given.
  size_t s = 0;
  for (int64_t c = 0; c < total; ++c) {
    if (out[c] >= 0) continue;
    while (left[s] == 0) ++s;
    out[c] = servers[s];
    --left[s];
  }
  return out;
}

}  // namespace policy
}  // namespace hetps
