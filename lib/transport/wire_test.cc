#include "lib/transport/wire.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

namespace hetps {
namespace transport {
namespace {

Header DataHeader(uint16_t payload_bytes) {
  Header h;
  h.type = PacketType::kData;
  h.flags = kFlagCritical;
  h.payload_bytes = payload_bytes;
  h.key_id = 0x5C;
  h.sender = 0x0123456789ABCDEFull;
  h.packet_number = 0x1122334455667788ull;
  h.flow_id = 7;
  h.seq = 3;
  h.total_packets = 10;
  h.chunk_id = 42;
  h.chunk_offset = 350;
  h.iteration = 99;
  h.rtprop_us = 20000;
  h.btlbw_kbps = 100000;
  h.plan = 0x0A0B0C0D;
  h.samples = 0x01020304;
  return h;
}

std::vector<uint8_t> Datagram(const Header& h, size_t payload_len) {
  std::vector<uint8_t> d(kHeaderBytes + payload_len, 0xAB);
  EncodeHeader(h, d.data());
  return d;
}

TEST_CASE("data packet round trip", "[wire]") {
  auto d = Datagram(DataHeader(16), 16);
  Packet p;
  REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  CHECK(p.header.type == PacketType::kData);
  CHECK(p.header.flags == kFlagCritical);
  CHECK(p.header.key_id == 0x5C);
  CHECK(p.header.sender == 0x0123456789ABCDEFull);
  CHECK(p.header.packet_number == 0x1122334455667788ull);
  CHECK(p.header.flow_id == 7);
  CHECK(p.header.seq == 3);
  CHECK(p.header.total_packets == 10);
  CHECK(p.header.chunk_id == 42);
  CHECK(p.header.chunk_offset == 350);
  CHECK(p.header.iteration == 99);
  CHECK(p.header.rtprop_us == 20000);
  CHECK(p.header.btlbw_kbps == 100000);
  CHECK(p.header.plan == 0x0A0B0C0D);
  CHECK(p.header.samples == 0x01020304);
  CHECK(p.payload == d.data() + kHeaderBytes);
}

TEST_CASE("byte order on the wire is little-endian", "[wire]") {
  auto d = Datagram(DataHeader(4), 4);
  CHECK(d[0] == 'H');
  CHECK(d[1] == 'P');
  CHECK(d[2] == 3);
  CHECK(d[5] == 0x5C);
  CHECK(d[8] == 0xEF);                                                  // sender low byte first
  CHECK(d[16] == 0x88);                                                 // packet number
  CHECK(d[24] == 7);                                                    // flow_id
  CHECK(d[56] == 0x0D);                                                 // plan
  for (size_t i = kTagOffset; i < kHeaderBytes; ++i) CHECK(d[i] == 0);  // the tag: not the codec's
}

TEST_CASE("every malformation maps to its drop reason", "[wire]") {
  Packet p;
  auto good = Datagram(DataHeader(8), 8);
  CHECK(Decode(good.data(), kHeaderBytes - 1, &p) == DropReason::kTruncated);
  CHECK(Decode(good.data(), good.size() - 1, &p) == DropReason::kTruncated);
  CHECK(Decode(nullptr, 0, &p) == DropReason::kTruncated);
  auto longer = good;
  longer.push_back(0);
  CHECK(Decode(longer.data(), longer.size(), &p) == DropReason::kOversized);
  std::vector<uint8_t> huge(kDatagramBytesMax + 1);
  EncodeHeader(DataHeader(8), huge.data());
  CHECK(Decode(huge.data(), huge.size(), &p) == DropReason::kOversized);
  auto m = good;
  m[0] ^= 1;
  CHECK(Decode(m.data(), m.size(), &p) == DropReason::kBadMagic);
  m = good;
  m[2] = 1;  // version 1: no authentication; refused, not misread
  CHECK(Decode(m.data(), m.size(), &p) == DropReason::kBadVersion);
  m = good;
  m[2] = 2;  // version 2: no plan field, the tag 8 bytes earlier
  CHECK(Decode(m.data(), m.size(), &p) == DropReason::kBadVersion);
  m = good;
  m[3] = 9;
  CHECK(Decode(m.data(), m.size(), &p) == DropReason::kBadType);
  m = good;
  m[4] = 0x80;
  CHECK(Decode(m.data(), m.size(), &p) == DropReason::kBadFlags);
  auto odd = Datagram(DataHeader(6), 6);
  CHECK(Decode(odd.data(), odd.size(), &p) == DropReason::kMisaligned);
  auto empty = Datagram(DataHeader(0), 0);
  CHECK(Decode(empty.data(), empty.size(), &p) == DropReason::kBadPayload);
  Header ack = DataHeader(6);
  ack.type = PacketType::kAck;
  auto ack_odd = Datagram(ack, 6);
  CHECK(Decode(ack_odd.data(), ack_odd.size(), &p) == DropReason::kMisaligned);
  ack.payload_bytes = 4 * (kAckSeqsMax + 1);
  auto ack_long = Datagram(ack, ack.payload_bytes);
  CHECK(Decode(ack_long.data(), ack_long.size(), &p) == DropReason::kBadPayload);
  Header stop = DataHeader(4);
  stop.type = PacketType::kStop;
  auto stop_with_payload = Datagram(stop, 4);
  CHECK(Decode(stop_with_payload.data(), stop_with_payload.size(), &p) == DropReason::kBadPayload);
  Header seq = DataHeader(4);
  seq.seq = 10;  // == total_packets
  auto s = Datagram(seq, 4);
  CHECK(Decode(s.data(), s.size(), &p) == DropReason::kBadSequence);
  seq.total_packets = 0;
  seq.seq = 0;
  s = Datagram(seq, 4);
  CHECK(Decode(s.data(), s.size(), &p) == DropReason::kBadSequence);
  // Sizes a receiver would allocate from: bounded by the codec itself.
  for (uint32_t total : {kFlowPacketsMax + 1, 0xFFFFFF00u, 0xFFFFFFFFu}) {
    seq.total_packets = total;
    s = Datagram(seq, 4);
    CHECK(Decode(s.data(), s.size(), &p) == DropReason::kBadSequence);
  }
  seq.total_packets = kFlowPacketsMax;
  seq.seq = kFlowPacketsMax - 1;
  s = Datagram(seq, 4);
  CHECK(Decode(s.data(), s.size(), &p) == DropReason::kNone);
}

TEST_CASE("a STOP may carry its close reason and packets received", "[wire]") {
  Header h = DataHeader(kStopPayloadBytes);
  h.type = PacketType::kStop;
  auto d = Datagram(h, kStopPayloadBytes);
  EncodeStop({CloseReason::kDeadline, 7}, d.data() + kHeaderBytes);
  Packet p;
  REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  const StopInfo s = DecodeStop(p);
  CHECK(s.reason == CloseReason::kDeadline);
  CHECK(s.received == 7);
  // An unknown reason, or more packets than the flow has, is refused.
  EncodeStop({CloseReason::kCount, 7}, d.data() + kHeaderBytes);
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kBadPayload);
  EncodeStop({CloseReason::kEarlyFraction, h.total_packets + 1}, d.data() + kHeaderBytes);
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kBadPayload);
  EncodeStop({CloseReason::kEarlyFraction, h.total_packets}, d.data() + kHeaderBytes);
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  CHECK(std::string(CloseReasonName(CloseReason::kEarlyFraction)) == "fraction");
}

TEST_CASE("loss-tolerant flags decode; unknown flag bits do not", "[wire]") {
  Header h = DataHeader(8);
  h.flags = kFlagLossTolerant | kFlagCriticalEnd | kFlagCritical;
  auto d = Datagram(h, 8);
  Packet p;
  REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  CHECK(p.header.flags == (kFlagLossTolerant | kFlagCriticalEnd | kFlagCritical));
  d[4] = kFlagResent | kFlagLossTolerant;
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  d[4] = kFlagPathClean;
  REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  CHECK(p.header.flags == kFlagPathClean);
  d[4] = kFlagAckTx;  // on DATA
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kBadFlags);
  d[4] = kFlagAckPrefix;  // on DATA
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kBadFlags);
  Header stop = DataHeader(0);  // path-clean on anything but DATA
  stop.type = PacketType::kStop;
  stop.flags = kFlagPathClean;
  d = Datagram(stop, 0);
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kBadFlags);
}

