#include "lib/transport/local_ring.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "lib/transport/udp_socket.h"
#include "lib/transport/wire.h"

namespace hetps {
namespace transport {
namespace {

constexpr uint64_t kRingMagic = 0x31474e5253505448ull;  // "HTPSRNG1"
constexpr uint32_t kWrapMark = 0xffffffffu;
// A note (UDP, between the two endpoints): "a ring for you, attach or
// read it". Its first bytes are never a data-plane datagram's ("HP").
constexpr char kNoteMagic[8] = {'H', 'E', 'T', 'P', 'S', 'R', 'N', 'G'};
constexpr size_t kNoteBytes = 20;
constexpr uint32_t kNoteRing = 1;
// Ring records handed out per RecvBatch and ring.
constexpr size_t kRingBatch = 256;

uint64_t Round8(uint64_t n) { return (n + 7) & ~uint64_t(7); }

uint64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000 + uint64_t(ts.tv_nsec) / 1000;
}

uint64_t RandomNonce() {
  uint64_t n = 0;
  while (n == 0) {
    if (getrandom(&n, sizeof(n), 0) != sizeof(n)) n = NowUs() ^ (uint64_t(getpid()) << 40);
  }
  return n;
}

}  // namespace

struct ShmRing::Header {
  uint64_t magic;
  uint64_t nonce;
  uint64_t capacity;
  uint32_t attached;
  uint32_t writer_pid;        // LocalRingSocket's sweep: rings of processes gone
  alignas(64) uint64_t head;  // written by the writer: bytes published
  alignas(64) uint64_t tail;  // written by the reader: bytes given back
  alignas(64) uint32_t sleeping;
};

void ShmRing::Init(void* memory, uint64_t capacity, uint64_t nonce) {
  static_assert(sizeof(Header) <= kRingHeaderBytes, "ring header too large");
  static_assert(offsetof(Header, writer_pid) == 28, "SweepLocalRings reads writer_pid there");
  std::memset(memory, 0, kRingHeaderBytes);
  Header* h = static_cast<Header*>(memory);
  h->nonce = nonce;
  h->capacity = capacity;
  h->writer_pid = uint32_t(getpid());
  __atomic_store_n(&h->magic, kRingMagic, __ATOMIC_RELEASE);
}

bool ShmRing::Attach(void* memory, size_t bytes, uint64_t nonce) {
  Header* h = static_cast<Header*>(memory);
  const uint64_t capacity = h->capacity;
  if (bytes < kRingHeaderBytes || __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != kRingMagic ||
      h->nonce != nonce || capacity < kCapacityMin || capacity > kCapacityMax ||
      (capacity & (capacity - 1)) != 0 || bytes - kRingHeaderBytes < capacity) {
    return false;
  }
  h_ = h;
  data_ = static_cast<uint8_t*>(memory) + kRingHeaderBytes;
  capacity_ = capacity;
  return true;
}

bool ShmRing::Write(const uint8_t* head, size_t head_len, const uint8_t* body, size_t body_len,
                    uint64_t sent_us) {
  const uint64_t len = head_len + body_len;
  if (len == 0 || len > kDatagramBytesMax) return false;
  const uint64_t need = kRecordHeaderBytes + Round8(len);
  uint64_t at = __atomic_load_n(&h_->head, __ATOMIC_RELAXED);
  const uint64_t tail = __atomic_load_n(&h_->tail, __ATOMIC_ACQUIRE);
  uint64_t pos = at & (capacity_ - 1);
  const uint64_t skip = pos + need > capacity_ ? capacity_ - pos : 0;
  if (at + skip + need - tail > capacity_) return false;
  if (skip > 0) {
    std::memcpy(data_ + pos, &kWrapMark, sizeof(kWrapMark));
    at += skip;
    pos = 0;
  }
  const uint32_t len32 = uint32_t(len), zero = 0;
  std::memcpy(data_ + pos, &len32, 4);
  std::memcpy(data_ + pos + 4, &zero, 4);
  std::memcpy(data_ + pos + 8, &sent_us, 8);
  if (head_len > 0) std::memcpy(data_ + pos + kRecordHeaderBytes, head, head_len);
  if (body_len > 0) std::memcpy(data_ + pos + kRecordHeaderBytes + head_len, body, body_len);
  __atomic_store_n(&h_->head, at + need, __ATOMIC_RELEASE);
  return true;
}

bool ShmRing::Read(uint64_t* cursor, uint8_t** data, size_t* len, uint64_t* sent_us,
                   bool* broken) const {
  // At most one wrap mark before a record.
  for (int k = 0; k < 2; ++k) {
    const uint64_t head = __atomic_load_n(&h_->head, __ATOMIC_ACQUIRE);
    if (head == *cursor) return false;
    const uint64_t avail = head - *cursor;  // huge when the writer went back
    // Records start 8-aligned; the cursor starts at the tail, which the
    // writer's memory holds, so an unaligned one is the writer's doing.
    if (avail > capacity_ || avail < sizeof(uint32_t) || (*cursor & 7) != 0) break;
    const uint64_t pos = *cursor & (capacity_ - 1);
    uint32_t n;
    std::memcpy(&n, data_ + pos, sizeof(n));
    if (n == kWrapMark) {
      if (capacity_ - pos > avail) break;
      *cursor += capacity_ - pos;
      continue;
    }
    const uint64_t need = kRecordHeaderBytes + Round8(n);
    if (n == 0 || n > kDatagramBytesMax || need > avail || pos + need > capacity_) break;
    std::memcpy(sent_us, data_ + pos + 8, sizeof(*sent_us));
    *data = data_ + pos + kRecordHeaderBytes;
    *len = n;
    *cursor += need;
    return true;
  }
  *broken = true;
  return false;
}

void ShmRing::Release(uint64_t cursor) { __atomic_store_n(&h_->tail, cursor, __ATOMIC_RELEASE); }
uint64_t ShmRing::tail() const { return __atomic_load_n(&h_->tail, __ATOMIC_ACQUIRE); }
uint64_t ShmRing::head() const { return __atomic_load_n(&h_->head, __ATOMIC_ACQUIRE); }
bool ShmRing::empty() const { return __atomic_load_n(&h_->head, __ATOMIC_ACQUIRE) == tail(); }
void ShmRing::SetAttached() { __atomic_store_n(&h_->attached, 1u, __ATOMIC_RELEASE); }
bool ShmRing::attached() const { return __atomic_load_n(&h_->attached, __ATOMIC_ACQUIRE) == 1; }

void ShmRing::SetSleeping() {
  __atomic_store_n(&h_->sleeping, 1u, __ATOMIC_SEQ_CST);
  // Ordered before the reader's next look at head (empty()): a writer that
  // published after that look sees the flag and wakes it.
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

bool ShmRing::TakeSleeping() {
  // Ordered after the writer's head stores (the release in Write).
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&h_->sleeping, __ATOMIC_RELAXED) == 0) return false;
  return __atomic_exchange_n(&h_->sleeping, 0u, __ATOMIC_SEQ_CST) == 1;
}

