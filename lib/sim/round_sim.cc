#include "lib/sim/round_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace hetps {
namespace sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct RouteHash {
  size_t operator()(const policy::Route& r) const { return absl::HashOf(r); }
};

}  // namespace

RoundSimulator::RoundSimulator(int nodes, std::vector<PhysicalLink> links, double period_s,
                               RatesFn rates)
    : nodes_(nodes),
      links_(std::move(links)),
      period_s_(period_s),
      rates_fn_(std::move(rates)),
      net_(std::vector<double>(2 * links_.size(), 0)) {}

absl::StatusOr<RoundSimulator> RoundSimulator::Create(int nodes, std::vector<PhysicalLink> links,
                                                      double period_s, RatesFn rates) {
  if (nodes < 1) return absl::InvalidArgumentError(absl::StrCat("simulator: ", nodes, " nodes"));
  for (size_t i = 0; i < links.size(); ++i) {
    const PhysicalLink& l = links[i];
    if (l.a < 0 || l.b < 0 || l.a >= nodes || l.b >= nodes || l.a == l.b || !(l.latency_s >= 0) ||
        !std::isfinite(l.latency_s)) {
      return absl::InvalidArgumentError(absl::StrCat("simulator: link ", i, " (", l.a, ", ", l.b,
                                                     ", ", l.latency_s, " s) is invalid"));
    }
  }
  if (!rates) return absl::InvalidArgumentError("simulator: no rate function");
  RoundSimulator s(nodes, std::move(links), period_s, std::move(rates));
  for (size_t i = 0; i < s.links_.size(); ++i) {
    const auto& l = s.links_[i];
    if (!s.link_of_.try_emplace(int64_t{l.a} * nodes + l.b, 2 * static_cast<int>(i)).second ||
        !s.link_of_.try_emplace(int64_t{l.b} * nodes + l.a, 2 * static_cast<int>(i) + 1).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("simulator: two links join ", l.a, " and ", l.b));
    }
  }
  s.ApplyPeriod(0);
  if (s.rates_.size() != s.links_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("simulator: the rate function gave ",
                                                   s.rates_.size(), " rates for ", s.links_.size(),
                                                   " links"));
  }
  return s;
}

void RoundSimulator::ApplyPeriod(int64_t period) {
  period_ = period;
  rates_ = rates_fn_(period);
  for (size_t i = 0; i < rates_.size() && i < links_.size(); ++i) {
    const double r = std::isfinite(rates_[i]) && rates_[i] > 0 ? rates_[i] : 0;
    net_.SetCapacity(2 * static_cast<int>(i), r);
    net_.SetCapacity(2 * static_cast<int>(i) + 1, r);
  }
}

absl::StatusOr<std::vector<int>> RoundSimulator::DirectedPath(const policy::Route& r) const {
  std::vector<int> path;
  for (size_t i = 0; i + 1 < r.size(); ++i) {
    auto it = link_of_.find(int64_t{r[i]} * nodes_ + r[i + 1]);
    if (r[i] < 0 || r[i] >= nodes_ || it == link_of_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("simulator: no link from ", r[i], " to ", r[i + 1]));
    }
    path.push_back(it->second);
  }
  return path;
}

