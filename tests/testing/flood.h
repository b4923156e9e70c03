// Hostile traffic for tests: captures the data plane's datagrams on
// loopback and floods a daemon's data port with what an attacker on the
// path could send. Needs CAP_NET_RAW for capture and for replays from the
// captured packets' own (spoofed) source addresses; without it those parts
// report that they could not run. Not thread-safe per object.
#ifndef HETPS_TESTS_TESTING_FLOOD_H_
#define HETPS_TESTS_TESTING_FLOOD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/transport/datagram_socket.h"

namespace hetps {
namespace testing {

struct Captured {
  transport::Peer from, to;
  std::vector<uint8_t> bytes;  // the UDP payload
};

// Captures UDP datagrams on the loopback device whose destination port is
// one of `ports` (network order), up to `max`, on its own thread.
class Capture {
 public:
  static absl::StatusOr<std::unique_ptr<Capture>> Start(std::vector<uint16_t> ports, size_t max);
  ~Capture();
  // Stops capturing; what was captured.
  std::vector<Captured> Stop();

 private:
  Capture() = default;
  void Run();
  int fd_ = -1;
  std::vector<uint16_t> ports_;
  size_t max_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<Captured> got_ ABSL_GUARDED_BY(mu_);
};

// What one Flood sent, by kind.
struct FloodCounts {
  uint64_t random_bytes = 0;
  uint64_t random_headers = 0;       // valid v2 layout, every field random
  uint64_t wrong_key = 0;            // sealed under another key, with the job's key id
  uint64_t impossible_size = 0;      // flows of more than 2^24 packets
  uint64_t replay_same_source = 0;   // captured datagrams again, from their own source
  uint64_t replay_other_source = 0;  // captured datagrams from another address
  uint64_t total() const {
    return random_bytes + random_headers + wrong_key + impossible_size + replay_same_source +
           replay_other_source;
  }
};

struct FloodSpec {
  transport::Peer to;
  uint64_t per_kind = 200'000;    // datagrams of each kind
  uint64_t rate_per_s = 150'000;  // paced so the kernel's buffers rarely overflow
  uint8_t key_id = 0;             // the job's (learned from a capture)
  std::vector<Captured> replays;  // captured datagrams addressed to `to`
  uint64_t seed = 1;
};

// Sends the flood; the replays from their own source only when raw
// sockets are allowed (else replay_same_source is 0).
absl::StatusOr<FloodCounts> Flood(const FloodSpec& spec);

// The kernel's count of datagrams dropped at UDP sockets bound to `port`
// (network order; /proc/net/udp "drops").
uint64_t KernelUdpDrops(uint16_t port);
// Resident set size of `pid`, bytes (/proc/PID/status VmRSS).
uint64_t RssBytes(int pid);

}  // namespace testing
}  // namespace hetps

#endif  // HETPS_TESTS_TESTING_FLOOD_H_