TEST_CASE("an ack may carry its flow's prefix, never past the flow", "[wire]") {
  Header h = DataHeader(0);
  h.type = PacketType::kAck;
  Packet p;
  auto d = Datagram(h, 0);
  REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  CHECK(AckPrefix(p.header) == 0);  // chunk_offset 350 is no prefix without the flag
  h.flags = kFlagAckPrefix;
  for (uint32_t prefix : {0u, 1u, 10u}) {
    h.chunk_offset = prefix;
    d = Datagram(h, 0);
    REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
    CHECK(AckPrefix(p.header) == prefix);
  }
  h.chunk_offset = 11;  // total_packets is 10
  d = Datagram(h, 0);
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kBadSequence);
  h.type = PacketType::kStop;
  h.chunk_offset = 1;
  d = Datagram(h, 0);
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kBadFlags);
}

TEST_CASE("an ack may name the transmission that delivered its seq", "[wire]") {
  Header h = DataHeader(0);
  h.type = PacketType::kAck;
  h.flags = kFlagAckTx | kFlagAckPrefix;
  h.chunk_offset = 2;
  h.ack_tx = TxOf(0x1122334455667788ull);
  h.plan = 0;  // an ACK has no plan: ack_tx takes its place
  Packet p;
  auto d = Datagram(h, 0);
  REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  CHECK(p.header.flags == (kFlagAckTx | kFlagAckPrefix));
  CHECK(p.header.ack_tx == 0x55667788u);
  CHECK(p.header.plan == 0);
  CHECK(d[56] == 0x88);
  // DATA keeps its plan there, and never reads an ack_tx.
  Header data = DataHeader(8);
  data.ack_tx = 7;
  d = Datagram(data, 8);
  REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  CHECK(p.header.plan == data.plan);
  CHECK(p.header.ack_tx == 0);
  Header stop = DataHeader(0);  // on a STOP
  stop.type = PacketType::kStop;
  stop.flags = kFlagAckTx;
  d = Datagram(stop, 0);
  CHECK(Decode(d.data(), d.size(), &p) == DropReason::kBadFlags);
}

