// Data-plane wire format, version 3 (spec: docs/wire-format.md).
//
// Every datagram is a fixed 80-byte header followed by a payload; the
// header ends with a 16-byte authentication tag that packet_auth.h writes
// and checks (the codec leaves it alone: EncodeHeader zeroes it). All
// integers are little-endian; DATA payloads are little-endian float32 values
// (payload_bytes is a multiple of 4, so no value is ever split across
// packets). The codec is pure: bytes in, a Packet or a DropReason out; it
// never allocates, never reads past the given length, and is fuzzed
// (fuzz/wire_fuzz.cc). Thread-safe (no state).
#ifndef HETPS_LIB_TRANSPORT_WIRE_H_
#define HETPS_LIB_TRANSPORT_WIRE_H_

#include <cstddef>
#include <cstdint>

namespace hetps {
namespace transport {

constexpr uint16_t kMagic = 0x5048;  // bytes 'H' 'P' on the wire
constexpr uint8_t kVersion = 3;
constexpr size_t kHeaderBytes = 80;
// The tag: the last 16 header bytes; everything before it is authenticated.
constexpr size_t kTagOffset = 64;
constexpr size_t kTagBytes = 16;
// Largest datagram we send or accept: fits loopback and jumbo links; WAN
// links use the configured packet size (default 1400 bytes of payload).
constexpr size_t kDatagramBytesMax = 65000;
constexpr size_t kPayloadBytesMax = kDatagramBytesMax - kHeaderBytes;
// An ACK acknowledges its header's seq plus up to this many more, listed as
// little-endian u32 in its payload (each packet is still acknowledged
// individually; batching only saves datagrams).
constexpr size_t kAckSeqsMax = 256;
// Packets in one flow at most (~22 GB at 1400-byte packets). Decode drops
// a header claiming more (bad_sequence), so nothing sized from
// total_packets can exceed what this bound allows.
constexpr uint32_t kFlowPacketsMax = 1u << 24;

enum class PacketType : uint8_t {
  kData = 1,  // payload: float32 values of one chunk, from chunk_offset
  kAck = 2,   // acknowledges `seq` of `flow_id`, and every u32 seq in the payload
  kStop = 3,  // receiver closed the flow (complete, or early close): stop sending
};

// Why a receiver closed a flow; carried in a STOP's optional payload.
enum class CloseReason : uint8_t {
  kComplete = 0,       // every packet arrived
  kEarlyFraction = 1,  // LTP: past the LT threshold, enough data and every critical packet
  kDeadline = 2,       // LTP: the deadline passed; closed with what had arrived
  kCount,
};
const char* CloseReasonName(CloseReason r);

// A STOP may carry kStopPayloadBytes: u32 reason, u32 packets received.
constexpr size_t kStopPayloadBytes = 8;

enum PacketFlags : uint8_t {
  kFlagCritical = 1 << 0,  // must be delivered (importance "11" in the LTP paper)
  kFlagLast = 1 << 1,      // last packet of its tensor / flow (informational)
  // LTP (loss-tolerant) flow: the receiver may close it early. Its critical
  // packets are numbered first (seq 0 .. k-1, seq 0 always critical) and
  // seq k-1 carries kFlagCriticalEnd, so a receiver knows when every
  // critical packet is in without any extra header field.
  kFlagLossTolerant = 1 << 2,
  kFlagCriticalEnd = 1 << 3,
  // LTP: a lost normal packet resent from the retransmission queue, which is
  // served only once every packet went out once: the sender's first pass is over.
  kFlagResent = 1 << 4,
  // ACK only: chunk_offset holds the receiver's prefix, every seq below it
  // has arrived. ACKs are not resent, so a lost ACK datagram (and with
  // delayed ACKs it names up to 17 packets) would otherwise read as that
  // many lost packets: spurious retransmissions and a congestion round.
  kFlagAckPrefix = 1 << 5,
  // DATA only: the sender's last round trip on this path saw no queue and
  // no loss (CongestionControl::path_clean). A receiver whose ingress
  // share holds its senders learns from it that its link has room
  // (congestion.h, "Share lift").
  kFlagPathClean = 1 << 6,
  // ACK only: `ack_tx` names the transmission that delivered `seq`. A
  // resent packet's ACK is otherwise ambiguous (Karn): it may be for its
  // first copy, and gives no RTT sample; named, it says which copy arrived.
  kFlagAckTx = 1 << 7,
};
constexpr uint8_t kFlagsKnown = kFlagCritical | kFlagLast | kFlagLossTolerant | kFlagCriticalEnd |
                                kFlagResent | kFlagAckPrefix | kFlagPathClean | kFlagAckTx;

struct Header {
  PacketType type = PacketType::kData;
  uint8_t flags = 0;
  uint8_t key_id = 0;  // which job key authenticates it (packet_auth.h)
  uint16_t payload_bytes = 0;
  // The sending endpoint instance (random each time it installs a key) and
  // its datagram counter: together the MAC's nonce, and what the
  // receiver's replay window tracks.
  uint64_t sender = 0;
  uint64_t packet_number = 0;
  uint32_t flow_id = 0;        // unique per sender and transfer
  uint32_t seq = 0;            // packet index within the flow, < total_packets
  uint32_t total_packets = 0;  // packets in the flow (>= 1)
  uint32_t chunk_id = 0;
  uint32_t chunk_offset = 0;  // in floats, within the chunk (ACK: see kFlagAckPrefix)
  uint32_t iteration = 0;
  uint32_t rtprop_us = 0;   // sender's round-trip propagation estimate (0: none yet)
  uint32_t btlbw_kbps = 0;  // sender's bottleneck bandwidth estimate (0: none yet)
  // DATA: the version of the cluster plan (lib/ps/plan.h) the sender's flow
  // belongs to; one value per flow. The transport only carries it: the
  // parameter-server logic refuses older plans and holds newer ones.
  uint32_t plan = 0;
  // DATA: the training samples a push's gradient averages over (servers
  // weight each push by it: per-worker batches, docs/plan.md); 0 when the
  // flow does not say. One value per flow.
  uint32_t samples = 0;
  // ACK with kFlagAckTx: which transmission of `seq` this acknowledges,
  // as the low 32 bits of the packet_number of the DATA datagram that
  // delivered it (a duplicate's, for a duplicate). On the wire where DATA
  // carries `plan`.
  uint32_t ack_tx = 0;
};

// What an ACK names a DATA datagram's transmission by (kFlagAckTx).
inline uint32_t TxOf(uint64_t packet_number) { return static_cast<uint32_t>(packet_number); }

// The prefix an ACK carries (kFlagAckPrefix): every seq below it arrived;
// 0 when it carries none.
inline uint32_t AckPrefix(const Header& h) {
  return (h.flags & kFlagAckPrefix) ? h.chunk_offset : 0;
}

// Why a datagram was dropped. Each reason is a counter label.
enum class DropReason : uint8_t {
  kNone = 0,
  kTruncated,  // shorter than the header, or than header + payload_bytes
  kOversized,  // longer than header + payload_bytes, or over kDatagramBytesMax
  kBadMagic,
  kBadVersion,
  kBadType,
  kBadFlags,     // unknown flag bits
  kMisaligned,   // DATA payload not a whole number of floats
  kBadSequence,  // total_packets == 0 or above kFlowPacketsMax, or seq >= total_packets
  kBadPayload,   // ACK/STOP with a payload, or DATA without one
  kForged,       // authentication tag does not verify under the job's key (endpoint)
  kReplayed,     // a datagram this sender already sent (replay window; endpoint)
  kUnexpected,   // well-formed but no receiver wants this flow (endpoint)
  kBadFlowSize,  // a flow's size is not what the receiver expects of that peer (receiver)
  kOverBudget,   // accepting it would exceed a receive memory budget (endpoint)
  kStaleKey,     // names a key other than the job's (another job's, or none is set)
  kDuplicate,    // a packet of a flow already delivered or closed (a resend; endpoint)
  kCount,
};
const char* DropReasonName(DropReason r);

struct Packet {
  Header header;
  const uint8_t* payload = nullptr;  // points into the decoded buffer
};

// Writes the header into out[0, kHeaderBytes), the tag as zeros.
void EncodeHeader(const Header& h, uint8_t* out);

// The i-th extra seq listed in an ACK's payload (i < payload_bytes / 4).
uint32_t AckSeq(const Packet& p, size_t i);
// Writes `n` seqs as an ACK payload into out[0, 4n).
void EncodeAckSeqs(const uint32_t* seqs, size_t n, uint8_t* out);

// A STOP's payload (kStopPayloadBytes into out) and its decoding. A STOP
// without payload reads as {kComplete, 0}.
struct StopInfo {
  CloseReason reason = CloseReason::kComplete;
  uint32_t received = 0;  // packets the receiver had when it closed
};
void EncodeStop(const StopInfo& s, uint8_t* out);
StopInfo DecodeStop(const Packet& p);

// Decodes and validates one datagram of `len` bytes. On success fills `*p`
// (payload aliases `data`) and returns kNone.
DropReason Decode(const uint8_t* data, size_t len, Packet* p);

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_WIRE_H_
