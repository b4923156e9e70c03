#include "lib/transport/tcp_frames.h"

#include <cstring>

namespace hetps {
namespace transport {
namespace {

uint16_t Get16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

}  // namespace

void EncodeTcpHello(uint16_t data_port, uint8_t out[kTcpHelloBytes]) {
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(kTcpHelloMagic >> (8 * i));
  out[4] = uint8_t(kTcpHelloVersion);
  out[5] = uint8_t(kTcpHelloVersion >> 8);
  out[6] = uint8_t(data_port);
  out[7] = uint8_t(data_port >> 8);
}

TcpStreamReader::TcpStreamReader(bool expect_hello)
    : buf_(2 * kTcpFrameBytesMax), want_hello_(expect_hello) {}

void TcpStreamReader::Commit(size_t n) { len_ += n <= space_left() ? n : space_left(); }

TcpStreamReader::Item TcpStreamReader::Next(const uint8_t** data, size_t* len) {
  const uint8_t* p = buf_.data() + at_;
  const size_t have = len_ - at_;
  if (want_hello_) {
    if (have < kTcpHelloBytes) return Item::kNeedMore;
    if (Get32(p) != kTcpHelloMagic) return Item::kBadMagic;
    if (Get16(p + 4) != kTcpHelloVersion || Get16(p + 6) == 0) return Item::kBadVersion;
    hello_port_ = Get16(p + 6);
    want_hello_ = false;
    at_ += kTcpHelloBytes;
    *data = p;
    *len = kTcpHelloBytes;
    return Item::kHello;
  }
  if (have < kHeaderBytes) return Item::kNeedMore;
  // payload_bytes (header offset 6) is 16 bits: a frame is at most
  // kHeaderBytes + 65535, under two maximal frames. One naming more than
  // kPayloadBytesMax is cut here and refused by Decode as oversized.
  size_t frame = kHeaderBytes + Get16(p + 6);
  if (frame > kTcpFrameBytesMax) frame = kTcpFrameBytesMax;
  if (have < frame) return Item::kNeedMore;
  at_ += frame;
  *data = p;
  *len = frame;
  return Item::kFrame;
}

void TcpStreamReader::Compact() {
  if (at_ == 0) return;
  const size_t rest = len_ - at_;
  std::memmove(buf_.data(), buf_.data() + at_, rest);
  len_ = rest;
  at_ = 0;
}

}  // namespace transport
}  // namespace hetps