std::string LocalRingName(uint32_t uid, const Peer& to, const Peer& from) {
  return absl::StrCat("/hetps-ring-", uid, "-", ntohl(to.ip), "-", ntohs(to.port), "-",
                      ntohl(from.ip), "-", ntohs(from.port));
}

struct LocalRingSocket::Mapping {
  void* addr = nullptr;
  size_t bytes = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, bytes);
  }
};

struct LocalRingSocket::Out {
  Peer to;
  Mapping map;
  ShmRing ring;
  std::string name;  // unlinked when this goes
  uint64_t nonce = 0;
  bool ok = false;        // false: creating it failed; retry after retry_us
  bool attached = false;  // the peer attached (read from the ring)
  // In this SendBatch: listed in used_ (not to be dropped before it
  // ends), written to, found full (the rest of the batch goes by UDP).
  bool used = false;
  bool wrote = false;
  bool full = false;
  uint64_t retry_us = 0;
  uint64_t created_us = 0;
  uint64_t offered_us = 0;
  uint64_t seen_tail = 0;
  uint64_t tail_moved_us = 0;
  ~Out() {
    if (!name.empty()) shm_unlink(name.c_str());
  }
};

struct LocalRingSocket::In {
  Mapping map;
  ShmRing ring;
  uint64_t nonce = 0;
  uint64_t cursor = 0;  // past what RecvBatch handed out
  bool broken = false;
};

