// libFuzzer target for the data-plane codec: any bytes must decode to a
// packet or a drop reason without reading out of bounds, and a decoded
// header must re-encode to the very bytes it came from (up to the tag,
// which is packet_auth's); so must a STOP's
// close payload (reason, packets received) and an ACK's seq list.
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
using hetps::transport::PacketType;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Packet p;
  if (Decode(data, size, &p) != DropReason::kNone) return 0;
  uint8_t again[kHeaderBytes];
  EncodeHeader(p.header, again);
  // Everything up to the tag (packet_auth.h writes and checks the tag).
  if (std::memcmp(again, data, hetps::transport::kTagOffset) != 0) std::abort();
  if (p.payload != data + kHeaderBytes) std::abort();
  if (kHeaderBytes + p.header.payload_bytes != size) std::abort();
  if (p.header.type == PacketType::kStop && p.header.payload_bytes > 0) {
    const hetps::transport::StopInfo info = hetps::transport::DecodeStop(p);
    if (info.reason >= hetps::transport::CloseReason::kCount) std::abort();
    if (info.received > p.header.total_packets) std::abort();
    uint8_t stop[hetps::transport::kStopPayloadBytes];
    hetps::transport::EncodeStop(info, stop);
    if (std::memcmp(stop, p.payload, sizeof(stop)) != 0) std::abort();
  }
  if (p.header.type == PacketType::kAck) {
    const size_t n = p.header.payload_bytes / 4;
    if (n > hetps::transport::kAckSeqsMax) std::abort();
    uint32_t seqs[hetps::transport::kAckSeqsMax];
    for (size_t i = 0; i < n; ++i) seqs[i] = hetps::transport::AckSeq(p, i);
    uint8_t back[4 * hetps::transport::kAckSeqsMax];
    hetps::transport::EncodeAckSeqs(seqs, n, back);
    if (std::memcmp(back, p.payload, 4 * n) != 0) std::abort();
  }
  // Touch the payload: ASan catches any length bug above.
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < p.header.payload_bytes; ++i) sink ^= p.payload[i];
  (void)sink;
  return 0;
}
