// Helpers shared by the transport tests: reproducible float payloads cut
// into chunk packets the way psd and workerd cut them, and SimRun, which
// runs threadless endpoints on a seeded SimNetwork under a FakeClock: a
// test's whole run is a function of its seed, with no sleeps and no
// wall-clock bounds.
#ifndef HETPS_LIB_TRANSPORT_TEST_FLOWS_H_
#define HETPS_LIB_TRANSPORT_TEST_FLOWS_H_

#include <arpa/inet.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "lib/base/clock.h"
#include "lib/base/splitmix.h"
#include "lib/transport/endpoint.h"
#include "lib/transport/sim_network.h"

namespace hetps {
namespace transport {
namespace testing {

// A flow as its receiver reports it: `packets` packets, `bytes` of
// payload in all, the first arriving at first_us and the last at last_us.
inline FlowResult ReceivedFlow(uint64_t bytes, uint32_t packets, uint64_t first_us,
                               uint64_t last_us) {
  FlowResult r;
  r.total_packets = r.received = packets;
  r.bytes = bytes;
  r.first_us = first_us;
  r.last_us = last_us;
  return r;
}

// A fixed data key for tests (id 1 unless asked otherwise).
inline DataKey TestKey(uint8_t id = 1, uint8_t fill = 0x5A) {
  DataKey k;
  k.id = id;
  k.bytes.fill(fill);
  k.set = true;
  return k;
}

// A datagram as a member holding `key` would send it from `from`: header
// `h` (its key id, sender and packet number set here) and `payload`
// bytes of pattern, sealed. Each call is a new datagram (next number).
class Forger {
 public:
  Forger(const DataKey& key, uint64_t sender) : auth_(true, [sender] { return sender; }) {
    auth_.SetKey(key);
  }
  std::vector<uint8_t> operator()(Header h, size_t payload, const Peer& from) {
    return (*this)(h, std::vector<uint8_t>(payload, 0), from);
  }
  std::vector<uint8_t> operator()(Header h, const std::vector<uint8_t>& payload, const Peer& from) {
    h.key_id = auth_.key_id();
    h.packet_number = auth_.NextPacketNumber();
    h.sender = auth_.sender();
    h.payload_bytes = static_cast<uint16_t>(payload.size());
    std::vector<uint8_t> d(kHeaderBytes + payload.size(), 0);
    EncodeHeader(h, d.data());
    std::copy(payload.begin(), payload.end(), d.begin() + kHeaderBytes);
    auth_.Seal(from, d.data(), d.data() + kHeaderBytes, payload.size());
    return d;
  }

 private:
  PacketAuth auth_;
};

// n floats uniform in [-1, 1) from `seed`.
inline std::vector<float> Pattern(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// v as chunks of chunk_floats (ids from first_chunk), each cut into packets
// of payload_floats with its first and last packet critical.
inline std::vector<PacketSpan> ChunkPackets(const std::vector<float>& v, uint32_t first_chunk,
                                            uint32_t chunk_floats, uint32_t payload_floats) {
  std::vector<PacketSpan> out;
  for (size_t off = 0, c = first_chunk; off < v.size(); off += chunk_floats, ++c) {
    AppendPackets(static_cast<uint32_t>(c), v.data() + off,
                  static_cast<uint32_t>(std::min<size_t>(chunk_floats, v.size() - off)),
                  payload_floats, true, &out);
  }
  return out;
}

// A threaded endpoint on `net` at `addr` (port 0: any), for real-time tests
// with threads of their own (psd's and workerd's round loops): `net` then
// runs on RealClock; its links' loss patterns are still seeded.
inline absl::StatusOr<std::unique_ptr<Endpoint>> SimEndpoint(SimNetwork& net, Peer addr,
                                                             const EndpointConfig& config,
                                                             Receiver* receiver,
                                                             const Clock* clock) {
  auto sock = net.Open(addr, config.batch_max);
  if (!sock.ok()) return sock.status();
  EndpointEnv env;
  env.socket = std::move(*sock);
  env.clock = clock;
  return Endpoint::Create(config, receiver, std::move(env));
}

// Threadless endpoints on one simulated network.
class SimRun {
 public:
  explicit SimRun(uint64_t seed, LinkImpairment defaults = {})
      : seed_(seed), net_(&clock_, seed, defaults) {}
  ~SimRun() {
    for (auto& e : endpoints_) e->Shutdown();
  }

  // A threadless endpoint at 10.0.0.<n>:7000 (n = 1, 2, ... in order of
  // creation); its flow ids are seeded from the run's seed.
  Endpoint* Add(const EndpointConfig& config, Receiver* receiver) {
    const Peer addr{htonl(0x0A000000u + uint32_t(endpoints_.size()) + 1), htons(7000)};
    auto sock = net_.Open(addr, config.batch_max);
    if (!sock.ok()) return nullptr;
    EndpointEnv env;
    env.socket = std::move(*sock);
    env.clock = &clock_;
    env.seed = Mix64(seed_ + endpoints_.size() + 1) | 1;
    env.threaded = false;
    auto e = Endpoint::Create(config, receiver, std::move(env));
    if (!e.ok()) return nullptr;
    endpoints_.push_back(std::move(*e));
    return endpoints_.back().get();
  }

  // Steps every endpoint, then moves the clock to the next thing due (a
  // timer, a pacing slot, an arrival), until done() holds or `limit` of
  // simulated time has passed. True when done() held.
  bool RunUntil(const std::function<bool()>& done, absl::Duration limit) {
    const uint64_t deadline = clock_.MonotonicMicros() + absl::ToInt64Microseconds(limit);
    int idle_turns = 0;
    for (;;) {
      uint64_t next = UINT64_MAX;
      for (auto& e : endpoints_) {
        // A stalled endpoint's thread is busy elsewhere: it reads nothing.
        auto s = stalled_.find(e.get());
        if (s != stalled_.end() && clock_.MonotonicMicros() < s->second) {
          next = std::min(next, s->second);
          continue;
        }
        next = std::min(next, e->Step());
      }
      if (done()) return true;
      // Not while an endpoint is stalled: what waits in its socket is due
      // already, and time would creep a microsecond a turn until the
      // stall ends (each stepped endpoint's Step counts its own arrivals).
      if (!AnyStalled()) next = std::min(next, net_.next_arrival_us());
      const uint64_t now = clock_.MonotonicMicros();
      if (now >= deadline) return false;
      if (next <= now) {
        // Something is due now; a few turns settle it. An endpoint that
        // keeps asking for "now" must not stall simulated time.
        if (++idle_turns < 64) continue;
        next = now + 1;
      }
      idle_turns = 0;
      clock_.Advance(absl::Microseconds(std::min(next, deadline) - now));
    }
  }

  // Runs `limit` of simulated time.
  void RunFor(absl::Duration limit) {
    RunUntil([] { return false; }, limit);
  }

  // `e` is not stepped until the clock reads `until_us`, as a receiver
  // whose thread is busy elsewhere (what arrives meanwhile waits in its
  // socket).
  void Stall(Endpoint* e, uint64_t until_us) { stalled_[e] = until_us; }

  SimNetwork& net() { return net_; }
  FakeClock& clock() { return clock_; }

 private:
  const uint64_t seed_;
  FakeClock clock_;
  SimNetwork net_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::map<const Endpoint*, uint64_t> stalled_;

  bool AnyStalled() const {
    const uint64_t now = clock_.MonotonicMicros();
    for (const auto& [e, until] : stalled_) {
      if (now < until) return true;
    }
    return false;
  }
};

}  // namespace testing
}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_TEST_FLOWS_H_
