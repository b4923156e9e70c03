// libFuzzer target for the data-plane codec: any bytes must decode to a
// packet or a drop reason without reading out of bounds, and a decoded
// header must re-encode to the very bytes it came from.
// Built and run by tools/fuzz.sh (clang -fsanitize=fuzzer,address,undefined).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "lib/transport/wire.h"

using hetps::transport::Decode;
using hetps::transport::DropReason;
using hetps::transport::EncodeHeader;
using hetps::transport::kHeaderBytes;
using hetps::transport::Packet;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Packet p;
  if (Decode(data, size, &p) != DropReason::kNone) return 0;
  uint8_t again[kHeaderBytes];
  EncodeHeader(p.header, again);
  if (std::memcmp(again, data, kHeaderBytes) != 0) std::abort();
  if (p.payload != data + kHeaderBytes) std::abort();
  if (kHeaderBytes + p.header.payload_bytes != size) std::abort();
  // Touch the payload: ASan catches any length bug above.
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < p.header.payload_bytes; ++i) sink ^= p.payload[i];
  (void)sink;
  return 0;
}
