// Structure-aware libFuzzer target for the data-plane Endpoint: one
// threadless endpoint on a SimNetwork under a FakeClock, fed a sequence of
// operations decoded from the input: DATA from several fake peers (valid
// headers with fuzzed fields: flow ids, seqs, sizes up to and past the
// codec's bound, flags, iterations, payload lengths), ACKs and STOPs for
// the flows it is sending, raw bytes, new sends, cancels, and clock jumps
// (timers, Early Close, idle collection). Most datagrams are sealed with
// the job's key as a member would (so the fuzzer reaches past the tag);
// others carry another key's tag or id, a flipped byte, or are replays of
// earlier ones. Every input replays exactly.
//
// Checked after every step: the receive state never exceeds the budget,
// and the receiver only ever sees in-bounds packets of accepted flows. Run
// with -malloc_limit_mb so no single allocation can pass what the budget
// allows (tools/fuzz.sh). Built by tools/fuzz.sh with clang
// (-fsanitize=fuzzer,address,undefined).
#include <arpa/inet.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "lib/base/clock.h"
#include "lib/transport/endpoint.h"
#include "lib/transport/sim_network.h"
#include "lib/transport/test_flows.h"

namespace hetps {
namespace transport {
namespace {

constexpr size_t kPeers = 4;
constexpr uint32_t kBufferFloats = 1 << 16;

// Accepts flows by iteration (so some are refused), writes payloads into
// a bounded buffer, and aborts on anything the endpoint must never hand
// over: a packet of a flow it did not accept, or one past the flow's end.
class Sink : public Receiver {
 public:
  DropReason AcceptFlow(const Peer&, const Header& h) override {
    if (h.total_packets == 0 || h.total_packets > kFlowPacketsMax) std::abort();
    if (h.iteration % 5 == 4) return DropReason::kUnexpected;
    if (h.iteration % 7 == 6) return DropReason::kBadFlowSize;
    return DropReason::kNone;
  }
  void OnData(const Peer&, const Header& h, const uint8_t* payload) override {
    if (h.seq >= h.total_packets || h.payload_bytes == 0 || h.payload_bytes % 4 != 0) std::abort();
    const uint64_t at = (uint64_t(h.chunk_id) * 4096 + h.chunk_offset) % kBufferFloats;
    const uint64_t n = std::min<uint64_t>(h.payload_bytes / 4, kBufferFloats - at);
    std::memcpy(buf_.data() + at, payload, n * 4);
  }
  void OnFlowDone(const Peer&, const FlowResult& r) override {
    if (r.received > r.total_packets) std::abort();
  }

 private:
  std::vector<float> buf_ = std::vector<float>(kBufferFloats);
};

Peer PeerAddr(size_t i) { return Peer{htonl(0x0A000100u + uint32_t(i)), htons(7000)}; }

// How each fake peer sends: mostly as a member holding the job's key.
struct Peers {
  std::deque<testing::Forger> members, outsiders, old_job;  // not movable
  std::vector<std::vector<uint8_t>> sent;                   // for replays
  Peers() {
    for (size_t i = 0; i < kPeers; ++i) {
      members.emplace_back(testing::TestKey(), 100 + i);
      outsiders.emplace_back(testing::TestKey(1, 0x33), 200 + i);
      old_job.emplace_back(testing::TestKey(9), 300 + i);
    }
  }
  // `h` with `payload`, sealed one of several ways: as a member (most),
  // with a byte flipped after sealing, under another key's bytes or id,
  // or an earlier datagram again (a replay).
  std::vector<uint8_t> Make(size_t peer, const Header& h, const std::vector<uint8_t>& payload,
                            FuzzedDataProvider& in) {
    const int how = in.ConsumeIntegralInRange<int>(0, 15);
    if (how == 13 && !sent.empty())
      return sent[in.ConsumeIntegralInRange<size_t>(0, sent.size() - 1)];
    testing::Forger& f = how == 14 ? outsiders[peer] : how == 15 ? old_job[peer] : members[peer];
    std::vector<uint8_t> d = f(h, payload, PeerAddr(peer));
    if (how == 12) d[in.ConsumeIntegralInRange<size_t>(0, d.size() - 1)] ^= 0x20;
    if (sent.size() < 64) sent.push_back(d);
    return d;
  }
};

uint32_t FuzzTotal(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      return in.ConsumeIntegralInRange<uint32_t>(1, 16);
    case 1:
      return in.ConsumeIntegralInRange<uint32_t>(1, 4096);
    case 2:
      return kFlowPacketsMax;
    case 3:
      return in.ConsumeIntegralInRange<uint32_t>(kFlowPacketsMax - 8, kFlowPacketsMax + 8);
    default:
      return in.ConsumeIntegral<uint32_t>();
  }
}

}  // namespace
}  // namespace transport
}  // namespace hetps

