// PacketAuth: the data plane's authentication (spec: docs/wire-format.md,
// "Authentication"). Each job has a fresh random 256-bit key that schedd
// hands every member over the control plane (DataKey). Every datagram or
// TCP frame carries a 16-byte tag: AES-256-GCM with no plaintext (GMAC)
// over the sender's data address (4-byte IPv4 and 2-byte port, network
// order), the header up to the tag and the payload, under a 12-byte nonce:
// the header's sender (a random 64-bit value drawn each time an endpoint
// installs a key, and again every 2^32 datagrams) and the low 32 bits of
// its packet_number (counting from 0 under each sender value). A nonce
// never repeats under a key: a sender counts, and two senders (or two
// lives of one) share a sender value with odds of 2^-64.
//
// Receiving, in this order, before any other state is touched: the key id
// must be the job's (else stale_key, no crypto spent); the packet number
// must be new to that sender's replay window; the tag must verify (else
// forged); only then is the number recorded. The address in the tag is
// the one the datagram came from, so a captured datagram replayed from
// another address fails as forged, and one replayed from its own address
// fails the window (replayed). Windows exist only for senders whose
// datagrams verified, at most kSendersMax per key (then over_budget); a
// new key clears them.
//
// The tag is standard AES-256-GCM, computed by the fastest of three
// backends this CPU runs (MacBackend): all give the same bytes, so nodes
// of any kind interoperate. Not thread-safe: one owner (the transport's
// thread).
#ifndef HETPS_LIB_TRANSPORT_PACKET_AUTH_H_
#define HETPS_LIB_TRANSPORT_PACKET_AUTH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/transport/datagram_socket.h"
#include "lib/transport/wire.h"

namespace hetps {
namespace transport {

constexpr size_t kDataKeyBytes = 32;

// A job's data-plane key and its id (carried in every header).
struct DataKey {
  uint8_t id = 0;
  std::array<uint8_t, kDataKeyBytes> bytes{};
  bool set = false;  // false: none yet; nothing is sent or accepted
};

// A key from the control plane's bytes; an error unless exactly 32.
absl::StatusOr<DataKey> DataKeyFromBytes(uint8_t id, const std::string& bytes);
// 32 bytes from the OS's entropy (schedd's per-job keys).
absl::StatusOr<std::string> RandomKeyBytes();
// A 64-bit value from the OS's entropy.
uint64_t RandomU64();

// Which packet numbers a sender has used: the highest seen and a bitmap of
// the kWindow below it. Anything older is refused.
class ReplayWindow {
 public:
  static constexpr uint64_t kWindow = 4096;
  // True when `pn` has not been seen and is not older than the window.
  bool Fresh(uint64_t pn) const;
  // Records `pn` (call after Fresh and the tag check).
  void Commit(uint64_t pn);

 private:
  static constexpr size_t kWords = kWindow / 64;
  bool any_ = false;
  uint64_t highest_ = 0;
  std::array<uint64_t, kWords> bits_{};  // bit pn % kWindow, for pn in (highest - kWindow, highest]
};

// Who computes the tags. kFastest picks, per key: kVector where the CPU
// has AVX-512 and VPCLMULQDQ (ghash.h: the hash in 512-bit carry-less
// multiplies, the cipher blocks by OpenSSL; the fastest at every datagram
// size), else kLibsodium for bodies under 4 KiB (least per-call overhead,
// but it needs the data in one buffer, so the body is copied next to the
// header) and OpenSSL's EVP for larger ones (it takes the data in pieces);
// kOpenssl everywhere without AES-NI. The others force one (tests of the
// backends' agreement); a forced backend this CPU lacks falls back to
// kOpenssl.
enum class MacBackend { kFastest, kVector, kLibsodium, kOpenssl };

class PacketAuth {
 public:
  static constexpr size_t kSendersMax = 4096;

  // `authenticate` false: tags are zero and never checked; key ids still
  // are (benchmarks measure the MAC's cost against this). `draw_sender`
  // gives sender values (RandomU64 in production, seeded in simulations).
  explicit PacketAuth(bool authenticate, std::function<uint64_t()> draw_sender = RandomU64,
                      MacBackend backend = MacBackend::kFastest);
  ~PacketAuth();
  PacketAuth(const PacketAuth&) = delete;
  PacketAuth& operator=(const PacketAuth&) = delete;

  // Installs a job's key: datagrams sent from now on carry it, and only
  // datagrams under it are accepted. Draws a new sender value, restarts
  // packet numbers at 0 and clears every replay window.
  void SetKey(const DataKey& key);
  bool has_key() const { return key_.set; }
  uint8_t key_id() const { return key_.id; }
  // The sender value and packet number for the next datagram's header
  // (call sender() after NextPacketNumber: every 2^32 numbers the sender
  // value is drawn again and numbering restarts).
  uint64_t NextPacketNumber();
  uint64_t sender() const { return sender_; }
  // Which backend computes small bodies' tags under the current key
  // ("vector", "libsodium" or "openssl"; "none" without one).
  const char* backend() const;

  // Writes the tag of an encoded header (whose key_id, sender and
  // packet_number this endpoint set) and its payload, sent from `self`.
  void Seal(const Peer& self, uint8_t* head, const uint8_t* body, size_t body_len);
  // Checks a datagram that came through a private channel
  // (DatagramSocket::PrivateTo), which carries no tag: kNone, or kStaleKey
  // when it is not under the current key (a finished job's).
  DropReason CheckKey(const Header& h) const;
  // Checks a decoded datagram that came from `from`: kNone, or why not
  // (kStaleKey, kReplayed, kForged, kOverBudget). `head` is its first
  // kHeaderBytes, `body` its payload.
  DropReason Verify(const Peer& from, const Header& h, const uint8_t* head, const uint8_t* body,
                    size_t body_len);

  size_t senders() const { return windows_.size(); }

 private:
  struct SenderKey {
    Peer peer;
    uint64_t sender;
    bool operator==(const SenderKey& o) const { return peer == o.peer && sender == o.sender; }
    template <typename H>
    friend H AbslHashValue(H h, const SenderKey& k) {
      return H::combine(std::move(h), k.peer, k.sender);
    }
  };
  // The tag of (address, head[0, kTagOffset), body) under the nonce in head.
  bool Tag(const Peer& addr, const uint8_t* head, const uint8_t* body, size_t body_len,
           uint8_t* tag_out);

  const bool authenticate_;
  const std::function<uint64_t()> draw_sender_;
  const MacBackend backend_;
  DataKey key_;
  uint64_t sender_ = 0;
  uint64_t next_pn_ = 0;
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;      // the keyed cipher state (either library), per SetKey
  std::vector<uint8_t> scratch_;  // the authenticated data, contiguous (libsodium)
  absl::flat_hash_map<SenderKey, ReplayWindow> windows_;
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_PACKET_AUTH_H_