absl::StatusOr<RoundStats> RoundSimulator::RunRound(const RoundPlan& plan) {
  const int n = nodes_;
  const double t0 = net_.now();
  RoundStats stats;
  stats.start_s = t0;
  if (plan.compute_s.size() != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("simulator: ", plan.compute_s.size(), " compute times for ", n, " nodes"));
  }
  // --- Routes and sender queues. A queue is one route (sender first); all
  // trees sending over the same route share its queue, as they would share
  // a connection.
  struct Queue {
    std::vector<int> path;
    double latency_s = 0;
    std::deque<int> waiting;  // transfer ids; the head is in flight when busy
    bool busy = false;
  };
  std::vector<Queue> queues;
  absl::flat_hash_map<policy::Route, int, RouteHash> queue_of;
  auto queue_for = [&](const policy::Route& r) -> absl::StatusOr<int> {
    auto it = queue_of.find(r);
    if (it != queue_of.end()) return it->second;
    auto path = DirectedPath(r);
    if (!path.ok()) return path.status();
    Queue q;
    for (int d : *path) q.latency_s += links_[d / 2].latency_s;
    q.path = std::move(*path);
    queues.push_back(std::move(q));
    queue_of.emplace(r, static_cast<int>(queues.size()) - 1);
    return static_cast<int>(queues.size()) - 1;
  };
  const int ntrees = static_cast<int>(plan.trees.size());
  // Per tree and node: the queues up (primary first, then auxiliary) and
  // down (the same routes reversed).
  std::vector<std::vector<std::vector<int>>> up(ntrees), down(ntrees);
  std::vector<std::vector<std::vector<int>>> children(ntrees);
  std::vector<int> members(ntrees, 0);
  int64_t target = 0;  // (node, chunk) pairs that must hold the final value
  for (int i = 0; i < ntrees; ++i) {
    const TreePlan& tp = plan.trees[i];
    const auto& t = tp.tree;
    if (t.root < 0 || t.root >= n || t.parent.size() != size_t(n) || t.route.size() != size_t(n)) {
      return absl::InvalidArgumentError(absl::StrCat("simulator: tree ", i, " is malformed"));
    }
    up[i].assign(n, {});
    down[i].assign(n, {});
    children[i].assign(n, {});
    members[i] = 1;
    for (int v = 0; v < n; ++v) {
      if (t.parent[v] < 0) continue;
      ++members[i];
      children[i][t.parent[v]].push_back(v);
      std::vector<policy::Route> routes{t.route[v]};
      if (plan.multipath && v < static_cast<int>(tp.auxiliary.size())) {
        routes.insert(routes.end(), tp.auxiliary[v].begin(), tp.auxiliary[v].end());
      }
      for (const auto& r : routes) {
        if (r.size() < 2 || r.front() != v || r.back() != t.parent[v]) {
          return absl::InvalidArgumentError(
              absl::StrCat("simulator: tree ", i, " has a bad route for node ", v));
        }
        auto q = queue_for(r);
        if (!q.ok()) return q.status();
        up[i][v].push_back(*q);
        auto qd = queue_for(policy::Route(r.rbegin(), r.rend()));
        if (!qd.ok()) return qd.status();
        down[i][v].push_back(*qd);
      }
    }
    target += static_cast<int64_t>(members[i]) * static_cast<int64_t>(tp.chunk_bytes.size());
  }
  // --- Per (tree, node, chunk): children still to arrive.
  std::vector<std::vector<int>> pending(ntrees);
  for (int i = 0; i < ntrees; ++i) {
    const size_t c = plan.trees[i].chunk_bytes.size();
    pending[i].assign(static_cast<size_t>(n) * c, 0);
    for (int v = 0; v < n; ++v) {
      for (size_t k = 0; k < c; ++k)
        pending[i][v * c + k] = static_cast<int>(children[i][v].size());
    }
  }
  std::vector<char> own_ready(n, 0);
  // --- Transfers and events.
  struct Transfer {
    int tree, chunk, to;
    bool up;
  };
  std::vector<Transfer> transfers;
  // Late binding: chunks waiting for room on any route of a route set (the
  // primary and auxiliary queues of one tree edge and direction).
  absl::flat_hash_map<std::vector<int>, int, absl::Hash<std::vector<int>>> set_of;
  std::vector<std::vector<int>> sets;                      // route set -> queue ids
  std::vector<std::deque<Transfer>> backlog;               // route set -> waiting chunks
  std::vector<std::vector<int>> sets_with(queues.size());  // queue -> route sets using it
  enum Kind { kComputeDone = 0, kArrival = 1 };
  using Event = std::tuple<double, int64_t, int, int>;  // time, seq, kind, arg
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  int64_t seq = 0;
  int64_t done = 0;

  auto start_head = [&](int qid) {
    Queue& q = queues[qid];
    if (q.busy || q.waiting.empty()) return;
    q.busy = true;
    const Transfer& tr = transfers[q.waiting.front()];
    net_.Start(q.path, plan.trees[tr.tree].chunk_bytes[tr.chunk], qid);
  };
  auto occupied = [&](int qid) {
    return static_cast<int>(queues[qid].waiting.size());  // includes the head in flight
  };
  // The route for a new chunk; -1: every route is full (late binding holds it).
  std::vector<int> aux_occupied;
  auto choose = [&](const std::vector<int>& paths) {
    if (!plan.multipath || paths.size() < 2) return 0;
    aux_occupied.clear();
    for (size_t j = 1; j < paths.size(); ++j) aux_occupied.push_back(occupied(paths[j]));
    const int pick = policy::ChooseSendPath(occupied(paths[0]), aux_occupied,
                                            plan.primary_busy_bound, plan.auxiliary_queue_length);
    if (plan.late_binding && pick == 0 && occupied(paths[0]) >= plan.primary_busy_bound) return -1;
    return pick;
  };
  // A chunk's place in its tree's round: (index + 1/2) / chunks of the tree.
  auto progress = [&](const Transfer& x) {
    return (x.chunk + 0.5) / static_cast<double>(plan.trees[x.tree].chunk_bytes.size());
  };
  auto enqueue = [&](const std::vector<int>& paths, int pick, Transfer tr) {
    ++stats.chunks_sent;
    stats.auxiliary_sent += pick > 0;
    transfers.push_back(tr);
    Queue& q = queues[paths[pick]];
    const int id = static_cast<int>(transfers.size()) - 1;
    if (plan.progress_order) {
      // Behind every waiting chunk of the same or an earlier progress (the
      // one in flight stays first).
      auto it = q.waiting.begin() + (q.busy ? 1 : 0);
      while (it != q.waiting.end() && progress(transfers[*it]) <= progress(tr)) ++it;
      q.waiting.insert(it, id);
    } else {
      q.waiting.push_back(id);
    }
    start_head(paths[pick]);
  };
  auto send = [&](const std::vector<int>& paths, Transfer tr) {
    const int pick = choose(paths);
    if (pick >= 0) {
      enqueue(paths, pick, tr);
      return;
    }
    auto [it, fresh] = set_of.try_emplace(paths, static_cast<int>(sets.size()));
    if (fresh) {
      sets.push_back(paths);
      backlog.emplace_back();
      for (int q : paths) sets_with[q].push_back(it->second);
    }
    auto& held = backlog[it->second];
    auto at = held.end();
    if (plan.progress_order) {
      at = held.begin();
      while (at != held.end() && progress(*at) <= progress(tr)) ++at;
    }
    held.insert(at, tr);
  };
  // A queue got room: chunks held for any route set using it may go now.
  auto release = [&](int qid) {
    for (int sid : sets_with[qid]) {
      auto& held = backlog[sid];
      while (!held.empty()) {
        const int pick = choose(sets[sid]);
        if (pick < 0) break;
        const Transfer tr = held.front();
        held.pop_front();
        enqueue(sets[sid], pick, tr);
      }
    }
  };
  // Node v holds the final value of chunk k of tree i: pass it down.
  auto final_at = [&](int i, int v, int k) {
    ++done;
    for (int c : children[i][v]) send(down[i][c], Transfer{i, k, c, false});
  };
  // Node v has aggregated chunk k of tree i: forward up, or at the root, start down.
  auto aggregated = [&](int i, int v, int k) {
    const auto& t = plan.trees[i].tree;
    if (v == t.root) {
      final_at(i, v, k);
    } else {
      send(up[i][v], Transfer{i, k, t.parent[v], true});
    }
  };
  auto in_tree = [&](int i, int v) {
    return v == plan.trees[i].tree.root || plan.trees[i].tree.parent[v] >= 0;
  };
  auto compute_done = [&](int v) {
    own_ready[v] = 1;
    stats.compute_s = std::max(stats.compute_s, net_.now() - t0);
    for (int i = 0; i < ntrees; ++i) {
      if (!in_tree(i, v)) continue;
      const size_t c = plan.trees[i].chunk_bytes.size();
      for (size_t k = 0; k < c; ++k) {
        if (pending[i][v * c + k] == 0) aggregated(i, v, static_cast<int>(k));
      }
    }
  };
  auto arrival = [&](const Transfer& tr) {
    if (!tr.up) {
      final_at(tr.tree, tr.to, tr.chunk);
      return;
    }
    const size_t c = plan.trees[tr.tree].chunk_bytes.size();
    if (--pending[tr.tree][tr.to * c + tr.chunk] == 0 && own_ready[tr.to]) {
      aggregated(tr.tree, tr.to, tr.chunk);
    }
  };
  for (int v = 0; v < n; ++v) {
    // A non-worker in a tree (a relay that aggregates) has nothing to compute.
    const double c = plan.compute_s[v] < 0 ? 0 : plan.compute_s[v];
    events.push({t0 + c, seq++, kComputeDone, v});
  }
  std::vector<int64_t> drained;
  while (done < target || !events.empty()) {
    const double t_event = events.empty() ? kInf : std::get<0>(events.top());
    const double t_flow = net_.NextCompletion();
    const double t_change = period_s_ > 0 ? static_cast<double>(period_ + 1) * period_s_ : kInf;
    const double t = std::min({t_event, t_flow, t_change});
    if (!std::isfinite(t)) {
      return absl::FailedPreconditionError(
          absl::StrCat("simulator: traffic stalled at t=", net_.now(), " s with ", done, " of ",
                       target, " chunk copies delivered (a link of capacity 0?)"));
    }
    drained.clear();
    net_.AdvanceTo(t, &drained);
    for (int64_t qid : drained) {
      Queue& q = queues[qid];
      const int id = q.waiting.front();
      q.waiting.pop_front();
      q.busy = false;
      events.push({t + q.latency_s, seq++, kArrival, id});
      start_head(static_cast<int>(qid));
      release(static_cast<int>(qid));
    }
    if (t_change <= t) ApplyPeriod(period_ + 1);
    while (!events.empty() && std::get<0>(events.top()) <= t) {
      const auto [time, s, kind, arg] = events.top();
      events.pop();
      if (kind == kComputeDone) {
        compute_done(arg);
      } else {
        arrival(transfers[arg]);
      }
    }
    if (done >= target && events.empty()) break;
  }
  stats.duration_s = net_.now() - t0;
  return stats;
}

}  // namespace sim
}  // namespace hetps
