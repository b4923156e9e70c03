// Clock: the source of time for everything that times out or expires.
// Passed in through constructors so tests can substitute FakeClock and so a
// simulation can be replayed. RealClock is thread-safe and stateless;
// FakeClock is thread-safe (time only moves when a test calls Advance).
// Now() is calendar time (timestamps, deadlines shown to people);
// MonotonicMicros() never goes back (RTTs, pacing, timers).
#ifndef HETPS_LIB_BASE_CLOCK_H_
#define HETPS_LIB_BASE_CLOCK_H_

#include <time.h>

#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace hetps {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  virtual uint64_t MonotonicMicros() const = 0;
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  uint64_t MonotonicMicros() const override {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000 + uint64_t(ts.tv_nsec) / 1000;
  }
  // Process-wide instance; stateless, so sharing it is safe.
  static RealClock* Get() {
    static RealClock* clock = new RealClock;
    return clock;
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : start_(start), now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  // Microseconds since the clock's start (starts at 1 s, so 0 never reads
  // as "never").
  uint64_t MonotonicMicros() const override {
    absl::MutexLock lock(&mu_);
    return uint64_t(absl::ToInt64Microseconds(now_ - start_)) + 1'000'000;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  const absl::Time start_;
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps

#endif  // HETPS_LIB_BASE_CLOCK_H_