LocalRingSocket::LocalRingSocket(std::unique_ptr<DatagramSocket> inner,
                                 const LocalRingOptions& options)
    : inner_(std::move(inner)), options_(options), uid_(geteuid()) {}

LocalRingSocket::~LocalRingSocket() = default;

void SweepLocalRings(uint32_t uid) {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  const std::string prefix = absl::StrCat("hetps-ring-", uid, "-");
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string path = "/" + name;
    const int fd = shm_open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0) continue;
    struct stat st;
    uint64_t words[5] = {0};
    const bool ours = fstat(fd, &st) == 0 && st.st_uid == uid && (st.st_mode & 077) == 0 &&
                      pread(fd, words, sizeof(words), 0) == ssize_t(sizeof(words));
    close(fd);
    const uint32_t pid = uint32_t(words[3] >> 32);  // Header::writer_pid
    if (ours && words[0] == kRingMagic && pid > 0 && kill(pid_t(pid), 0) != 0 && errno == ESRCH) {
      shm_unlink(path.c_str());
    }
  }
  closedir(dir);
}

absl::StatusOr<std::unique_ptr<LocalRingSocket>> LocalRingSocket::Create(
    std::unique_ptr<DatagramSocket> inner, const LocalRingOptions& options) {
  const uint64_t c = options.ring_bytes;
  if (inner == nullptr || c < ShmRing::kCapacityMin || c > ShmRing::kCapacityMax ||
      (c & (c - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("local rings: ring_bytes ", c, " is not a power of two in [",
                     ShmRing::kCapacityMin, ", ", ShmRing::kCapacityMax, "]"));
  }
  // Rings whose writer died before a reader attached (attaching unlinks
  // the name) would hold /dev/shm until reboot.
  SweepLocalRings(geteuid());
  return std::unique_ptr<LocalRingSocket>(new LocalRingSocket(std::move(inner), options));
}

bool LocalRingSocket::IsLocal(const Peer& p) const {
  const uint32_t ip = ntohl(p.ip);
  return (ip >> 24) == 127 || (p.ip != 0 && p.ip == inner_->local().ip);
}

void LocalRingSocket::SendNote(const Peer& to, uint32_t kind, uint64_t nonce) {
  uint8_t note[kNoteBytes];
  std::memcpy(note, kNoteMagic, 8);
  std::memcpy(note + 8, &kind, 4);
  std::memcpy(note + 12, &nonce, 8);
  OutDatagram d{to, note, kNoteBytes, nullptr, 0};
  inner_->SendBatch(&d, 1);
}

LocalRingSocket::Out* LocalRingSocket::OutRing(const Peer& to, uint64_t now) {
  std::unique_ptr<Out>& slot = out_[to];
  // (Not one this SendBatch used: `used_` holds it.)
  if (slot != nullptr && slot->ok && slot->attached && !slot->used && !slot->ring.empty()) {
    // A peer that stopped reading (it restarted, or stalled) loses the
    // ring; what was in it is resent by the endpoint, by UDP.
    const uint64_t tail = slot->ring.tail();
    if (tail != slot->seen_tail) {
      slot->seen_tail = tail;
      slot->tail_moved_us = now;
    } else if (now - slot->tail_moved_us > options_.stuck_us) {
      slot.reset();
    }
  }
  if (slot != nullptr && !slot->ok && now < slot->retry_us) return nullptr;
  if (slot == nullptr || !slot->ok) {
    slot = std::make_unique<Out>();
    slot->to = to;
    slot->retry_us = now + 1'000'000;
    const std::string name = LocalRingName(uid_, to, inner_->local());
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
      shm_unlink(name.c_str());  // an earlier process's with these ports
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    }
    if (fd < 0) return nullptr;
    slot->name = name;
    const size_t bytes = ShmRing::kRingHeaderBytes + options_.ring_bytes;
    void* addr = MAP_FAILED;
    // Reserved now, not on first touch: a /dev/shm too small for the ring
    // (a container's) refuses here, where touching an unreserved page
    // would kill the process with SIGBUS.
    if (posix_fallocate(fd, 0, off_t(bytes)) == 0) {
      addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    close(fd);
    if (addr == MAP_FAILED) return nullptr;
    slot->map.addr = addr;
    slot->map.bytes = bytes;
    slot->nonce = RandomNonce();
    ShmRing::Init(addr, options_.ring_bytes, slot->nonce);
    if (!slot->ring.Attach(addr, bytes, slot->nonce)) return nullptr;
    slot->ok = true;
    slot->created_us = now;
    ++stats_.rings_created;
  }
  Out* o = slot.get();
  if (!o->attached) {
    o->attached = o->ring.attached();
    if (o->attached) {
      o->tail_moved_us = now;
    } else if (o->offered_us != 0 && now - o->created_us > options_.attach_wait_us) {
      // A peer that does not take rings (it has them off): no file held
      // for it; offered again later.
      slot = std::make_unique<Out>();
      slot->retry_us = now + 10 * options_.attach_wait_us;
      return nullptr;
    } else if (o->offered_us == 0 || now - o->offered_us >= options_.offer_every_us) {
      SendNote(to, kNoteRing, o->nonce);
      o->offered_us = now;
    }
  }
  return o;
}

int LocalRingSocket::SendBatch(const OutDatagram* d, size_t n) {
  const uint64_t now = NowUs();
  used_.clear();
  // The ring that takes a datagram to `to`, or none (UDP). A ring found
  // full takes nothing more in this batch, so what follows to that peer
  // joins the kernel's run instead of going one datagram at a time.
  auto ring_for = [&](const Peer& to) -> Out* {
    if (!IsLocal(to)) return nullptr;
    Out* o = OutRing(to, now);
    if (o == nullptr || !o->attached) return nullptr;
    if (o->full) {
      ++stats_.ring_full;
      return nullptr;
    }
    return o;
  };
  auto use = [&](Out* o) {
    if (!o->used) used_.push_back(o);
    o->used = true;
  };
  size_t i = 0;
  int result = 0;
  while (i < n) {
    Out* o = ring_for(d[i].to);
    if (o != nullptr) {
      use(o);
      if (o->ring.Write(d[i].head, d[i].head_len, d[i].body, d[i].body_len, now)) {
        ++stats_.datagrams_sent;
        o->wrote = true;
        ++i;
        continue;
      }
      ++stats_.ring_full;
      o->full = true;
    }
    // No tag: the network never sees it; the caller seals it and sends again.
    if (!d[i].sealed) break;
    // A run for the kernel: up to the next datagram a ring takes (or that
    // only a ring may take).
    size_t j = i + 1;
    while (j < n && d[j].sealed && ring_for(d[j].to) == nullptr) ++j;
    const int sent = inner_->SendBatch(d + i, j - i);
    if (sent < 0) {
      if (i == 0) result = sent;
      break;
    }
    i += size_t(sent);
    if (i < j) break;  // no room in the socket now
  }
  for (Out* o : used_) {
    if (o->wrote && o->ring.TakeSleeping()) SendNote(o->to, kNoteRing, o->nonce);
    o->used = o->wrote = o->full = false;
  }
  return result < 0 ? result : int(i);
}

bool LocalRingSocket::PrivateTo(const Peer& to) const {
  auto it = out_.find(to);
  if (it == out_.end() || it->second == nullptr || !it->second->ok) return false;
  const Out& o = *it->second;
  return (o.attached || o.ring.attached()) && !o.full;
}

void LocalRingSocket::HandleNote(const Peer& from, const uint8_t* data, size_t len) {
  uint32_t kind;
  uint64_t nonce;
  std::memcpy(&kind, data + 8, 4);
  std::memcpy(&nonce, data + 12, 8);
  if (len != kNoteBytes || kind != kNoteRing || !IsLocal(from)) {
    ++stats_.rings_refused;
    return;
  }
  auto it = in_.find(from);
  if (it != in_.end() && it->second->nonce == nonce && !it->second->broken) return;  // a wake
  if (it == in_.end() && in_.size() >= options_.rings_max) {
    ++stats_.rings_refused;
    return;
  }
  const std::string name = LocalRingName(uid_, inner_->local(), from);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    ++stats_.rings_refused;
    return;
  }
  struct stat st;
  auto in = std::make_unique<In>();
  const bool owned = fstat(fd, &st) == 0 && st.st_uid == uid_ && (st.st_mode & 077) == 0 &&
                     uint64_t(st.st_size) >= ShmRing::kRingHeaderBytes + ShmRing::kCapacityMin &&
                     uint64_t(st.st_size) <= ShmRing::kRingHeaderBytes + ShmRing::kCapacityMax;
  if (owned) {
    void* addr = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr != MAP_FAILED) {
      in->map.addr = addr;
      in->map.bytes = size_t(st.st_size);
    }
  }
  close(fd);
  if (in->map.addr == nullptr || !in->ring.Attach(in->map.addr, in->map.bytes, nonce)) {
    ++stats_.rings_refused;
    return;
  }
  // Mapped on both sides: the name is no longer needed, and nothing is
  // left behind in /dev/shm whichever process ends first.
  shm_unlink(name.c_str());
  in->nonce = nonce;
  in->cursor = in->ring.tail();
  in->ring.SetAttached();
  in_[from] = std::move(in);
  ++stats_.rings_attached;
}

