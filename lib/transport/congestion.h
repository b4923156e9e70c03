// BBR-style congestion control for one peer: estimates the bottleneck
// bandwidth (BtlBw, windowed max of delivery-rate samples) and the round-trip
// propagation time (RTprop, windowed min of RTT samples), and derives a
// pacing rate and a congestion window of cwnd_gain x BDP. Packet loss is NOT
// a congestion signal here: random (non-congestion) loss on WAN links must
// not collapse the rate, which is what makes loss-tolerant transfer pay off.
//
// Pure state machine: the caller passes times (microseconds, any epoch) and
// byte counts. Not thread-safe; owned by the endpoint thread.
#ifndef HETPS_LIB_TRANSPORT_CONGESTION_H_
#define HETPS_LIB_TRANSPORT_CONGESTION_H_

#include <cstdint>

namespace hetps {
namespace transport {

struct CongestionConfig {
  uint32_t packet_bytes = 1400;             // datagram size used for window floors
  uint64_t initial_rate_bps = 100'000'000;  // before the first bandwidth sample
  uint32_t initial_rtt_us = 1000;           // before the first RTT sample
  // Floor of the window: ACKs arrive in batches, and on a busy host the peer
  // thread may not run for a scheduler tick; below ~1 MB in flight a training
  // flow stalls on every window. Pacing, not the window, sets the rate.
  uint32_t cwnd_packets_min = 1024;
  uint32_t cwnd_packets_max = 65536;
  uint64_t rate_bps_max = 100'000'000'000ull;
  uint32_t rtprop_window_us = 10'000'000;  // min-filter window for RTprop
  uint32_t btlbw_window_rounds = 10;       // max-filter window, in RTprops...
  // ...but at least this long: training traffic comes in bursts (one flow
  // per iteration) with idle gaps whose low, app-limited samples must not
  // erase the estimate between iterations.
  uint32_t btlbw_window_min_us = 500'000;
};

// Per-packet bookkeeping the controller needs back on ACK.
struct SendSample {
  uint64_t sent_us = 0;
  uint64_t delivered_bytes = 0;  // delivered() when the packet was sent
  uint64_t delivered_us = 0;     // time of that delivery count
  bool retransmitted = false;    // Karn: no RTT sample from retransmissions
};

class CongestionControl {
 public:
  explicit CongestionControl(const CongestionConfig& config);

  // Record what SendSample needs when a packet leaves.
  SendSample OnSend(uint64_t now_us, bool retransmission) const;
  // An ACK for a packet of `bytes` sent with `sample`.
  void OnAck(uint64_t now_us, uint32_t bytes, const SendSample& sample);

  uint64_t pacing_rate_bps() const;
  uint64_t cwnd_bytes() const;
  uint64_t btlbw_bps() const { return btlbw_bps_; }  // 0 until a sample
  uint32_t rtprop_us() const { return rtprop_us_; }  // 0 until a sample
  uint64_t delivered() const { return delivered_; }
  bool in_startup() const { return startup_; }

 private:
  CongestionConfig config_;
  uint64_t delivered_ = 0;
  uint64_t delivered_us_ = 0;
  // RTprop: windowed min.
  uint32_t rtprop_us_ = 0;
  uint64_t rtprop_stamp_us_ = 0;
  // BtlBw: windowed max, kept as the best of the current and previous window.
  uint64_t btlbw_bps_ = 0;
  uint64_t bw_window_start_us_ = 0;
  uint64_t bw_current_max_ = 0;
  uint64_t bw_previous_max_ = 0;
  // Startup ends when BtlBw stops growing by 25% over 3 rounds.
  bool startup_ = true;
  uint64_t full_bw_ = 0;
  int full_bw_rounds_ = 0;
  uint64_t round_start_us_ = 0;
  // ProbeBW gain cycle position.
  int cycle_index_ = 0;
  uint64_t cycle_start_us_ = 0;
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_CONGESTION_H_
