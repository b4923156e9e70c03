#include "lib/daemon/daemon_main.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <ctime>

#include "absl/synchronization/mutex.h"
#include "lib/base/escape.h"
#include "lib/base/log.h"
#include "lib/base/sysinfo.h"
#include "lib/daemon/service_notify.h"

namespace hetps {

int RunDaemon(int argc, char** argv, const DaemonSpec& spec) {
#ifdef NDEBUG
  // Debian's absl checks every lock against a global lock graph (a hash
  // lookup per Lock): a few percent of the data plane's CPU. Lock order is
  // checked at build time instead (tools/tsa.sh) and in debug builds.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  ConfigSchema schema(spec.name);
  spec.declare_config(&schema);
  absl::StatusOr<CommandLine> cl = LoadConfiguration(argc, argv, &schema);
  if (!cl.ok()) {
    std::fprintf(stderr, "%s: config error: %s\n", spec.name,
                 std::string(cl.status().message()).c_str());
    return 2;
  }
  if (cl->help) {
    std::fputs(schema.Help().c_str(), stdout);
    return 0;
  }
  if (spec.validate_config) {
    absl::Status s = spec.validate_config();
    if (!s.ok()) {
      std::fprintf(stderr, "%s: config error: %s\n", spec.name, std::string(s.message()).c_str());
      return 2;
    }
  }
  if (cl->print_config) {
    std::fputs(schema.DumpYaml().c_str(), stdout);
    return 0;
  }

  const CommonConfig& common = spec.common();
  if (!common.cpu_affinity.empty()) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(common.cpu_affinity);
    absl::Status pinned = cpus.ok() ? PinToCpus(*cpus) : cpus.status();
    if (!pinned.ok()) {
      std::fprintf(stderr, "%s: config error: cpu_affinity: %s\n", spec.name,
                   std::string(pinned.message()).c_str());
      return 2;
    }
  }

  // Every thread created from here on inherits the CPU and signal masks;
  // only sigtimedwait below takes these signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  LogLevel level = LogLevel::kInfo;
  ParseLogLevel(common.log_level, &level);
  LogSink sink(stderr, level);
  DaemonEnv env;
  env.log_sink = &sink;
  env.config_entries = schema.Entries();
  env.config_path = cl->config_path;

  absl::StatusOr<std::unique_ptr<Daemon>> daemon = spec.create(env);
  if (!daemon.ok()) {
    std::fprintf(stderr, "%s: %s\n", spec.name, std::string(daemon.status().message()).c_str());
    return 2;
  }
  absl::Status started = (*daemon)->Start();
  if (!started.ok()) {
    std::fprintf(stderr, "%s: %s\n", spec.name, std::string(started.message()).c_str());
    (*daemon)->Shutdown();
    return 2;
  }
  const Logger& log = (*daemon)->runtime().logger();
  absl::Notification& drain = (*daemon)->runtime().drain_requested();
  // systemd (Type=notify): ready now that it listens; the watchdog is fed
  // from this loop only, and only while no fatal error is recorded.
  ServiceNotifier notifier;
  notifier.Ready(std::string("serving as ") + (*daemon)->runtime().node_id());
  if (notifier.watchdog_interval() > absl::ZeroDuration()) {
    log.Info("systemd watchdog",
             {{"interval_s", absl::ToDoubleSeconds(notifier.watchdog_interval())}});
  }
  timespec tick{0, 100 * 1000 * 1000};
  while (true) {
    notifier.Tick((*daemon)->runtime().fatal().ok(), absl::Now());
    int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      log.Info("signal received, draining", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
      break;
    }
    if (drain.HasBeenNotified()) break;
  }
  notifier.Stopping("draining");
  const absl::Status fatal = (*daemon)->runtime().fatal();
  (*daemon)->Shutdown();
  if (!fatal.ok()) {
    log.Error("stopped", {{"error", std::string(fatal.message())}});
    daemon->reset();
    std::fprintf(stderr, "%s: %s\n", spec.name, EscapeUntrusted(fatal.message()).c_str());
    return 2;
  }
  log.Info("stopped");
  daemon->reset();
  return 0;
}

}  // namespace hetps
