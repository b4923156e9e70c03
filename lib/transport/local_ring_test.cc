// ShmRing on plain memory (records, wrap, full, a writer that breaks the
// layout), and LocalRingSocket over real loopback sockets: offer, attach,
// datagrams through the ring, the wake note, and offers it refuses.
#include "lib/transport/local_ring.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "lib/transport/udp_socket.h"
#include "lib/transport/wire.h"

namespace hetps {
namespace transport {
namespace {

constexpr uint64_t kCap = ShmRing::kCapacityMin;

struct Memory {
  std::vector<uint64_t> words = std::vector<uint64_t>((ShmRing::kRingHeaderBytes + kCap) / 8);
  void* addr() { return words.data(); }
  size_t bytes() const { return words.size() * 8; }
};

std::string Bytes(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t k = 0; k < n; ++k) s[k] = char(seed + k * 7);
  return s;
}

bool Put(ShmRing& r, const std::string& s, uint64_t at = 1) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t head = std::min<size_t>(s.size(), 5);
  return r.Write(p, head, p + head, s.size() - head, at);
}

TEST_CASE("a ring hands over records in order, wraps, and fills", "[local_ring]") {
  Memory m;
  ShmRing::Init(m.addr(), kCap, 42);
  ShmRing w, r;
  REQUIRE(w.Attach(m.addr(), m.bytes(), 42));
  REQUIRE(r.Attach(m.addr(), m.bytes(), 42));
  CHECK(!w.attached());
  r.SetAttached();
  CHECK(w.attached());
  uint64_t cursor = r.tail();
  uint8_t* data;
  size_t len;
  uint64_t sent;
  bool broken = false;
  CHECK(!r.Read(&cursor, &data, &len, &sent, &broken));
  // Records of 20000 bytes: three fit in 64 KiB, the fourth waits.
  const std::string a = Bytes(20000, 1), b = Bytes(20000, 2), c = Bytes(20000, 3);
  CHECK(Put(w, a, 7));
  CHECK(Put(w, b));
  CHECK(Put(w, c));
  CHECK(!Put(w, Bytes(20000, 4)));
  CHECK(!Put(w, ""));                               // empty: not a datagram
  CHECK(!Put(w, Bytes(kDatagramBytesMax + 1, 5)));  // too large for one
  REQUIRE(r.Read(&cursor, &data, &len, &sent, &broken));
  CHECK(std::string(reinterpret_cast<char*>(data), len) == a);
  CHECK(sent == 7);
  REQUIRE(r.Read(&cursor, &data, &len, &sent, &broken));
  CHECK(std::string(reinterpret_cast<char*>(data), len) == b);
  // Read but not released: still no room.
  CHECK(!Put(w, Bytes(20000, 4)));
  r.Release(cursor);
  // The next record does not fit before the end: it follows a wrap mark.
  const std::string d = Bytes(20000, 4);
  CHECK(Put(w, d));
  REQUIRE(r.Read(&cursor, &data, &len, &sent, &broken));
  CHECK(std::string(reinterpret_cast<char*>(data), len) == c);
  REQUIRE(r.Read(&cursor, &data, &len, &sent, &broken));
  CHECK(std::string(reinterpret_cast<char*>(data), len) == d);
  CHECK(!r.Read(&cursor, &data, &len, &sent, &broken));
  CHECK(!broken);
  r.Release(cursor);
  CHECK(w.empty());
  // The wake flag: set by the reader, taken once by the writer.
  CHECK(!w.TakeSleeping());
  r.SetSleeping();
  CHECK(w.TakeSleeping());
  CHECK(!w.TakeSleeping());
}

// The writer's head and the reader's tail count bytes modulo 2^64; a
// writer may start them anywhere (it owns the memory). Across 2^64, with
// a wrap mark there, records still come in order and whole.
TEST_CASE("indices that pass 2^64 go on as the ring's positions do", "[local_ring]") {
  Memory m;
  ShmRing::Init(m.addr(), kCap, 5);
  uint64_t* words = static_cast<uint64_t*>(m.addr());
  const uint64_t start = ~uint64_t(0) - 40000 + 1;  // 8-aligned, 40000 before 2^64
  words[64 / 8] = start;                            // head
  words[128 / 8] = start;                           // tail
  ShmRing w, r;
  REQUIRE(w.Attach(m.addr(), m.bytes(), 5));
  REQUIRE(r.Attach(m.addr(), m.bytes(), 5));
  REQUIRE(r.tail() == start);
  const std::string a = Bytes(20000, 1), b = Bytes(20000, 2);
  CHECK(Put(w, a));
  CHECK(Put(w, b));  // past the ring's end: a wrap mark, then b at 0
  CHECK(w.head() == 20016);
  uint64_t cursor = r.tail();
  uint8_t* data;
  size_t len;
  uint64_t sent;
  bool broken = false;
  REQUIRE(r.Read(&cursor, &data, &len, &sent, &broken));
  CHECK(std::string(reinterpret_cast<char*>(data), len) == a);
  REQUIRE(r.Read(&cursor, &data, &len, &sent, &broken));
  CHECK(std::string(reinterpret_cast<char*>(data), len) == b);
  CHECK(cursor == 20016);
  CHECK(!r.Read(&cursor, &data, &len, &sent, &broken));
  CHECK(!broken);
  r.Release(cursor);
  CHECK(w.empty());
}

TEST_CASE("a ring that breaks its layout is broken, never read past", "[local_ring]") {
  Memory m;
  ShmRing::Init(m.addr(), kCap, 9);
  ShmRing w, r;
  REQUIRE(w.Attach(m.addr(), m.bytes(), 9));
  // Refused views: another nonce, a short mapping, a bad capacity.
  CHECK(!r.Attach(m.addr(), m.bytes(), 10));
  CHECK(!r.Attach(m.addr(), m.bytes() - 8, 9));
  uint64_t* words = static_cast<uint64_t*>(m.addr());
  words[2] = kCap + 8;  // capacity: not a power of two
  CHECK(!r.Attach(m.addr(), m.bytes(), 9));
  words[2] = kCap;
  REQUIRE(r.Attach(m.addr(), m.bytes(), 9));
  uint8_t* data;
  size_t len;
  uint64_t sent;
  auto read = [&](uint64_t cursor) {
    bool broken = false;
    const bool got = r.Read(&cursor, &data, &len, &sent, &broken);
    CHECK(!got);
    return broken;
  };
  REQUIRE(Put(w, Bytes(100, 1)));
  uint8_t* base = static_cast<uint8_t*>(m.addr()) + ShmRing::kRingHeaderBytes;
  // A record length past the datagram limit, past what was published,
  // and zero.
  for (uint32_t bad : {uint32_t(kDatagramBytesMax + 1), uint32_t(200), uint32_t(0)}) {
    std::memcpy(base, &bad, 4);
    CHECK(read(0));
  }
  // A cursor the writer's head is behind (it went back), and one not
  // 8-aligned (a tail the writer set) that puts the next length 2 bytes
  // before the ring's end, with the head just past it.
  CHECK(read(1u << 20));
  CHECK(read(~uint64_t(0) - 1));
  // A wrap mark in the middle of what was published.
  const uint32_t wrap = 0xffffffffu;
  std::memcpy(base, &wrap, 4);
  CHECK(read(0));
}

std::unique_ptr<LocalRingSocket> Open(LocalRingOptions o = {}) {
  UdpSocketOptions uo;
  uo.buffer_bytes = 1 << 20;
  auto udp = UdpSocket::Create(HostPort{"127.0.0.1", 0}, uo);
  REQUIRE(udp.ok());
  o.ring_bytes = 1 << 20;
  auto s = LocalRingSocket::Create(std::move(*udp), o);
  REQUIRE(s.ok());
  return std::move(*s);
}

// Reads until `n` datagrams came (or 2 s of nothing).
std::vector<std::string> Receive(LocalRingSocket& s, size_t n, std::vector<Peer>* from = nullptr) {
  std::vector<std::string> got;
  std::vector<InDatagram> in;
  pollfd pfd{s.fd(), POLLIN, 0};
  for (int idle = 0; got.size() < n && idle < 100;) {
    const int m = s.RecvBatch(&in);
    REQUIRE(m >= 0);
    for (const InDatagram& d : in) {
      got.emplace_back(reinterpret_cast<const char*>(d.data), d.len);
      if (from != nullptr) from->push_back(d.from);
    }
    if (in.empty() && s.next_arrival_us() != 0 && poll(&pfd, 1, 20) <= 0) ++idle;
  }
  return got;
}

// A ring file as another process of this user would leave it: `mode`,
// the smallest capacity, `nonce`, written by `writer` (Init records the
// caller; the header keeps the writer's pid at byte 28).
void MakeRingFile(const std::string& name, mode_t mode, uint64_t nonce, pid_t writer) {
  const size_t bytes = ShmRing::kRingHeaderBytes + ShmRing::kCapacityMin;
  shm_unlink(name.c_str());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, mode);
  REQUIRE(fd >= 0);
  fchmod(fd, mode);  // past the umask
  REQUIRE(ftruncate(fd, off_t(bytes)) == 0);
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(addr != MAP_FAILED);
  close(fd);
  ShmRing::Init(addr, ShmRing::kCapacityMin, nonce);
  const uint32_t pid = uint32_t(writer);
  std::memcpy(static_cast<uint8_t*>(addr) + 28, &pid, 4);
  munmap(addr, bytes);
}

