// UdpSocket over real loopback: with UDP GSO and GRO every datagram still
// arrives as its own datagram, intact and in order, whatever mix of sizes
// and peers a batch holds; the same with the offloads off, and between an
// offloading sender and a plain receiver (and back).
#include "lib/transport/udp_socket.h"

#include <poll.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

namespace hetps {
namespace transport {
namespace {

std::unique_ptr<UdpSocket> Open(bool offload) {
  UdpSocketOptions o;
  o.buffer_bytes = 4u << 20;
  o.gso = o.gro = offload;
  auto s = UdpSocket::Create(HostPort{"127.0.0.1", 0}, o);
  REQUIRE(s.ok());
  return std::move(*s);
}

// Datagram i: 8 bytes of header-like prefix (its index) and a body whose
// bytes derive from the index.
struct Datagrams {
  std::vector<std::vector<uint8_t>> head, body;
  void Add(uint32_t index, size_t body_len) {
    std::vector<uint8_t> h(8, 0);
    std::memcpy(h.data(), &index, sizeof(index));
    std::vector<uint8_t> b(body_len);
    for (size_t k = 0; k < body_len; ++k) b[k] = static_cast<uint8_t>(index * 31 + k);
    head.push_back(std::move(h));
    body.push_back(std::move(b));
  }
};

// Receives until `n` datagrams arrived or 2 s passed; counts the messages
// (coalesced runs count once) in *messages.
std::vector<std::string> ReceiveAll(UdpSocket& s, size_t n, size_t* messages = nullptr) {
  std::vector<std::string> got;
  std::vector<InDatagram> in;
  pollfd pfd{s.fd(), POLLIN, 0};
  for (int waits = 0; got.size() < n && waits < 100;) {
    if (poll(&pfd, 1, 20) <= 0) {
      ++waits;
      continue;
    }
    const int m = s.RecvBatch(&in);
    REQUIRE(m >= 0);
    if (messages != nullptr) *messages += static_cast<size_t>(m);
    for (const InDatagram& d : in) {
      CHECK_FALSE(d.truncated);
      got.emplace_back(reinterpret_cast<const char*>(d.data), d.len);
    }
  }
  return got;
}

void SendAll(UdpSocket& s, const std::vector<OutDatagram>& out) {
  size_t done = 0;
  for (int tries = 0; done < out.size() && tries < 1000; ++tries) {
    const int n = s.SendBatch(out.data() + done, out.size() - done);
    REQUIRE(n >= 0);
    done += static_cast<size_t>(n);
  }
  REQUIRE(done == out.size());
}

std::string Expected(const Datagrams& d, size_t i) {
  return std::string(d.head[i].begin(), d.head[i].end()) +
         std::string(d.body[i].begin(), d.body[i].end());
}

}  // namespace

TEST_CASE("udp socket: runs of equal datagrams, shorter tails and mixed peers arrive one by one") {
  for (bool tx_offload : {true, false}) {
    for (bool rx_offload : {true, false}) {
      CAPTURE(tx_offload, rx_offload);
      auto tx = Open(tx_offload);
      auto a = Open(rx_offload);
      auto b = Open(rx_offload);
      // To a: 100 of 1392 bytes (more than one GSO run), one of 500 (ends a
      // run), 3 of 1392, then 2 to b, 5 more to a of 1392, one empty body,
      // one 8000-byte datagram.
      Datagrams d;
      std::vector<Peer> to;
      uint32_t index = 0;
      auto add = [&](const Peer& p, size_t body) {
        d.Add(index++, body);
        to.push_back(p);
      };
      for (int i = 0; i < 100; ++i) add(a->local(), 1392);
      add(a->local(), 500);
      for (int i = 0; i < 3; ++i) add(a->local(), 1392);
      add(b->local(), 1392);
      add(b->local(), 1392);
      for (int i = 0; i < 5; ++i) add(a->local(), 1392);
      add(a->local(), 0);
      add(a->local(), 8000);
      std::vector<OutDatagram> out;
      for (size_t i = 0; i < d.head.size(); ++i) {
        out.push_back({to[i], d.head[i].data(), d.head[i].size(),
                       d.body[i].empty() ? nullptr : d.body[i].data(), d.body[i].size()});
      }
      SendAll(*tx, out);
      const auto at_a = ReceiveAll(*a, d.head.size() - 2);
      const auto at_b = ReceiveAll(*b, 2);
      REQUIRE(at_a.size() == d.head.size() - 2);
      REQUIRE(at_b.size() == 2);
      size_t ia = 0, ib = 0;
      for (size_t i = 0; i < d.head.size(); ++i) {
        if (to[i] == a->local()) {
          REQUIRE(at_a[ia++] == Expected(d, i));
        } else {
          REQUIRE(at_b[ib++] == Expected(d, i));
        }
      }
    }
  }
}

TEST_CASE("udp socket: an offloading socket reports its offloads and sends big runs in few calls") {
  auto tx = Open(true);
  auto rx = Open(true);
  REQUIRE(tx->gro());  // this kernel has UDP_GRO (5.0+)
  Datagrams d;
  for (uint32_t i = 0; i < 2000; ++i) d.Add(i, 1352);
  std::vector<OutDatagram> out;
  for (size_t i = 0; i < d.head.size(); ++i) {
    out.push_back({rx->local(), d.head[i].data(), 8, d.body[i].data(), d.body[i].size()});
  }
  // batch_max is 64 messages; with GSO one call takes up to 64 runs of 46.
  const int first = tx->SendBatch(out.data(), out.size());
  CHECK(tx->gso());
  CHECK(first > 64);
  size_t done = static_cast<size_t>(std::max(first, 0));
  for (int tries = 0; done < out.size() && tries < 1000; ++tries) {
    const int n = tx->SendBatch(out.data() + done, out.size() - done);
    REQUIRE(n >= 0);
    done += static_cast<size_t>(n);
  }
  size_t messages = 0;
  const auto got = ReceiveAll(*rx, out.size(), &messages);
  REQUIRE(got.size() == out.size());
  CHECK(messages < out.size() / 4);  // the receiver got coalesced runs and split them
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Expected(d, i));
}

}  // namespace transport
}  // namespace hetps

namespace hetps {
namespace transport {
namespace {

uint64_t MonoMicros() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000 + uint64_t(ts.tv_nsec) / 1000;
}

}  // namespace

TEST_CASE("udp socket: a datagram read late says how long it waited") {
  for (const bool offload : {true, false}) {
    std::unique_ptr<UdpSocket> a = Open(offload), b = Open(offload);
    if (!b->rx_timestamps()) {
      WARN("SO_TIMESTAMPNS refused: no receive times to check");
      return;
    }
    Datagrams d;
    d.Add(0, 100);
    // Loopback delivers within the send: the datagram is queued at b
    // before the wait starts.
    SendAll(*a, {{b->local(), d.head[0].data(), 8, d.body[0].data(), 100}});
    const uint64_t waited_from = MonoMicros();
    while (MonoMicros() < waited_from + 20'000) {
    }
    std::vector<InDatagram> in;
    pollfd pfd{b->fd(), POLLIN, 0};
    REQUIRE(poll(&pfd, 1, 2000) == 1);
    REQUIRE(b->RecvBatch(&in) == 1);
    REQUIRE(in.size() == 1);
    CHECK(in[0].age_us >= 20'000);
    CHECK(in[0].age_us < kRxAgeMaxUs);
  }
}

}  // namespace transport
}  // namespace hetps
