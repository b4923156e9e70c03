#include "lib/sim/sharded_round.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hetps {
namespace sim {

ShardedRound::ShardedRound(FlowNetwork* net, const ShardedLayout& layout,
                           const std::vector<double>& share_bytes, double segment_bytes)
    : net_(net), layout_(layout) {
  const size_t servers = layout_.server_host.size();
  const size_t workers = layout_.worker_host.size();
  push_q_.assign(workers * servers, {});
  pull_q_.assign(workers * servers, {});
  push_busy_.assign(workers * servers, false);
  pull_busy_.assign(workers * servers, false);
  arrived_.assign(servers, {});
  seg_bytes_.assign(servers, {});
  for (size_t s = 0; s < servers && s < share_bytes.size(); ++s) {
    const double share = std::max(0.0, share_bytes[s]);
    const int n = segment_bytes > 0 ? int(std::ceil(share / segment_bytes)) : 0;
    for (int k = 0; k < n; ++k) {
      seg_bytes_[s].push_back(std::min(segment_bytes, share - k * segment_bytes));
    }
    arrived_[s].assign(size_t(n), 0);
  }
}

void ShardedRound::Start() {
  const int servers = int(layout_.server_host.size());
  const int workers = int(layout_.worker_host.size());
  for (int s = 0; s < servers; ++s) {
    const int n = int(seg_bytes_[size_t(s)].size());
    for (int w = 0; w < workers; ++w) {
      if (layout_.worker_host[size_t(w)] == layout_.server_host[size_t(s)]) {
        // The worker beside the psd: its copy is in without a link.
        for (int& a : arrived_[size_t(s)]) ++a;
        continue;
      }
      pulls_left_ += n;
      for (int k = 0; k < n; ++k) push_q_[size_t(w * servers + s)].push_back(k);
    }
  }
  for (int s = 0; s < servers; ++s) {
    for (int w = 0; w < workers; ++w) Next(true, w, s);
  }
}

void ShardedRound::Next(bool push, int worker, int server) {
  const size_t pair = size_t(worker) * layout_.server_host.size() + size_t(server);
  std::deque<int>& q = push ? push_q_[pair] : pull_q_[pair];
  std::vector<bool>& busy = push ? push_busy_ : pull_busy_;
  if (busy[pair] || q.empty()) return;
  const int k = q.front();
  q.pop_front();
  busy[pair] = true;
  const int wh = layout_.worker_host[size_t(worker)];
  const int sh = layout_.server_host[size_t(server)];
  const double bytes = seg_bytes_[size_t(server)][size_t(k)];
  const int64_t tag = int64_t(flows_.size());
  net_->Start(push ? std::vector<int>{2 * wh, 2 * sh + 1} : std::vector<int>{2 * sh, 2 * wh + 1},
              bytes, tag);
  flows_.push_back({push, worker, server, bytes, net_->now(), k});
}

ShardedRound::Flow ShardedRound::Finish(int64_t tag) {
  const Flow f = flows_[size_t(tag)];  // Next appends to flows_
  const size_t servers = layout_.server_host.size();
  const size_t pair = size_t(f.worker) * servers + size_t(f.server);
  const int workers = int(layout_.worker_host.size());
  if (f.push) {
    push_busy_[pair] = false;
    if (++arrived_[size_t(f.server)][size_t(f.segment)] == workers) {
      for (int w = 0; w < workers; ++w) {
        if (layout_.worker_host[size_t(w)] == layout_.server_host[size_t(f.server)]) continue;
        pull_q_[size_t(w) * servers + size_t(f.server)].push_back(f.segment);
        Next(false, w, f.server);
      }
    }
  } else {
    pull_busy_[pair] = false;
    --pulls_left_;
  }
  Next(f.push, f.worker, f.server);
  return f;
}

double ShardedRoundTime(const ShardedLayout& layout, const std::vector<double>& host_Bps,
                        const std::vector<double>& share_bytes, double segment_bytes) {
  if (layout.hosts <= 0 || host_Bps.size() != size_t(layout.hosts) ||
      share_bytes.size() != layout.server_host.size() || !(segment_bytes > 0)) {
    return 0;
  }
  for (int h : layout.server_host) {
    if (h < 0 || h >= layout.hosts) return 0;
  }
  for (int h : layout.worker_host) {
    if (h < 0 || h >= layout.hosts) return 0;
  }
  std::vector<double> cap;
  for (double r : host_Bps) {
    if (!(r > 0) || !std::isfinite(r)) return 0;
    cap.push_back(r);  // uplink
    cap.push_back(r);  // downlink
  }
  FlowNetwork net(std::move(cap));
  ShardedRound round(&net, layout, share_bytes, segment_bytes);
  round.Start();
  std::vector<int64_t> done;
  while (!round.done()) {
    const double t = net.NextCompletion();
    if (!std::isfinite(t)) return 0;  // nothing left to move: cannot happen
    done.clear();
    net.AdvanceTo(t, &done);
    for (int64_t tag : done) round.Finish(tag);
  }
  return net.now();
}

}  // namespace sim
}  // namespace hetps