// Equal lists of datagrams (not printed: they are large).
bool Same(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  UNSCOPED_INFO("got " << got.size() << " datagrams, want " << want.size());
  return got == want;
}

int Send(LocalRingSocket& s, const Peer& to, const std::vector<std::string>& ds) {
  std::vector<OutDatagram> out;
  for (const std::string& d : ds) {
    out.push_back({to, reinterpret_cast<const uint8_t*>(d.data()), 4,
                   reinterpret_cast<const uint8_t*>(d.data()) + 4, d.size() - 4});
  }
  return s.SendBatch(out.data(), out.size());
}

TEST_CASE("real sockets: datagrams to a peer on this host go through a ring", "[local_ring]") {
  auto a = Open(), b = Open();
  std::vector<std::string> first = {Bytes(1000, 1), Bytes(32000, 2)};
  // Before b attached: by UDP, with an offer.
  REQUIRE(Send(*a, b->local(), first) == 2);
  std::vector<Peer> from;
  CHECK(Same(Receive(*b, 2, &from), first));
  CHECK(from == std::vector<Peer>{a->local(), a->local()});
  CHECK(a->local_ring_stats().rings_created == 1);
  CHECK(b->local_ring_stats().rings_attached == 1);
  CHECK(b->local_ring_stats().datagrams_received == 0);
  // Attached: the ring, in order, from a's address; the name is gone
  // from /dev/shm.
  CHECK(shm_open(LocalRingName(geteuid(), b->local(), a->local()).c_str(), O_RDONLY, 0) < 0);
  std::vector<std::string> next;
  for (int k = 0; k < 30; ++k) next.push_back(Bytes(32000 + k, uint8_t(k)));
  REQUIRE(Send(*a, b->local(), next) == 30);
  from.clear();
  CHECK(Same(Receive(*b, 30, &from), next));
  CHECK(from == std::vector<Peer>(30, a->local()));
  CHECK(a->local_ring_stats().datagrams_sent == 30);
  CHECK(b->local_ring_stats().datagrams_received == 30);
  // b drained the ring and may sleep: a's next datagram comes with a note
  // that makes b's socket readable.
  REQUIRE(Send(*a, b->local(), {Bytes(500, 9)}) == 1);
  pollfd pfd{b->fd(), POLLIN, 0};
  CHECK(poll(&pfd, 1, 2000) == 1);
  CHECK(Same(Receive(*b, 1), {Bytes(500, 9)}));
  // More than the ring holds (1 MiB): the rest goes by UDP.
  std::vector<std::string> many;
  for (int k = 0; k < 20; ++k) many.push_back(Bytes(60000, uint8_t(k)));
  REQUIRE(Send(*a, b->local(), many) == 20);
  std::vector<std::string> got = Receive(*b, 20);
  std::sort(got.begin(), got.end());
  std::sort(many.begin(), many.end());
  CHECK(Same(got, many));
  CHECK(a->local_ring_stats().ring_full > 0);
}

