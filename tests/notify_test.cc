// systemd's notify protocol with the real binary and a NOTIFY_SOCKET of
// the test's own: READY=1 once the daemon listens, WATCHDOG=1 at half the
// WATCHDOG_USEC it was given, STOPPING=1 when it drains on SIGTERM.
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/testing/cluster.h"

namespace hetps {
namespace testing {
namespace {

// Messages from `fd` until `done` holds for what arrived (true), or the
// wait runs out (false: the daemon never sent it).
bool ReceiveUntil(int fd, std::vector<std::string>* got,
                  const std::function<bool(const std::vector<std::string>&)>& done,
                  absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done(*got)) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, int(absl::ToInt64Milliseconds(left)) + 1) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) got->emplace_back(buf, size_t(n));
  }
  return true;
}

int Count(const std::vector<std::string>& msgs, const std::string& what) {
  int n = 0;
  for (const auto& m : msgs) n += m.find(what) != std::string::npos;
  return n;
}

TEST_CASE("schedd: READY once listening, WATCHDOG while healthy, STOPPING on SIGTERM") {
  LocalCluster c("notify");
  // An abstract socket ("@name"): a path under the test's directory can
  // exceed sun_path's 108 bytes.
  const std::string name = "hetps-notify-test-" + std::to_string(getpid());
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.c_str(), name.size());
  const socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  const std::string path = "@" + name;
  // What systemd sets for a Type=notify unit with WatchdogSec=0.4 (no
  // WATCHDOG_PID: any process may claim it).
  setenv("NOTIFY_SOCKET", path.c_str(), 1);
  setenv("WATCHDOG_USEC", "400000", 1);
  const absl::Status started = c.StartSchedd();
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  REQUIRE(started.ok());

  std::vector<std::string> got;
  REQUIRE(ReceiveUntil(
      fd, &got, [](const auto& m) { return Count(m, "WATCHDOG=1") >= 2; }, absl::Seconds(30)));
  REQUIRE(!got.empty());
  INFO(got.front());
  CHECK(got.front().find("READY=1") == 0);
  CHECK(got.front().find("STATUS=serving as schedd") != std::string::npos);
  CHECK(Count(got, "READY=1") == 1);

  c.Kill("schedd", SIGTERM);
  CHECK(c.WaitExit("schedd", absl::Seconds(20)) == 0);
  CHECK(ReceiveUntil(
      fd, &got, [](const auto& m) { return Count(m, "STOPPING=1") == 1; }, absl::Seconds(5)));
  close(fd);
}

}  // namespace
}  // namespace testing
}  // namespace hetps
