// schedd: membership and policy daemon. See lib/daemon/daemon_main.h.
#include "daemons/schedd/schedd.h"

int main(int argc, char** argv) {
  hetps::ScheddConfig config;
  return hetps::RunDaemon(
      argc, argv,
      {"schedd", [&](hetps::ConfigSchema* s) { hetps::DeclareScheddConfig(s, &config); }, nullptr,
       [&](const hetps::DaemonEnv& env) -> absl::StatusOr<std::unique_ptr<hetps::Daemon>> {
         auto d = hetps::Schedd::Create(config, env);
         if (!d.ok()) return d.status();
         return std::unique_ptr<hetps::Daemon>(std::move(*d));
       },
       [&]() -> const hetps::CommonConfig& { return config.common; }});
}
