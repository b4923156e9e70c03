#include "lib/sim/flow_network.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <queue>
#include <utility>

namespace hetps {
namespace sim {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
// A flow with fewer bytes left than this is done (float residue).
constexpr double kResidueBytes = 1e-6;
}  // namespace

FlowNetwork::FlowNetwork(std::vector<double> capacity_Bps)
    : capacity_(std::move(capacity_Bps)),
      carried_(capacity_.size(), 0),
      cap_left_(capacity_.size(), 0),
      unfrozen_(capacity_.size(), 0),
      key_(capacity_.size(), 0),
      on_link_(capacity_.size()) {}

void FlowNetwork::SetCapacity(int link, double Bps) {
  capacity_[link] = Bps;
  dirty_ = true;
}

void FlowNetwork::Start(const std::vector<int>& path, double bytes, int64_t tag) {
  int slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<int>(flows_.size());
    flows_.emplace_back();
  }
  Flow& f = flows_[slot];
  f.path = path;
  f.remaining = std::max(bytes, 0.0);
  f.rate = 0;
  f.tag = tag;
  active_.push_back(slot);
  dirty_ = true;
}

void FlowNetwork::Recompute() {
  dirty_ = false;
  touched_.clear();
  for (int id : active_) {
    Flow& f = flows_[id];
    f.rate = f.path.empty() ? kInf : -1;  // -1: not frozen yet
    for (int l : f.path) {
      if (on_link_[l].empty()) {
        touched_.push_back(l);
        cap_left_[l] = capacity_[l];
        unfrozen_[l] = 0;
      }
      on_link_[l].push_back(id);
      ++unfrozen_[l];
    }
  }
  // Progressive filling: the link offering the smallest fair share fixes
  // the rate of all its unfrozen flows; repeat. Heap keys go stale when a
  // link's share changes; stale entries are skipped.
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  for (int l : touched_) {
    key_[l] = cap_left_[l] / unfrozen_[l];
    heap.push({key_[l], l});
  }
  while (!heap.empty()) {
    const auto [share, l] = heap.top();
    heap.pop();
    if (unfrozen_[l] == 0 || share != key_[l]) continue;
    for (int id : on_link_[l]) {
      Flow& f = flows_[id];
      if (f.rate >= 0) continue;
      f.rate = std::max(share, 0.0);
      for (int m : f.path) {
        cap_left_[m] = std::max(0.0, cap_left_[m] - f.rate);
        if (--unfrozen_[m] > 0) {
          key_[m] = cap_left_[m] / unfrozen_[m];
          heap.push({key_[m], m});
        }
      }
    }
  }
  for (int l : touched_) on_link_[l].clear();
}

double FlowNetwork::NextCompletion() {
  if (dirty_) Recompute();
  double t = kInf;
  for (int id : active_) {
    const Flow& f = flows_[id];
    if (f.rate == kInf) return now_;
    if (f.rate > 0) t = std::min(t, now_ + f.remaining / f.rate);
  }
  return t;
}

void FlowNetwork::AdvanceTo(double t, std::vector<int64_t>* done) {
  if (dirty_) Recompute();
  const double dt = std::max(0.0, t - now_);
  now_ = std::max(now_, t);
  size_t keep = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    const int id = active_[i];
    Flow& f = flows_[id];
    double moved = f.rate == kInf ? f.remaining : std::min(f.remaining, f.rate * dt);
    // Rounding: a flow due now finishes now.
    if (f.rate > 0 && f.rate != kInf && f.remaining / f.rate <= dt * (1 + 1e-12) + 1e-12) {
      moved = f.remaining;
    }
    f.remaining -= moved;
    for (int l : f.path) carried_[l] += moved;
    if (f.remaining <= kResidueBytes) {
      done->push_back(f.tag);
      f.path.clear();
      free_.push_back(id);
      dirty_ = true;
    } else {
      active_[keep++] = id;
    }
  }
  active_.resize(keep);
}

}  // namespace sim
}  // namespace hetps
