// Every daemon's /metrics passes `promtool check metrics` (exposition format
// and Prometheus naming lint) and carries <daemon>_build_info.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/testing/cluster.h"

namespace hetps {
namespace testing {
namespace {

constexpr char kPromtool[] = "/usr/bin/promtool";

TEST_CASE("promtool check metrics passes on every daemon") {
  REQUIRE(access(kPromtool, X_OK) == 0);  // installed by tools/bootstrap.sh
  LocalCluster c("metrics");
  REQUIRE(c.StartSchedd().ok());
  REQUIRE(c.StartNode("psd", "psd-0").ok());
  REQUIRE(c.StartNode("workerd", "worker-0").ok());
  REQUIRE(WaitFor([&] { return c.AliveCount() == 3; }, absl::Seconds(10)));
  // schedd refreshes its gauges on its reaper tick; wait for that, too.
  REQUIRE(WaitFor(
      [&] {
        auto m = HttpGet(c.node("schedd").metrics_address, "/metrics");
        return m.ok() &&
               m->find("schedd_nodes{role=\"worker\",state=\"alive\"} 1") != std::string::npos;
      },
      absl::Seconds(10)));
  for (const char* id : {"schedd", "psd-0", "worker-0"}) {
    std::string daemon = std::string(id) == "schedd"  ? "schedd"
                         : std::string(id) == "psd-0" ? "psd"
                                                      : "workerd";
    // Scrape twice: the second scrape includes the exposer's own counters
    // updated by the first.
    REQUIRE(HttpGet(c.node(id).metrics_address, "/metrics").ok());
    absl::StatusOr<std::string> body = HttpGet(c.node(id).metrics_address, "/metrics");
    REQUIRE(body.ok());
    INFO(daemon << " metrics:\n" << *body);
    CHECK(body->find(daemon + "_build_info{version=\"") != std::string::npos);
    CHECK(body->find("process_start_time_seconds") != std::string::npos);
    if (daemon != "schedd") {
      CHECK(body->find(daemon + "_scheduler_connected 1") != std::string::npos);
      CHECK(body->find(daemon + "_heartbeats_total{result=\"ok\"}") != std::string::npos);
    } else {
      CHECK(body->find("schedd_nodes{role=\"worker\",state=\"alive\"} 1") != std::string::npos);
    }
    ProcessResult lint = RunCommand({kPromtool, "check", "metrics"}, absl::Seconds(30), *body);
    INFO("promtool: " << lint.stdout_text << lint.stderr_text);
    CHECK(lint.exit_code == 0);
  }
}

}  // namespace
}  // namespace testing
}  // namespace hetps