// An untagged (unsealed) datagram may only go through a ring: SendBatch
// stops before one it cannot put in a ring, and never hands it to UDP.
TEST_CASE("real sockets: untagged datagrams go through a ring or not at all", "[local_ring]") {
  auto a = Open(), b = Open();
  const std::string s0 = Bytes(800, 1), u0 = Bytes(900, 2);
  auto out = [&](const std::string& d, bool sealed) {
    return OutDatagram{b->local(),
                       reinterpret_cast<const uint8_t*>(d.data()),
                       4,
                       reinterpret_cast<const uint8_t*>(d.data()) + 4,
                       d.size() - 4,
                       sealed};
  };
  // No ring yet: the tagged one goes by UDP (with the offer), the untagged
  // one waits.
  CHECK_FALSE(a->PrivateTo(b->local()));
  std::vector<OutDatagram> batch = {out(s0, true), out(u0, false)};
  REQUIRE(a->SendBatch(batch.data(), batch.size()) == 1);
  std::vector<InDatagram> in;
  std::vector<std::string> got;
  std::vector<bool> private_channel;
  pollfd pfd{b->fd(), POLLIN, 0};
  auto take = [&] {
    REQUIRE(b->RecvBatch(&in) >= 0);
    for (const InDatagram& d : in) {
      got.emplace_back(reinterpret_cast<const char*>(d.data), d.len);
      private_channel.push_back(d.private_channel);
    }
  };
  for (int k = 0; k < 200 && (got.empty() || b->local_ring_stats().rings_attached == 0); ++k) {
    take();
    if (in.empty()) poll(&pfd, 1, 10);
  }
  CHECK(Same(got, {s0}));
  CHECK(private_channel == std::vector<bool>{false});
  REQUIRE(b->local_ring_stats().rings_attached == 1);
  // Attached: a private channel; untagged and tagged alike go through it.
  CHECK(a->PrivateTo(b->local()));
  CHECK_FALSE(b->PrivateTo(a->local()));  // b has sent nothing: no ring of its own
  const std::string u1 = Bytes(1200, 3), s1 = Bytes(1300, 4);
  batch = {out(u0, false), out(s1, true), out(u1, false)};
  REQUIRE(a->SendBatch(batch.data(), batch.size()) == 3);
  got.clear();
  private_channel.clear();
  for (int k = 0; k < 200 && got.size() < 3; ++k) {
    take();
    if (in.empty()) poll(&pfd, 1, 10);
  }
  CHECK(Same(got, {u0, s1, u1}));
  CHECK(private_channel == std::vector<bool>(3, true));
  // More untagged than the ring (1 MiB) holds: SendBatch stops where it
  // fills; nothing went by UDP.
  std::vector<std::string> many;
  for (int k = 0; k < 20; ++k) many.push_back(Bytes(60000, uint8_t(k)));
  batch.clear();
  for (const std::string& d : many) batch.push_back(out(d, false));
  const uint64_t ring_before = a->local_ring_stats().datagrams_sent;
  const int sent = a->SendBatch(batch.data(), batch.size());
  CHECK(sent > 0);
  CHECK(sent < 20);
  CHECK(a->local_ring_stats().datagrams_sent == ring_before + uint64_t(sent));
  got.clear();
  private_channel.clear();
  for (int k = 0; k < 200 && got.size() < size_t(sent); ++k) {
    take();
    if (in.empty()) poll(&pfd, 1, 10);
  }
  CHECK(Same(got, std::vector<std::string>(many.begin(), many.begin() + sent)));
  CHECK(private_channel == std::vector<bool>(size_t(sent), true));
}

