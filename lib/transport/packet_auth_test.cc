// PacketAuth and ReplayWindow: a sealed datagram verifies once, from its
// own address, under its own key; any changed byte, another address, a
// repeat, a number older than the window or another key id is refused,
// each for its own reason, and nothing is recorded for refused ones.
#include "lib/transport/packet_auth.h"

#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <vector>

namespace hetps {
namespace transport {
namespace {

DataKey Key(uint8_t id, uint8_t fill) {
  DataKey k;
  k.id = id;
  k.bytes.fill(fill);
  k.set = true;
  return k;
}

std::function<uint64_t()> Fixed(uint64_t v) {
  return [v] { return v; };
}

const Peer kA{htonl(0x0A000001), htons(7000)};
const Peer kB{htonl(0x0A000002), htons(7000)};

// A sealed DATA datagram from `self` with a 64-byte payload.
std::vector<uint8_t> Sealed(PacketAuth& auth, const Peer& self, uint32_t seq = 0,
                            size_t body = 64) {
  Header h;
  h.type = PacketType::kData;
  h.key_id = auth.key_id();
  h.packet_number = auth.NextPacketNumber();
  h.sender = auth.sender();
  h.payload_bytes = static_cast<uint32_t>(body);
  h.total_packets = 10;
  h.seq = seq;
  std::vector<uint8_t> d(kHeaderBytes + body);
  EncodeHeader(h, d.data());
  for (size_t i = 0; i < body; ++i) d[kHeaderBytes + i] = uint8_t(i * 7);
  auth.Seal(self, d.data(), d.data() + kHeaderBytes, body);
  return d;
}

DropReason Check(PacketAuth& auth, const Peer& from, const std::vector<uint8_t>& d) {
  Packet p;
  const DropReason why = Decode(d.data(), d.size(), &p);
  if (why != DropReason::kNone) return why;
  return auth.Verify(from, p.header, d.data(), p.payload, p.header.payload_bytes);
}

TEST_CASE("a sealed datagram verifies once, from its address, under its key", "[auth]") {
  PacketAuth tx(true, Fixed(1)), rx(true, Fixed(2));
  tx.SetKey(Key(3, 0xAB));
  rx.SetKey(Key(3, 0xAB));
  const auto d = Sealed(tx, kA);
  CHECK(Check(rx, kB, d) == DropReason::kForged);  // replayed from another address
  CHECK(Check(rx, kA, d) == DropReason::kNone);
  CHECK(Check(rx, kA, d) == DropReason::kReplayed);
  CHECK(rx.senders() == 1);
}

TEST_CASE("every byte is covered: any change is forged", "[auth]") {
  PacketAuth tx(true, Fixed(1)), rx(true, Fixed(2));
  tx.SetKey(Key(1, 0x42));
  rx.SetKey(Key(1, 0x42));
  const auto d = Sealed(tx, kA);
  for (size_t i = 0; i < d.size(); ++i) {
    if (i == 5) continue;  // the key id: refused earlier, as stale_key
    auto bad = d;
    bad[i] ^= 0x01;
    const DropReason why = Check(rx, kA, bad);
    INFO("byte " << i << ": " << DropReasonName(why));
    CHECK(why != DropReason::kNone);
  }
  auto other_key = d;
  other_key[5] ^= 1;
  CHECK(Check(rx, kA, other_key) == DropReason::kStaleKey);
  // Nothing above was recorded: the genuine one still verifies.
  CHECK(Check(rx, kA, d) == DropReason::kNone);
}

TEST_CASE("keys: another job's key, none yet, and a new key clearing the windows", "[auth]") {
  PacketAuth tx(true, Fixed(1)), rx(true, Fixed(2));
  tx.SetKey(Key(1, 0x01));
  const auto d = Sealed(tx, kA);
  CHECK(Check(rx, kA, d) == DropReason::kStaleKey);  // no key installed
  rx.SetKey(Key(2, 0x01));
  CHECK(Check(rx, kA, d) == DropReason::kStaleKey);  // another id
  rx.SetKey(Key(1, 0x02));
  CHECK(Check(rx, kA, d) == DropReason::kForged);  // same id, other bytes
  rx.SetKey(Key(1, 0x01));
  CHECK(Check(rx, kA, d) == DropReason::kNone);
  CHECK(rx.senders() == 1);
  rx.SetKey(Key(1, 0x01));
  CHECK(rx.senders() == 0);
}

TEST_CASE("replay window: reordering within it passes, older or repeated is refused", "[auth]") {
  PacketAuth tx(true, Fixed(1)), rx(true, Fixed(2));
  tx.SetKey(Key(1, 9));
  rx.SetKey(Key(1, 9));
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < 6000; ++i) sent.push_back(Sealed(tx, kA));
  CHECK(Check(rx, kA, sent[5000]) == DropReason::kNone);
  CHECK(Check(rx, kA, sent[4999]) == DropReason::kNone);     // late, within the window
  CHECK(Check(rx, kA, sent[905]) == DropReason::kNone);      // 4095 behind
  CHECK(Check(rx, kA, sent[904]) == DropReason::kReplayed);  // 4096 behind: too old
  CHECK(Check(rx, kA, sent[4999]) == DropReason::kReplayed);
  CHECK(Check(rx, kA, sent[5999]) == DropReason::kNone);  // a jump ahead
  CHECK(Check(rx, kA, sent[5000]) == DropReason::kReplayed);
  CHECK(Check(rx, kA, sent[5500]) == DropReason::kNone);  // skipped over by the jump: fresh
}

TEST_CASE("replay window: slots reused after a jump start empty", "[auth]") {
  ReplayWindow w;
  for (uint64_t pn = 0; pn < 100; ++pn) w.Commit(pn);
  w.Commit(100 + ReplayWindow::kWindow);  // everything before is outside now
  for (uint64_t pn = 101; pn < 100 + ReplayWindow::kWindow; ++pn) REQUIRE(w.Fresh(pn));
  CHECK(!w.Fresh(100));
  w.Commit(200 + ReplayWindow::kWindow);
  CHECK(w.Fresh(150 + ReplayWindow::kWindow));
  CHECK(!w.Fresh(100 + ReplayWindow::kWindow));
}

TEST_CASE("senders are bounded per key", "[auth]") {
  PacketAuth rx(true, Fixed(1));
  rx.SetKey(Key(1, 5));
  for (size_t i = 0; i <= PacketAuth::kSendersMax; ++i) {
    PacketAuth tx(true, Fixed(1000 + i));
    tx.SetKey(Key(1, 5));
    const DropReason why = Check(rx, kA, Sealed(tx, kA));
    REQUIRE(why == (i < PacketAuth::kSendersMax ? DropReason::kNone : DropReason::kOverBudget));
  }
}

TEST_CASE("without authentication tags are zero and unchecked; key ids still are", "[auth]") {
  PacketAuth tx(false, Fixed(1)), rx(false, Fixed(2));
  tx.SetKey(Key(4, 1));
  rx.SetKey(Key(4, 2));
  auto d = Sealed(tx, kA);
  for (size_t i = kTagOffset; i < kHeaderBytes; ++i) CHECK(d[i] == 0);
  CHECK(Check(rx, kB, d) == DropReason::kNone);
  d[5] = 9;
  CHECK(Check(rx, kA, d) == DropReason::kStaleKey);
}

TEST_CASE("every backend computes the same tags: any kind of node interoperates", "[auth]") {
  PacketAuth fastest(true, Fixed(1)), vector(true, Fixed(1), MacBackend::kVector),
      sodium(true, Fixed(1), MacBackend::kLibsodium),
      portable(true, Fixed(1), MacBackend::kOpenssl);
  for (PacketAuth* a : {&fastest, &vector, &sodium, &portable}) a->SetKey(Key(1, 0x3C));
  INFO("backends: " << fastest.backend() << ", " << vector.backend() << ", " << sodium.backend()
                    << ", " << portable.backend());
  CHECK(std::string(portable.backend()) == "openssl");
  // Sizes on both sides of where libsodium hands large bodies to OpenSSL,
  // and across the vector hash's 32-block step.
  for (size_t body : {size_t{0}, size_t{1}, size_t{2}, size_t{64}, size_t{511}, size_t{512},
                      size_t{1400}, size_t{4095}, size_t{4096}, size_t{32768}}) {
    for (int i = 0; i < 3; ++i) {
      const auto want = Sealed(portable, kA, i, body);
      CHECK(Sealed(fastest, kA, i, body) == want);
      CHECK(Sealed(vector, kA, i, body) == want);
      CHECK(Sealed(sodium, kA, i, body) == want);
    }
  }
  PacketAuth rx(true, Fixed(2), MacBackend::kOpenssl);
  rx.SetKey(Key(1, 0x3C));
  PacketAuth tx(true, Fixed(3));
  tx.SetKey(Key(1, 0x3C));
  CHECK(Check(rx, kA, Sealed(tx, kA)) == DropReason::kNone);
  // A large body, sealed and verified by the fastest backend; a flipped
  // byte deep inside it is caught.
  auto big = Sealed(tx, kA, 1, 32768);
  CHECK(Check(tx, kA, big) == DropReason::kNone);
  big = Sealed(tx, kA, 2, 32768);
  big[kHeaderBytes + 20000] ^= 1;
  CHECK(Check(tx, kA, big) == DropReason::kForged);
}

TEST_CASE("keys from the control plane must be 32 bytes", "[auth]") {
  CHECK(!DataKeyFromBytes(1, "short").ok());
  auto k = DataKeyFromBytes(1, std::string(32, 'x'));
  REQUIRE(k.ok());
  CHECK(k->set);
  auto r = RandomKeyBytes();
  REQUIRE(r.ok());
  CHECK(r->size() == 32);
  CHECK(*r != *RandomKeyBytes());
}

}  // namespace
}  // namespace transport
}  // namespace hetps
