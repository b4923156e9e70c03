// psd: see daemons/psd/psd.h and lib/daemon/daemon_main.h.
#include "daemons/psd/psd.h"

int main(int argc, char** argv) {
  hetps::PsdConfig config;
  return hetps::RunDaemon(
      argc, argv,
      {"psd", [&](hetps::ConfigSchema* s) { hetps::DeclarePsdConfig(s, &config); }, nullptr,
       [&](const hetps::DaemonEnv& env) -> absl::StatusOr<std::unique_ptr<hetps::Daemon>> {
         auto d = hetps::Psd::Create(config, env);
         if (!d.ok()) return d.status();
         return std::unique_ptr<hetps::Daemon>(std::move(*d));
       },
       [&]() -> const hetps::CommonConfig& { return config.common; }});
}
