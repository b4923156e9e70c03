// nfqdelay: constant propagation delay for a network namespace, where the
// kernel has no netem. nftables hands packets to NFQUEUE `--queue`; this
// program holds each one until `--delay_ms` after it arrived, then accepts
// it. Packets leave in arrival order (a FIFO: no reordering, no jitter).
// Only packet metadata is copied to user space, never payloads.
//
//   nft add rule inet t out queue num 7 bypass   # bypass: pass if we are not running
//   nfqdelay --queue=7 --delay_ms=20
//
// Bounded: at most --held_max packets wait (default 200000, ~4 s at
// 100 Mbit/s of 1400-byte packets); beyond that a packet is accepted at
// once and counted. SIGINT/SIGTERM release everything held and print the
// counters. Used by deploy/testbed/testbed.sh; a user-level ping
// (`ping -U`) confirms the RTT (plain ping stamps before the queue).
//
// It sleeps until the next release is due (ppoll to the microsecond, with
// a 1 us timer slack) and releases each due run of packets with one batch
// verdict, so that it takes no CPU between releases: the testbed runs one
// per namespace beside the system it measures, often on two cores, where
// CPU spent waiting is taken from the daemons, and a release the
// scheduler holds back is jitter the emulated link does not have.
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>

extern "C" {
#include <libnetfilter_queue/libnetfilter_queue.h>
}

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

uint64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000 + uint64_t(ts.tv_nsec) / 1000;
}

struct Held {
  uint32_t id;
  uint64_t release_us;
};

struct State {
  nfq_q_handle* queue = nullptr;
  uint64_t delay_us = 0;
  size_t held_max = 200000;
  std::deque<Held> held;
  uint64_t packets = 0, overflow = 0;
  size_t held_peak = 0;
  // How late packets left, against their release time: the delay line's
  // own jitter. Buckets: under 50 us, 200 us, 1 ms, 5 ms, and beyond.
  uint64_t late[5] = {0, 0, 0, 0, 0};
  uint64_t late_max_us = 0;
  uint64_t recv_errors = 0;  // netlink reads that failed (ENOBUFS: packets never seen)
};

int OnPacket(nfq_q_handle* qh, nfgenmsg*, nfq_data* nfa, void* data) {
  auto* s = static_cast<State*>(data);
  const nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == nullptr) return 0;
  const uint32_t id = ntohl(ph->packet_id);
  ++s->packets;
  if (s->held.size() >= s->held_max) {
    ++s->overflow;
    return nfq_set_verdict(qh, id, NF_ACCEPT, 0, nullptr);
  }
  s->held.push_back({id, NowUs() + s->delay_us});
  if (s->held.size() > s->held_peak) s->held_peak = s->held.size();
  return 0;
}

// Accepts every held packet due by `now`, in order: one batch verdict for
// the last of them accepts every packet of the queue up to its id. The
// kernel numbers a queue's packets in arrival order, so those are the due
// ones and the packets accepted at once when full, already gone.
void Release(State* s, uint64_t now) {
  bool due = false;
  uint32_t last = 0;
  const bool timed = now != UINT64_MAX;  // not the release of everything at exit
  while (!s->held.empty() && s->held.front().release_us <= now) {
    if (timed) {
      const uint64_t late = now - s->held.front().release_us;
      s->late[late < 50 ? 0 : late < 200 ? 1 : late < 1000 ? 2 : late < 5000 ? 3 : 4]++;
      if (late > s->late_max_us) s->late_max_us = late;
    }
    last = s->held.front().id;
    due = true;
    s->held.pop_front();
  }
  if (due) nfq_set_verdict_batch(s->queue, last, NF_ACCEPT);
}

bool ParseFlag(const char* arg, const char* name, long* out) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  char* end = nullptr;
  *out = std::strtol(arg + n + 1, &end, 10);
  if (end == arg + n + 1 || *end != '\0') {
    std::fprintf(stderr, "nfqdelay: %s needs a number, got '%s'\n", name, arg + n + 1);
    std::exit(2);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long queue_num = -1, delay_ms = -1, held_max = 200000;
  for (int i = 1; i < argc; ++i) {
    if (ParseFlag(argv[i], "--queue", &queue_num) || ParseFlag(argv[i], "--delay_ms", &delay_ms) ||
        ParseFlag(argv[i], "--held_max", &held_max)) {
      continue;
    }
    std::fprintf(stderr, "usage: nfqdelay --queue=N --delay_ms=D [--held_max=P]\n");
    return 2;
  }
  if (queue_num < 0 || queue_num > 65535 || delay_ms < 0 || delay_ms > 60000 || held_max < 1) {
    std::fprintf(stderr,
                 "nfqdelay: --queue (0..65535) and --delay_ms (0..60000) are required; "
                 "--held_max >= 1\n");
    return 2;
  }
  State s;
  s.delay_us = uint64_t(delay_ms) * 1000;
  s.held_max = size_t(held_max);
  nfq_handle* h = nfq_open();
  if (h == nullptr) {
    std::fprintf(stderr, "nfqdelay: nfq_open failed (%s): needs CAP_NET_ADMIN\n",
                 std::strerror(errno));
    return 1;
  }
  s.queue = nfq_create_queue(h, uint16_t(queue_num), &OnPacket, &s);
  if (s.queue == nullptr) {
    std::fprintf(stderr, "nfqdelay: cannot bind queue %ld (%s): is another program on it?\n",
                 queue_num, std::strerror(errno));
    nfq_close(h);
    return 1;
  }
  nfq_set_mode(s.queue, NFQNL_COPY_META, 0);
  nfq_set_queue_maxlen(s.queue, uint32_t(held_max) + 1024);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  // Wake-ups within a microsecond of the release time (the default slack
  // is 50 us).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const int fd = nfq_fd(h);
  std::fprintf(stderr, "nfqdelay: queue %ld, delay %ld ms\n", queue_num, delay_ms);
  static char buf[1 << 16];
  while (!g_stop) {
    uint64_t now = NowUs();
    Release(&s, now);
    // Until the next release (Release left none due, so it is ahead), or
    // 100 ms with nothing held. A sleep never ends early: nothing is
    // released before its time.
    uint64_t wait_us = 100'000;
    if (!s.held.empty()) wait_us = s.held.front().release_us - now;
    const timespec timeout{time_t(wait_us / 1'000'000), long(wait_us % 1'000'000) * 1000};
    pollfd p{fd, POLLIN, 0};
    const int r = ppoll(&p, 1, &timeout, nullptr);
    if (r < 0 && errno != EINTR) break;
    if (r > 0) {
      for (;;) {
        const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ++s.recv_errors;
        if (n <= 0) break;
        nfq_handle_packet(h, buf, int(n));
      }
    }
  }
  Release(&s, UINT64_MAX);
  std::fprintf(stderr, "nfqdelay: %llu packets, peak held %zu, accepted undelayed (full) %llu\n",
               (unsigned long long)s.packets, s.held_peak, (unsigned long long)s.overflow);
  std::fprintf(stderr,
               "nfqdelay: released late by <50 us %llu, <200 us %llu, <1 ms %llu, <5 ms %llu, "
               ">=5 ms %llu (max %llu us); netlink read errors %llu\n",
               (unsigned long long)s.late[0], (unsigned long long)s.late[1],
               (unsigned long long)s.late[2], (unsigned long long)s.late[3],
               (unsigned long long)s.late[4], (unsigned long long)s.late_max_us,
               (unsigned long long)s.recv_errors);
  nfq_destroy_queue(s.queue);
  nfq_close(h);
  return 0;
}