using namespace hetps;             // NOLINT: a fuzz target's one file
using namespace hetps::transport;  // NOLINT

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  FakeClock clock;
  SimNetwork net(&clock, in.ConsumeIntegral<uint64_t>());
  EndpointConfig config;
  config.key = testing::TestKey();
  config.recv_flows_max = 64;
  config.recv_peer_bytes_max = 1 << 20;
  config.recv_bytes_max = 4 << 20;
  config.closed_flows_remembered = 256;
  config.send_flows_max = 16;
  config.ack_echo = in.ConsumeBool();
  config.ack_prefix = in.ConsumeBool();
  config.ack_tx = in.ConsumeBool();
  config.early_close.lt_fixed_us = in.ConsumeIntegralInRange<uint32_t>(0, 100'000);
  Sink sink;
  EndpointEnv env;
  const Peer self{htonl(0x0A000001), htons(7000)};
  auto sock = net.Open(self, config.batch_max);
  if (!sock.ok()) std::abort();
  env.socket = std::move(*sock);
  env.clock = &clock;
  env.seed = 1;
  env.threaded = false;
  auto created = Endpoint::Create(config, &sink, std::move(env));
  if (!created.ok()) std::abort();
  Endpoint& e = **created;

  // Flows it sends, whose ACKs and STOPs the input may forge.
  std::vector<float> payload(8192, 1.0f);
  std::vector<std::shared_ptr<SendHandle>> sent;
  auto send = [&](size_t peer, uint32_t floats, bool lossy) {
    std::vector<PacketSpan> packets;
    AppendPackets(0, payload.data(), floats, config.payload_floats(), true, &packets);
    SendOptions o;
    o.loss_tolerant = lossy;
    sent.push_back(e.Send(PeerAddr(peer % kPeers), 1, std::move(packets), o));
  };
  send(0, 2000, false);
  send(1, 3000, true);
  Peers peers;

  while (in.remaining_bytes() > 0) {
    const size_t peer = in.ConsumeIntegralInRange<size_t>(0, kPeers - 1);
    Header h;
    switch (in.ConsumeIntegralInRange<int>(0, 7)) {
      case 0:
      case 1: {  // DATA
        h.type = PacketType::kData;
        h.flags = in.ConsumeIntegral<uint8_t>() & kFlagsKnown & ~(kFlagAckPrefix | kFlagAckTx);
        h.flow_id = in.ConsumeIntegralInRange<uint32_t>(0, 9);
        h.total_packets = FuzzTotal(in);
        h.seq =
            h.total_packets > 0 ? in.ConsumeIntegralInRange<uint32_t>(0, h.total_packets - 1) : 0;
        const size_t payload = 4 * in.ConsumeIntegralInRange<size_t>(0, 338);
        h.chunk_id = in.ConsumeIntegral<uint32_t>();
        h.chunk_offset = in.ConsumeIntegral<uint32_t>();
        h.iteration = in.ConsumeIntegralInRange<uint32_t>(0, 20);
        h.rtprop_us = in.ConsumeIntegral<uint32_t>();
        h.btlbw_kbps = in.ConsumeIntegral<uint32_t>();
        std::vector<uint8_t> body = in.ConsumeBytes<uint8_t>(payload);
        body.resize(payload);
        const auto d = peers.Make(peer, h, body, in);
        net.Inject(PeerAddr(peer), self, d.data(), d.size());
        break;
      }
      case 2:
      case 3: {  // ACK for a flow it sends (or a near id)
        if (sent.empty()) break;
        const auto& s = sent[in.ConsumeIntegralInRange<size_t>(0, sent.size() - 1)];
        h.type = PacketType::kAck;
        h.flow_id = s->flow_id() + in.ConsumeIntegralInRange<uint32_t>(0, 1);
        h.total_packets = FuzzTotal(in);
        h.seq = in.ConsumeIntegralInRange<uint32_t>(0, h.total_packets - 1);
        if (in.ConsumeBool()) {
          h.flags = kFlagAckPrefix;
          h.chunk_offset = in.ConsumeIntegralInRange<uint32_t>(0, h.total_packets);
        }
        if (in.ConsumeBool()) {  // names a transmission: packet numbers count from 0
          h.flags |= kFlagAckTx;
          h.ack_tx = in.ConsumeIntegralInRange<uint32_t>(0, 20'000);
        }
        h.btlbw_kbps = in.ConsumeIntegral<uint32_t>();
        const size_t extra = in.ConsumeIntegralInRange<size_t>(0, 16);
        std::vector<uint32_t> seqs(extra);
        for (auto& q : seqs) q = in.ConsumeIntegralInRange<uint32_t>(0, 4000);
        std::vector<uint8_t> body(4 * extra);
        EncodeAckSeqs(seqs.data(), extra, body.data());
        // From the flow's peer, or from another (must be ignored).
        const size_t from = in.ConsumeBool() ? (s == sent[0] ? 0 : 1) : peer;
        const auto d = peers.Make(from, h, body, in);
        net.Inject(PeerAddr(from), self, d.data(), d.size());
        break;
      }
      case 4: {  // STOP for a flow it sends
        if (sent.empty()) break;
        const auto& s = sent[in.ConsumeIntegralInRange<size_t>(0, sent.size() - 1)];
        h.type = PacketType::kStop;
        h.flow_id = s->flow_id();
        h.total_packets = FuzzTotal(in);
        h.seq = 0;
        std::vector<uint8_t> body;
        if (in.ConsumeBool()) {
          body.resize(kStopPayloadBytes);
          StopInfo info;
          info.reason = CloseReason(in.ConsumeIntegralInRange<int>(0, 2));
          info.received = in.ConsumeIntegralInRange<uint32_t>(0, h.total_packets);
          EncodeStop(info, body.data());
        }
        const auto d = peers.Make(peer, h, body, in);
        net.Inject(PeerAddr(peer), self, d.data(), d.size());
        break;
      }
      case 5: {  // raw bytes
        const auto d = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 200));
        net.Inject(PeerAddr(peer), self, d.data(), d.size());
        break;
      }
      case 6:  // a new send, or a cancel
        if (in.ConsumeBool() && sent.size() < 64) {
          send(peer, in.ConsumeIntegralInRange<uint32_t>(1, 8192), in.ConsumeBool());
        } else if (!sent.empty()) {
          e.Cancel(sent[in.ConsumeIntegralInRange<size_t>(0, sent.size() - 1)]);
        }
        break;
      default:  // time passes: timers, Early Close, idle collection
        clock.Advance(absl::Microseconds(in.ConsumeIntegralInRange<uint32_t>(0, 70'000'000)));
        break;
    }
    clock.Advance(absl::Microseconds(25));  // past the links' 20 us delay
    e.Step();
    const EndpointStats st = e.GetStats();
    if (st.recv_state_bytes > config.recv_bytes_max) std::abort();
  }
  e.Shutdown();
  for (const auto& s : sent) {
    if (!s->done()) std::abort();  // every flow ends: done or cancelled
  }
  return 0;
}
