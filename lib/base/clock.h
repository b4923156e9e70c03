// Clock: the source of time for everything that times out or expires.
// Passed in through constructors so tests can substitute FakeClock and so a
// simulation can be replayed. RealClock is thread-safe and stateless;
// FakeClock is thread-safe (time only moves when a test calls Advance).
#ifndef HETPS_LIB_BASE_CLOCK_H_
#define HETPS_LIB_BASE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace hetps {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // Process-wide instance; stateless, so sharing it is safe.
  static RealClock* Get() {
    static RealClock* clock = new RealClock;
    return clock;
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps

#endif  // HETPS_LIB_BASE_CLOCK_H_
