// The TCP transport's byte stream (wire-format.md, "TCP transport"): the
// connecting side first sends an 8-byte hello (magic, version, its data
// port), then both directions carry frames, each a datagram's header and
// payload exactly (wire.h). TcpStreamReader cuts a connection's received bytes
// into the hello and whole frames; pure (no sockets), so it is tested and
// fuzzed alone (tools/fuzz.sh, tcp_frames_fuzz).
//
// Bounded: the buffer is two maximal frames. A frame's length comes from
// its header's payload_bytes (at most kPayloadBytesMax), so a whole frame
// always fits once the bytes before it are compacted away; what the frame
// says beyond its length is checked by Decode.
#ifndef HETPS_LIB_TRANSPORT_TCP_FRAMES_H_
#define HETPS_LIB_TRANSPORT_TCP_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/transport/wire.h"

namespace hetps {
namespace transport {

constexpr uint32_t kTcpHelloMagic = 0x43545048;  // bytes 'H' 'P' 'T' 'C'
constexpr uint16_t kTcpHelloVersion = 1;
constexpr size_t kTcpHelloBytes = 8;
constexpr size_t kTcpFrameBytesMax = kHeaderBytes + kPayloadBytesMax;

// The hello announcing `data_port` (host order).
void EncodeTcpHello(uint16_t data_port, uint8_t out[kTcpHelloBytes]);

class TcpStreamReader {
 public:
  // `expect_hello`: the accepting side, whose peer opens with a hello.
  explicit TcpStreamReader(bool expect_hello);

  // Where the next read may write, and how much.
  uint8_t* space() { return buf_.data() + len_; }
  size_t space_left() const { return buf_.size() - len_; }
  // `n` bytes (at most space_left()) were written at space().
  void Commit(size_t n);

  enum class Item {
    kNeedMore,    // no whole item buffered: read more (after Compact)
    kHello,       // the hello: hello_port() is the peer's data port
    kFrame,       // a whole frame at *data, *len bytes
    kBadMagic,    // the hello's magic or
    kBadVersion,  // version (or port 0) is wrong: close the connection
  };
  // The next whole item; its bytes stay valid until Compact.
  Item Next(const uint8_t** data, size_t* len);
  uint16_t hello_port() const { return hello_port_; }
  // Drops the items taken, making room for the next read.
  void Compact();
  size_t buffered() const { return len_ - at_; }

 private:
  std::vector<uint8_t> buf_;
  size_t len_ = 0;  // bytes in buf_
  size_t at_ = 0;   // first byte not taken
  bool want_hello_;
  uint16_t hello_port_ = 0;
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_TCP_FRAMES_H_
