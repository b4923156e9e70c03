// workerd: see daemons/workerd/workerd.h and lib/daemon/daemon_main.h.
#include "daemons/workerd/workerd.h"

int main(int argc, char** argv) {
  hetps::WorkerdConfig config;
  return hetps::RunDaemon(
      argc, argv,
      {"workerd", [&](hetps::ConfigSchema* s) { hetps::DeclareWorkerdConfig(s, &config); }, nullptr,
       [&](const hetps::DaemonEnv& env) -> absl::StatusOr<std::unique_ptr<hetps::Daemon>> {
         auto d = hetps::Workerd::Create(config, env);
         if (!d.ok()) return d.status();
         return std::unique_ptr<hetps::Daemon>(std::move(*d));
       },
       [&]() -> const hetps::CommonConfig& { return config.common; }});
}