int LocalRingSocket::RecvBatch(std::vector<InDatagram>* out) {
  out->clear();
  // What the last call handed out goes back to the writers now.
  for (auto it = in_.begin(); it != in_.end();) {
    if (it->second->broken) {
      ++stats_.rings_broken;
      in_.erase(it++);
      continue;
    }
    it->second->ring.Release(it->second->cursor);
    ++it;
  }
  const int got = inner_->RecvBatch(&udp_in_);
  if (got < 0) return got;
  for (const InDatagram& d : udp_in_) {
    if (d.len >= 8 && std::memcmp(d.data, kNoteMagic, 8) == 0) {
      if (d.len >= kNoteBytes) {
        HandleNote(d.from, d.data, d.len);
      } else {
        ++stats_.rings_refused;
      }
      continue;
    }
    out->push_back(d);
  }
  const uint64_t now = NowUs();
  size_t from_rings = 0;
  for (auto& [peer, in] : in_) {
    size_t k = 0;
    for (; k < kRingBatch; ++k) {
      InDatagram d;
      uint64_t sent_us = 0;
      if (!in->ring.Read(&in->cursor, &d.data, &d.len, &sent_us, &in->broken)) break;
      d.from = peer;
      d.private_channel = true;
      d.age_us = sent_us <= now && now - sent_us <= kRxAgeMaxUs ? now - sent_us : 0;
      out->push_back(d);
    }
    from_rings += k;
    // Drained: the endpoint may sleep once it has handled these, so the
    // writer's next records come with a note that wakes it (next_arrival_us
    // covers what lands before the endpoint looks again).
    if (k < kRingBatch) in->ring.SetSleeping();
  }
  stats_.datagrams_received += from_rings;
  return got + int(from_rings);
}

uint64_t LocalRingSocket::next_arrival_us() const {
  for (const auto& [peer, in] : in_) {
    if (in->broken || in->ring.head() != in->cursor) return 0;  // more to read now
  }
  return inner_->next_arrival_us();
}

}  // namespace transport
}  // namespace hetps