TEST_CASE("real sockets: offers of rings that fail a check are refused", "[local_ring]") {
  auto b = Open();
  UdpSocketOptions uo;
  auto forger = UdpSocket::Create(HostPort{"127.0.0.1", 0}, uo);
  REQUIRE(forger.ok());
  auto note = [&](uint64_t nonce, size_t len = 20) {
    uint8_t n[32] = {'H', 'E', 'T', 'P', 'S', 'R', 'N', 'G', 1, 0, 0, 0};
    std::memcpy(n + 12, &nonce, 8);
    OutDatagram d{b->local(), n, len, nullptr, 0};
    REQUIRE((*forger)->SendBatch(&d, 1) == 1);
    pollfd pfd{b->fd(), POLLIN, 0};
    REQUIRE(poll(&pfd, 1, 2000) == 1);
    std::vector<InDatagram> in;
    CHECK(b->RecvBatch(&in) == 1);
    CHECK(in.empty());  // the note is the socket's, not the endpoint's
  };
  // No ring by that name.
  note(5);
  CHECK(b->local_ring_stats().rings_refused == 1);
  // A ring others could write (mode 0644), then one with another nonce.
  const std::string name = LocalRingName(geteuid(), b->local(), (*forger)->local());
  for (mode_t mode : {mode_t(0644), mode_t(0600)}) {
    MakeRingFile(name, mode, 77, getpid());
    note(mode == 0644 ? 77 : 78);
  }
  CHECK(b->local_ring_stats().rings_refused == 3);
  // A short note.
  note(77, 12);
  CHECK(b->local_ring_stats().rings_refused == 4);
  CHECK(b->local_ring_stats().rings_attached == 0);
  // The right one attaches (and unlinks the name).
  note(77);
  CHECK(b->local_ring_stats().rings_attached == 1);
  CHECK(shm_open(name.c_str(), O_RDONLY, 0) < 0);
}

