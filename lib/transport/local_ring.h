// Datagrams between two endpoints on one host through shared memory
// (docs/local-rings.md). On loopback a UDP datagram costs two
// kernel copies, its socket buffers and a syscall share each way; a
// worker and the psd beside it move half of every round that way. A
// LocalRingSocket wraps the endpoint's UdpSocket: datagrams to a peer on
// this host go through a ring in shared memory that the sender created
// and the peer attached to; everything else, and whatever does not fit,
// goes by UDP as before (the endpoint tolerates the reordering).
//
// Trust: a ring is a file in /dev/shm owned by this user, mode 0600: only
// a process of the same user (which could ptrace this one) can create or
// write one. Its contents are still checked like datagrams from the
// network: indices bounded by the ring before any read, lengths by
// kDatagramBytesMax, a ring that breaks a rule is dropped and counted. An
// attached ring is a private channel (PrivateTo): its file is unlinked, so
// only the two processes that mapped it can write it, and the endpoint
// sends through it without tags (a tag costs as much as the copy).
//
// Not thread-safe: one owner thread (the endpoint's).
#ifndef HETPS_LIB_TRANSPORT_LOCAL_RING_H_
#define HETPS_LIB_TRANSPORT_LOCAL_RING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/transport/datagram_socket.h"

namespace hetps {
namespace transport {

// One writer, one reader, over `bytes` of memory that starts with the
// ring's header (kRingHeaderBytes) and holds capacity bytes of records
// after it. Records never wrap: one that does not fit before the end
// follows a wrap mark at offset 0.
class ShmRing {
 public:
  static constexpr size_t kRingHeaderBytes = 256;
  static constexpr size_t kRecordHeaderBytes = 16;
  static constexpr uint64_t kCapacityMin = 64 << 10;
  static constexpr uint64_t kCapacityMax = uint64_t(1) << 30;

  // Lays out a new ring (the writer). capacity: a power of two within
  // [kCapacityMin, kCapacityMax]; memory holds kRingHeaderBytes + capacity.
  static void Init(void* memory, uint64_t capacity, uint64_t nonce);
  // A view of a ring laid out by Init, checked: false when its magic,
  // nonce or capacity does not match (`bytes`: the mapping's size).
  bool Attach(void* memory, size_t bytes, uint64_t nonce);

  // Writer: appends one record of head then body (at most
  // kDatagramBytesMax together) stamped sent_us. false: no room.
  bool Write(const uint8_t* head, size_t head_len, const uint8_t* body, size_t body_len,
             uint64_t sent_us);
  // Reader: the next record past `*cursor` (which starts at the reader's
  // tail and advances past what was read); false when none is published.
  // Sets *broken when the writer's indices or a record break the layout.
  bool Read(uint64_t* cursor, uint8_t** data, size_t* len, uint64_t* sent_us, bool* broken) const;
  // Reader: gives the records before `cursor` back to the writer.
  void Release(uint64_t cursor);
  uint64_t tail() const;
  uint64_t head() const;
  bool empty() const;

  // The reader says it attached; the writer reads it.
  void SetAttached();
  bool attached() const;
  // The reader may sleep: set (and read again to close the race) before
  // it waits; the writer takes it after publishing, and wakes the reader.
  void SetSleeping();
  bool TakeSleeping();

 private:
  struct Header;
  Header* h_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
};

struct LocalRingOptions {
  uint64_t ring_bytes = 16 << 20;  // each outgoing ring's capacity (power of two)
  size_t rings_max = 64;           // incoming rings attached at once
  // A ring the peer has not drained for this long (it restarted, or never
  // read) is dropped and offered again.
  uint64_t stuck_us = 500'000;
  uint64_t offer_every_us = 100'000;  // offers to a peer not yet attached
  // A ring no peer attached to this long after its first offer is
  // dropped (the peer has rings off), and offered again after ten times
  // as long.
  uint64_t attach_wait_us = 2'000'000;
};

// Unlinks the rings in /dev/shm of user `uid` whose writer process is gone
// (a ring is unlinked when its reader attaches; one never attached would
// outlive its writer). Done by LocalRingSocket::Create.
void SweepLocalRings(uint32_t uid);

class LocalRingSocket final : public DatagramSocket {
 public:
  // `inner`: the UDP socket every datagram off this host goes through.
  static absl::StatusOr<std::unique_ptr<LocalRingSocket>> Create(
      std::unique_ptr<DatagramSocket> inner, const LocalRingOptions& options);
  ~LocalRingSocket() override;
  LocalRingSocket(const LocalRingSocket&) = delete;
  LocalRingSocket& operator=(const LocalRingSocket&) = delete;

  Peer local() const override { return inner_->local(); }
  int fd() const override { return inner_->fd(); }
  int SendBatch(const OutDatagram* d, size_t n) override;
  int RecvBatch(std::vector<InDatagram>* out) override;
  bool PrivateTo(const Peer& to) const override;
  uint64_t next_arrival_us() const override;
  LocalRingStats local_ring_stats() const override { return stats_; }

 private:
  struct Mapping;
  struct Out;
  struct In;
  LocalRingSocket(std::unique_ptr<DatagramSocket> inner, const LocalRingOptions& options);
  bool IsLocal(const Peer& p) const;
  Out* OutRing(const Peer& to, uint64_t now);
  void SendNote(const Peer& to, uint32_t kind, uint64_t nonce);
  void HandleNote(const Peer& from, const uint8_t* data, size_t len);

  std::unique_ptr<DatagramSocket> inner_;
  LocalRingOptions options_;
  uint32_t uid_ = 0;
  absl::flat_hash_map<Peer, std::unique_ptr<Out>> out_;
  absl::flat_hash_map<Peer, std::unique_ptr<In>> in_;
  std::vector<InDatagram> udp_in_;
  std::vector<Out*> used_;  // the rings SendBatch used
  LocalRingStats stats_;
};

// The /dev/shm name of the ring from `from` to `to` for user `uid`.
std::string LocalRingName(uint32_t uid, const Peer& to, const Peer& from);

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_LOCAL_RING_H_
