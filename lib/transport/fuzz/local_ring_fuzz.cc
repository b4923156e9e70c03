// libFuzzer target for the reader of a local ring (local_ring.h): the
// writer is another process, so its indices and records are any bytes.
// Whatever they are, Read must hand out only records inside the ring's
// data, of at most kDatagramBytesMax bytes, each past the last (the
// indices count modulo 2^64, as the writer's do: a step of 1 to the
// capacity), and stop.
// Built and run by tools/fuzz.sh.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lib/transport/local_ring.h"
#include "lib/transport/wire.h"

using hetps::transport::ShmRing;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kCap = ShmRing::kCapacityMin;
  std::vector<uint64_t> words((ShmRing::kRingHeaderBytes + kCap) / 8, 0);
  uint8_t* mem = reinterpret_cast<uint8_t*>(words.data());
  ShmRing::Init(mem, kCap, 1);
  if (size < 16) return 0;
  // The writer's head (offset 64) and where the reader starts; the rest
  // is the records.
  uint64_t head, cursor;
  std::memcpy(&head, data, 8);
  std::memcpy(&cursor, data + 8, 8);
  std::memcpy(mem + 64, &head, 8);
  const size_t body = std::min<size_t>(size - 16, kCap);
  std::memcpy(mem + ShmRing::kRingHeaderBytes, data + 16, body);
  ShmRing r;
  if (!r.Attach(mem, words.size() * 8, 1)) std::abort();
  const uint8_t* lo = mem + ShmRing::kRingHeaderBytes;
  bool broken = false;
  for (uint64_t n = 0;; ++n) {
    if (n > kCap) std::abort();  // each record is at least 16 bytes
    uint8_t* rec = nullptr;
    size_t len = 0;
    uint64_t sent = 0;
    const uint64_t was = cursor;
    if (!r.Read(&cursor, &rec, &len, &sent, &broken)) break;
    const uint64_t step = cursor - was;
    if (step == 0 || step > kCap || len == 0 || len > hetps::transport::kDatagramBytesMax) {
      std::abort();
    }
    if (rec < lo || rec + len > lo + kCap) std::abort();
    volatile uint8_t sink = rec[0] ^ rec[len - 1];
    (void)sink;
  }
  return 0;
}
