#include "lib/transport/tcp_frames.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

namespace hetps {
namespace transport {
namespace {

// A frame of `payload` bytes: only payload_bytes (header offset 6) matters
// to the reader; the rest is a pattern to compare.
std::vector<uint8_t> Frame(uint16_t payload, uint8_t fill) {
  std::vector<uint8_t> f(kHeaderBytes + payload, fill);
  f[6] = uint8_t(payload);
  f[7] = uint8_t(payload >> 8);
  return f;
}

// Feeds `stream` in reads of `step` bytes; returns the items in order.
std::vector<std::vector<uint8_t>> ReadAll(TcpStreamReader& r, const std::vector<uint8_t>& stream,
                                          size_t step, TcpStreamReader::Item* last) {
  std::vector<std::vector<uint8_t>> items;
  size_t fed = 0;
  *last = TcpStreamReader::Item::kNeedMore;
  while (fed < stream.size()) {
    const size_t k = std::min({step, r.space_left(), stream.size() - fed});
    std::memcpy(r.space(), stream.data() + fed, k);
    r.Commit(k);
    fed += k;
    for (;;) {
      const uint8_t* d = nullptr;
      size_t len = 0;
      *last = r.Next(&d, &len);
      if (*last == TcpStreamReader::Item::kNeedMore) break;
      if (*last != TcpStreamReader::Item::kHello && *last != TcpStreamReader::Item::kFrame) {
        return items;
      }
      items.emplace_back(d, d + len);
    }
    r.Compact();
  }
  return items;
}

TEST_CASE("the stream reader cuts a hello and frames at any read size", "[tcp]") {
  std::vector<uint8_t> stream(kTcpHelloBytes);
  EncodeTcpHello(7001, stream.data());
  const std::vector<std::vector<uint8_t>> frames = {
      Frame(0, 1), Frame(1400, 2), Frame(uint16_t(kPayloadBytesMax), 3), Frame(4, 4)};
  for (const auto& f : frames) stream.insert(stream.end(), f.begin(), f.end());
  for (size_t step :
       {size_t(1), size_t(7), size_t(71), size_t(1500), size_t(65536), stream.size()}) {
    TcpStreamReader r(/*expect_hello=*/true);
    TcpStreamReader::Item last;
    const auto items = ReadAll(r, stream, step, &last);
    INFO("read size " << step);
    REQUIRE(items.size() == frames.size() + 1);
    CHECK(r.hello_port() == 7001);
    for (size_t i = 0; i < frames.size(); ++i) CHECK(items[i + 1] == frames[i]);
    CHECK(r.buffered() == 0);
  }
}

TEST_CASE("a bad hello is refused before any frame", "[tcp]") {
  std::vector<uint8_t> hello(kTcpHelloBytes);
  EncodeTcpHello(7001, hello.data());
  std::vector<uint8_t> bad_magic = hello, bad_version = hello, port0(kTcpHelloBytes);
  bad_magic[0] ^= 1;
  bad_version[4] = 9;
  EncodeTcpHello(0, port0.data());
  for (const auto& [bytes, want] : {std::pair{bad_magic, TcpStreamReader::Item::kBadMagic},
                                    std::pair{bad_version, TcpStreamReader::Item::kBadVersion},
                                    std::pair{port0, TcpStreamReader::Item::kBadVersion}}) {
    TcpStreamReader r(true);
    TcpStreamReader::Item last;
    auto stream = bytes;
    const auto f = Frame(8, 5);
    stream.insert(stream.end(), f.begin(), f.end());
    CHECK(ReadAll(r, stream, 3, &last).empty());
    CHECK(last == want);
  }
  // The connecting side's reader expects no hello: its first bytes are a frame.
  TcpStreamReader out(false);
  TcpStreamReader::Item last;
  const auto f = Frame(8, 6);
  const auto items = ReadAll(out, f, 100, &last);
  REQUIRE(items.size() == 1);
  CHECK(items[0] == f);
}

TEST_CASE("a frame naming more than the largest payload is cut, not waited for", "[tcp]") {
  // payload_bytes 65535 > kPayloadBytesMax: the reader hands out at most a
  // maximal frame (Decode then refuses it) and never needs more buffer.
  std::vector<uint8_t> stream = Frame(65535, 9);
  TcpStreamReader r(false);
  TcpStreamReader::Item last;
  const auto items = ReadAll(r, stream, 4096, &last);
  REQUIRE(items.size() == 1);
  CHECK(items[0].size() == kTcpFrameBytesMax);
}

}  // namespace
}  // namespace transport
}  // namespace hetps
