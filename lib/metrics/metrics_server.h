// MetricsServer: serves one prometheus::Registry at http://<listen>/metrics.
// Owns the HTTP exposer (civetweb threads); the registry is shared with the
// daemon's components, which keep references to their metric families.
// Thread-safe: prometheus-cpp metrics may be updated from any thread.
#ifndef HETPS_LIB_METRICS_METRICS_SERVER_H_
#define HETPS_LIB_METRICS_METRICS_SERVER_H_

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace hetps {

class MetricsServer {
 public:
  // `listen` is host:port (port 0 = any free port). `config_key` names the
  // config key in errors (e.g. "address already in use (metrics_listen)").
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Create(
      const std::string& listen, const std::string& config_key,
      std::shared_ptr<prometheus::Registry> registry);

  // host:port actually bound (port resolved when 0 was asked for).
  const std::string& address() const { return address_; }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, std::string address)
      : exposer_(std::move(exposer)), address_(std::move(address)) {}

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

// Registers the metrics every hetps daemon exports:
//   <daemon>_build_info{version="..."} 1
//   process_start_time_seconds
void RegisterProcessMetrics(prometheus::Registry& registry, const std::string& daemon,
                            const std::string& version);

}  // namespace hetps

#endif  // HETPS_LIB_METRICS_METRICS_SERVER_H_
