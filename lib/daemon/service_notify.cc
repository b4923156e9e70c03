#include "lib/daemon/service_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace hetps {

ServiceNotifier::ServiceNotifier() {
  uint64_t usec = 0;
  // 0 = unset WATCHDOG_PID or ours: keep the variables (unset_environment
  // 0) for a process that re-execs itself.
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) interval_ = absl::Microseconds(usec);
}

void ServiceNotifier::Ready(const std::string& status) {
  sd_notify(0, absl::StrCat("READY=1\nSTATUS=", status).c_str());
}

void ServiceNotifier::Stopping(const std::string& status) {
  sd_notify(0, absl::StrCat("STOPPING=1\nSTATUS=", status).c_str());
}

void ServiceNotifier::Tick(bool healthy, absl::Time now) {
  if (interval_ == absl::ZeroDuration() || !healthy) return;
  if (now - last_ping_ < interval_ / 2) return;
  if (sd_notify(0, "WATCHDOG=1") > 0) ++pings_;
  last_ping_ = now;
}

}  // namespace hetps
