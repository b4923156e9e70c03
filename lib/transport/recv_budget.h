// RecvBudget: the memory a receiving transport commits to state that its
// senders create (open receive flows, TCP connection buffers), per sending
// peer and in total. Every allocation sized by something a peer sent is
// charged here first; a charge that would take the peer or the total past
// its bound is refused, and the caller drops the datagram (or closes the
// connection) and counts it as over_budget. Both bounds are config keys
// (EndpointConfig::recv_peer_bytes_max, recv_bytes_max).
//
// Per-peer entries exist only while a peer holds a charge, so the table is
// itself bounded by total_max / the smallest charge. Not thread-safe: one
// owner (the transport's thread).
#ifndef HETPS_LIB_TRANSPORT_RECV_BUDGET_H_
#define HETPS_LIB_TRANSPORT_RECV_BUDGET_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "lib/transport/datagram_socket.h"
#include "lib/transport/wire.h"

namespace hetps {
namespace transport {

// State kept for a receive flow besides its bitmap: the flow's bookkeeping,
// its pending-ACK batch and echo list, and the hash-table slots.
constexpr uint64_t kRecvFlowOverheadBytes = 1024;

// A receive flow's bitmap (one bit per packet), in 64-bit words, and the
// bytes charged for the flow (64-bit: no header value can wrap them).
inline uint64_t RecvBitmapWords(uint32_t total_packets) {
  return (uint64_t(total_packets) + 63) / 64;
}
inline uint64_t RecvFlowBytes(uint32_t total_packets) {
  return kRecvFlowOverheadBytes + RecvBitmapWords(total_packets) * sizeof(uint64_t);
}

class RecvBudget {
 public:
  RecvBudget(uint64_t peer_bytes_max, uint64_t total_bytes_max)
      : peer_max_(peer_bytes_max), total_max_(total_bytes_max) {}

  // Charges `bytes` to `peer`; false (nothing charged) when the peer's or
  // the total charge would pass its bound.
  bool Charge(const Peer& peer, uint64_t bytes) {
    if (bytes > total_max_ - total_) return false;
    auto it = used_.find(peer);
    const uint64_t have = it == used_.end() ? 0 : it->second;
    if (bytes > peer_max_ || have > peer_max_ - bytes) return false;
    if (it == used_.end()) {
      used_.emplace(peer, bytes);
    } else {
      it->second += bytes;
    }
    total_ += bytes;
    return true;
  }

  // Returns what an earlier Charge took (exactly that amount).
  void Release(const Peer& peer, uint64_t bytes) {
    auto it = used_.find(peer);
    if (it == used_.end()) return;
    const uint64_t give = bytes < it->second ? bytes : it->second;
    it->second -= give;
    total_ -= give;
    if (it->second == 0) used_.erase(it);
  }

  uint64_t total() const { return total_; }
  uint64_t of(const Peer& peer) const {
    auto it = used_.find(peer);
    return it == used_.end() ? 0 : it->second;
  }
  size_t peers() const { return used_.size(); }

 private:
  uint64_t peer_max_;
  uint64_t total_max_;
  uint64_t total_ = 0;
  absl::flat_hash_map<Peer, uint64_t> used_;
};

// Admits a new receive flow for its first packet `first` from `from`, in
// the order both transports follow: the count of open flows, then the
// memory the flow's size asks for (charged to `budget_key`), then the
// receiver's own checks (`accept`, e.g. Receiver::AcceptFlow). kNone with
// *charged set: the caller keeps the flow and Releases *charged when it
// goes; any other reason: nothing is held.
template <typename Accept>
DropReason AdmitFlow(RecvBudget& budget, const Peer& budget_key, size_t flows_open,
                     size_t flows_max, const Header& first, Accept&& accept, uint64_t* charged) {
  const uint64_t bytes = RecvFlowBytes(first.total_packets);
  if (flows_open >= flows_max || !budget.Charge(budget_key, bytes)) return DropReason::kOverBudget;
  if (DropReason why = accept(); why != DropReason::kNone) {
    budget.Release(budget_key, bytes);
    return why;
  }
  *charged = bytes;
  return DropReason::kNone;
}

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_RECV_BUDGET_H_