// A reader that went away (its process ended) stops draining its ring:
// the writer drops the ring once nothing moved for stuck_us and offers a
// new one (a restarted peer attaches to that).
TEST_CASE("real sockets: a ring whose reader is gone is replaced", "[local_ring]") {
  LocalRingOptions o;
  o.stuck_us = 0;
  auto a = Open(o);
  auto b = Open();
  const Peer to = b->local();
  REQUIRE(Send(*a, to, {Bytes(100, 1)}) == 1);
  REQUIRE(Receive(*b, 1).size() == 1);
  REQUIRE(Send(*a, to, {Bytes(100, 2)}) == 1);
  REQUIRE(a->local_ring_stats().datagrams_sent == 1);
  b.reset();
  for (int k = 0; k < 100000 && a->local_ring_stats().rings_created < 2; ++k) {
    REQUIRE(Send(*a, to, {Bytes(100, 3)}) == 1);
  }
  CHECK(a->local_ring_stats().rings_created == 2);
}

// A peer with rings off never attaches: its ring is dropped (the file
// with it) once attach_wait_us passed, and what is sent goes by UDP.
TEST_CASE("real sockets: a ring no peer attaches to is dropped", "[local_ring]") {
  LocalRingOptions o;
  o.attach_wait_us = 0;
  auto a = Open(o);
  UdpSocketOptions uo;
  auto plain = UdpSocket::Create(HostPort{"127.0.0.1", 0}, uo);
  REQUIRE(plain.ok());
  const std::string name = LocalRingName(geteuid(), (*plain)->local(), a->local());
  REQUIRE(Send(*a, (*plain)->local(), {Bytes(100, 1)}) == 1);
  CHECK(a->local_ring_stats().rings_created == 1);
  bool gone = false;
  for (int k = 0; k < 100000 && !gone; ++k) {
    REQUIRE(Send(*a, (*plain)->local(), {Bytes(100, 1)}) == 1);
    const int fd = shm_open(name.c_str(), O_RDONLY, 0);
    gone = fd < 0;
    if (fd >= 0) close(fd);
  }
  CHECK(gone);
  CHECK(a->local_ring_stats().datagrams_sent == 0);
}

// A ring's file goes when its reader attaches; one never attached would
// outlive a writer that was killed. The sweep unlinks those of processes
// that are gone, and leaves live writers' alone.
TEST_CASE("rings of writers that are gone are swept from /dev/shm", "[local_ring]") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  Peer to, gone_from, live_from;
  to.ip = gone_from.ip = live_from.ip = htonl(0x7f000001);
  to.port = htons(uint16_t(getpid()));  // apart from parallel runs of this test
  gone_from.port = htons(2);
  live_from.port = htons(3);
  const std::string gone = LocalRingName(geteuid(), to, gone_from);
  const std::string live = LocalRingName(geteuid(), to, live_from);
  MakeRingFile(gone, 0600, 1, child);
  MakeRingFile(live, 0600, 1, getpid());
  SweepLocalRings(geteuid());
  CHECK(shm_open(gone.c_str(), O_RDONLY, 0) < 0);
  const int fd = shm_open(live.c_str(), O_RDONLY, 0);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  shm_unlink(live.c_str());
}

}  // namespace
}  // namespace transport
}  // namespace hetps
