// Record framing: a record decodes to what was encoded; every damaged or
// foreign header is refused for its own reason; the payload reader never
// reads or allocates past the bytes it has.
#include "lib/storage/record.h"

#include <catch2/catch.hpp>
#include <limits>

namespace hetps {
namespace storage {
namespace {

TEST_CASE("a record decodes to its kind and payload", "[storage]") {
  for (std::string payload : {std::string(), std::string("x"), std::string(100000, '\x7f')}) {
    const std::string rec = EncodeRecord(RecordKind::kChunk, payload);
    CHECK(rec.size() == kRecordHeaderBytes + payload.size());
    auto r = DecodeRecord(rec);
    REQUIRE(r.ok());
    CHECK(r->kind == RecordKind::kChunk);
    CHECK(r->payload == payload);
  }
}

TEST_CASE("damaged records are refused, each for its reason", "[storage]") {
  const std::string good = EncodeRecord(RecordKind::kMeta, "payload bytes");
  auto with = [&](size_t at, char v) {
    std::string r = good;
    r[at] = v;
    return r;
  };
  CHECK(DecodeRecord(good.substr(0, 10)).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(DecodeRecord(with(0, 'X')).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(DecodeRecord(with(4, 2)).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(DecodeRecord(with(6, 9)).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(DecodeRecord(with(8, 1)).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(DecodeRecord(with(20, 1)).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(DecodeRecord(good + "x").status().code() == absl::StatusCode::kInvalidArgument);
  // Any payload or CRC byte changed: DataLoss.
  for (size_t at : {size_t{16}, size_t{19}, kRecordHeaderBytes, good.size() - 1}) {
    INFO("byte " << at);
    CHECK(DecodeRecord(with(at, char(good[at] ^ 0x01))).status().code() ==
          absl::StatusCode::kDataLoss);
  }
  // The kind is covered by the CRC: a chunk payload under a meta header fails.
  std::string moved = EncodeRecord(RecordKind::kChunk, "payload bytes");
  moved[6] = static_cast<char>(RecordKind::kMeta);
  CHECK(DecodeRecord(moved).status().code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("the reader refuses lengths beyond its bytes before allocating", "[storage]") {
  ByteWriter w;
  w.U64(std::numeric_limits<uint64_t>::max() / 2);  // a float count no buffer holds
  ByteReader r(w.bytes());
  std::vector<float> v;
  CHECK_FALSE(r.Floats(&v));
  CHECK(v.empty());
  CHECK_FALSE(r.ok());

  ByteWriter s;
  s.String("abcdef");
  ByteReader short_max(s.bytes());
  std::string out;
  CHECK_FALSE(short_max.String(&out, 5));  // over the caller's bound
  ByteReader fits(s.bytes());
  CHECK(fits.String(&out, 6));
  CHECK(out == "abcdef");
  uint8_t b;
  CHECK_FALSE(fits.U8(&b));  // nothing left
}

TEST_CASE("floats and integers round-trip little-endian", "[storage]") {
  ByteWriter w;
  w.U8(7);
  w.U32(0xA1B2C3D4);
  w.U64(0x0102030405060708ull);
  w.Floats({1.5f, -0.0f, std::numeric_limits<float>::infinity()});
  CHECK(w.bytes().substr(1, 4) == std::string("\xD4\xC3\xB2\xA1", 4));
  ByteReader r(w.bytes());
  uint8_t a;
  uint32_t b;
  uint64_t c;
  std::vector<float> f;
  REQUIRE((r.U8(&a) && r.U32(&b) && r.U64(&c) && r.Floats(&f)));
  CHECK(a == 7);
  CHECK(b == 0xA1B2C3D4);
  CHECK(c == 0x0102030405060708ull);
  CHECK(f == std::vector<float>{1.5f, -0.0f, std::numeric_limits<float>::infinity()});
  CHECK(r.left() == 0);
}

TEST_CASE("Crc32 is zlib's CRC-32 and continues across pieces", "[storage]") {
  CHECK(Crc32("123456789") == 0xCBF43926u);  // the standard check value
  CHECK(Crc32("6789", Crc32("12345")) == 0xCBF43926u);
}

}  // namespace
}  // namespace storage
}  // namespace hetps