TEST_CASE("ack and stop carry no payload", "[wire]") {
  Packet p;
  for (PacketType t : {PacketType::kAck, PacketType::kStop}) {
    Header h = DataHeader(0);
    h.type = t;
    auto d = Datagram(h, 0);
    REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
    CHECK(p.header.type == t);
  }
}

TEST_CASE("an ack lists extra seqs in its payload", "[wire]") {
  Header h = DataHeader(12);
  h.type = PacketType::kAck;
  auto d = Datagram(h, 12);
  const uint32_t seqs[] = {4, 5, 0xFFFFFFF0u};
  EncodeAckSeqs(seqs, 3, d.data() + kHeaderBytes);
  Packet p;
  REQUIRE(Decode(d.data(), d.size(), &p) == DropReason::kNone);
  CHECK(p.header.seq == 3);
  CHECK(AckSeq(p, 0) == 4);
  CHECK(AckSeq(p, 2) == 0xFFFFFFF0u);
}

TEST_CASE("drop reasons have distinct names", "[wire]") {
  std::vector<std::string> names;
  for (int r = 0; r < int(DropReason::kCount); ++r) {
    names.push_back(DropReasonName(DropReason(r)));
  }
  std::sort(names.begin(), names.end());
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
}

}  // namespace
}  // namespace transport
}  // namespace hetps
