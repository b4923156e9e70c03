#include "lib/metrics/metrics_server.h"

#include <prometheus/gauge.h>

#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/net_address.h"
#include "lib/base/status_macros.h"

namespace hetps {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Create(
    const std::string& listen, const std::string& config_key,
    std::shared_ptr<prometheus::Registry> registry) {
  ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(listen));
  absl::Status probe = ProbeTcpBind(hp);
  if (!probe.ok()) {
    return absl::Status(probe.code(), absl::StrCat("cannot listen on ", listen, " (", config_key,
                                                   "): ", probe.message()));
  }
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(hp.ToString(), /*num_threads=*/2);
  } catch (const std::exception& e) {
    // civetweb reports bind failures by throwing; convert at the edge.
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (", config_key, "): ", e.what()));
  }
  exposer->RegisterCollectable(registry);
  std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (", config_key, "): no port bound"));
  }
  HostPort bound = hp;
  bound.port = static_cast<uint16_t>(ports.front());
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(exposer), bound.ToString()));
}

void RegisterProcessMetrics(prometheus::Registry& registry, const std::string& daemon,
                            const std::string& version) {
  prometheus::BuildGauge()
      .Name(daemon + "_build_info")
      .Help("Always 1; labels carry the hetps version of this binary.")
      .Register(registry)
      .Add({{"version", version}})
      .Set(1);
  prometheus::BuildGauge()
      .Name("process_start_time_seconds")
      .Help("Start time of the process since the Unix epoch, in seconds.")
      .Register(registry)
      .Add({})
      .Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
}

}  // namespace hetps
