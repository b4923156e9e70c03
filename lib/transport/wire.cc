#include "lib/transport/wire.h"

#include <cstring>

namespace hetps {
namespace transport {
namespace {

// Explicit little-endian stores and loads: correct on any host, and compiled
// to plain moves on x86 and ARM.
inline void Put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint16_t Get16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t Get32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline uint64_t Get64(const uint8_t* p) {
  return uint64_t(Get32(p)) | (uint64_t(Get32(p + 4)) << 32);
}

}  // namespace

const char* DropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kNone:
      return "none";
    case DropReason::kTruncated:
      return "truncated";
    case DropReason::kOversized:
      return "oversized";
    case DropReason::kBadMagic:
      return "bad_magic";
    case DropReason::kBadVersion:
      return "bad_version";
    case DropReason::kBadType:
      return "bad_type";
    case DropReason::kBadFlags:
      return "bad_flags";
    case DropReason::kMisaligned:
      return "misaligned";
    case DropReason::kBadSequence:
      return "bad_sequence";
    case DropReason::kBadPayload:
      return "bad_payload";
    case DropReason::kForged:
      return "forged";
    case DropReason::kReplayed:
      return "replayed";
    case DropReason::kUnexpected:
      return "unexpected";
    case DropReason::kBadFlowSize:
      return "bad_flow_size";
    case DropReason::kOverBudget:
      return "over_budget";
    case DropReason::kStaleKey:
      return "stale_key";
    case DropReason::kDuplicate:
      return "duplicate";
    case DropReason::kCount:
      break;
  }
  return "unknown";
}

const char* CloseReasonName(CloseReason r) {
  switch (r) {
    case CloseReason::kComplete:
      return "complete";
    case CloseReason::kEarlyFraction:
      return "fraction";
    case CloseReason::kDeadline:
      return "deadline";
    case CloseReason::kCount:
      break;
  }
  return "unknown";
}

// Layout (offsets in bytes):
//  0 magic u16 | 2 version u8 | 3 type u8 | 4 flags u8 | 5 key_id u8
//  6 payload_bytes u16 | 8 sender u64 | 16 packet_number u64
// 24 flow_id u32 | 28 seq u32 | 32 total_packets u32 | 36 chunk_id u32
// 40 chunk_offset u32 | 44 iteration u32 | 48 rtprop_us u32
// 52 btlbw_kbps u32 | 56 plan u32 (ACK: ack_tx) | 60 samples u32 | 64 tag [16]
// 80 payload
void EncodeHeader(const Header& h, uint8_t* out) {
  Put16(out + 0, kMagic);
  out[2] = kVersion;
  out[3] = static_cast<uint8_t>(h.type);
  out[4] = h.flags;
  out[5] = h.key_id;
  Put16(out + 6, h.payload_bytes);
  Put64(out + 8, h.sender);
  Put64(out + 16, h.packet_number);
  Put32(out + 24, h.flow_id);
  Put32(out + 28, h.seq);
  Put32(out + 32, h.total_packets);
  Put32(out + 36, h.chunk_id);
  Put32(out + 40, h.chunk_offset);
  Put32(out + 44, h.iteration);
  Put32(out + 48, h.rtprop_us);
  Put32(out + 52, h.btlbw_kbps);
  Put32(out + 56, h.type == PacketType::kAck ? h.ack_tx : h.plan);
  Put32(out + 60, h.samples);
  std::memset(out + kTagOffset, 0, kTagBytes);
}

uint32_t AckSeq(const Packet& p, size_t i) { return Get32(p.payload + 4 * i); }

void EncodeAckSeqs(const uint32_t* seqs, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) Put32(out + 4 * i, seqs[i]);
}

void EncodeStop(const StopInfo& s, uint8_t* out) {
  Put32(out, static_cast<uint32_t>(s.reason));
  Put32(out + 4, s.received);
}

StopInfo DecodeStop(const Packet& p) {
  StopInfo s;
  if (p.header.payload_bytes == kStopPayloadBytes) {
    s.reason = static_cast<CloseReason>(Get32(p.payload));  // range checked by Decode
    s.received = Get32(p.payload + 4);
  }
  return s;
}

DropReason Decode(const uint8_t* data, size_t len, Packet* p) {
  if (data == nullptr || len < kHeaderBytes) return DropReason::kTruncated;
  if (len > kDatagramBytesMax) return DropReason::kOversized;
  if (Get16(data) != kMagic) return DropReason::kBadMagic;
  if (data[2] != kVersion) return DropReason::kBadVersion;
  const uint8_t type = data[3];
  if (type < uint8_t(PacketType::kData) || type > uint8_t(PacketType::kStop)) {
    return DropReason::kBadType;
  }
  Header& h = p->header;
  h.type = static_cast<PacketType>(type);
  h.flags = data[4];
  if ((h.flags & ~kFlagsKnown) != 0) return DropReason::kBadFlags;
  h.key_id = data[5];
  h.payload_bytes = Get16(data + 6);
  if (len < kHeaderBytes + h.payload_bytes) return DropReason::kTruncated;
  if (len > kHeaderBytes + h.payload_bytes) return DropReason::kOversized;
  if (h.type == PacketType::kData) {
    if (h.payload_bytes == 0) return DropReason::kBadPayload;
    if (h.payload_bytes % sizeof(float) != 0) return DropReason::kMisaligned;
  } else if (h.type == PacketType::kAck) {
    if (h.payload_bytes % sizeof(uint32_t) != 0) return DropReason::kMisaligned;
    if (h.payload_bytes > kAckSeqsMax * sizeof(uint32_t)) return DropReason::kBadPayload;
  } else if (h.type == PacketType::kStop && h.payload_bytes == kStopPayloadBytes) {
    if (Get32(data + kHeaderBytes) >= uint32_t(CloseReason::kCount)) return DropReason::kBadPayload;
  } else if (h.payload_bytes != 0) {
    return DropReason::kBadPayload;
  }
  h.sender = Get64(data + 8);
  h.packet_number = Get64(data + 16);
  h.flow_id = Get32(data + 24);
  h.seq = Get32(data + 28);
  h.total_packets = Get32(data + 32);
  if (h.total_packets == 0 || h.total_packets > kFlowPacketsMax || h.seq >= h.total_packets) {
    return DropReason::kBadSequence;
  }
  if (h.type == PacketType::kStop && h.payload_bytes == kStopPayloadBytes &&
      Get32(data + kHeaderBytes + 4) > h.total_packets) {
    return DropReason::kBadPayload;  // more packets received than the flow has
  }
  h.chunk_id = Get32(data + 36);
  h.chunk_offset = Get32(data + 40);
  if ((h.flags & kFlagPathClean) && h.type != PacketType::kData) return DropReason::kBadFlags;
  if ((h.flags & kFlagAckTx) && h.type != PacketType::kAck) return DropReason::kBadFlags;
  if (h.flags & kFlagAckPrefix) {
    if (h.type != PacketType::kAck) return DropReason::kBadFlags;
    if (h.chunk_offset > h.total_packets) return DropReason::kBadSequence;
  }
  h.iteration = Get32(data + 44);
  h.rtprop_us = Get32(data + 48);
  h.btlbw_kbps = Get32(data + 52);
  h.plan = h.type == PacketType::kAck ? 0 : Get32(data + 56);
  h.ack_tx = h.type == PacketType::kAck ? Get32(data + 56) : 0;
  h.samples = Get32(data + 60);
  p->payload = data + kHeaderBytes;
  return DropReason::kNone;
}

}  // namespace transport
}  // namespace hetps
