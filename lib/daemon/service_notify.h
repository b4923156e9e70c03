// ServiceNotifier: systemd's notify protocol for Type=notify units, through
// libsystemd's sd_notify. READY=1 once the daemon listens; WATCHDOG=1 from
// the main loop, at half the unit's WatchdogSec, only while the daemon is
// healthy (so a hung main loop or a fatal error ends the pings and systemd
// restarts the service); STOPPING=1 when it drains. Without NOTIFY_SOCKET
// (not started by systemd) every call does nothing.
//
// One owner: the daemon's main thread.
#ifndef HETPS_LIB_DAEMON_SERVICE_NOTIFY_H_
#define HETPS_LIB_DAEMON_SERVICE_NOTIFY_H_

#include <string>

#include "absl/time/time.h"

namespace hetps {

class ServiceNotifier {
 public:
  // Reads the watchdog interval systemd set for this process (WATCHDOG_USEC,
  // WATCHDOG_PID); none: no pings.
  ServiceNotifier();

  // READY=1 with a status line.
  void Ready(const std::string& status);
  // STOPPING=1 with a status line.
  void Stopping(const std::string& status);
  // From the main loop, as often as it turns: WATCHDOG=1 when half the
  // interval has passed since the last ping and `healthy`.
  void Tick(bool healthy, absl::Time now);

  absl::Duration watchdog_interval() const { return interval_; }
  int pings() const { return pings_; }

 private:
  absl::Duration interval_ = absl::ZeroDuration();  // zero: no watchdog
  absl::Time last_ping_ = absl::InfinitePast();
  int pings_ = 0;
};

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_SERVICE_NOTIFY_H_
