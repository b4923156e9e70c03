// Each daemon binary, given bad configuration, prints one clear line on
// stderr naming the key or file and exits 2; good configuration follows
// flag > file > default.
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"

namespace hetps {
namespace testing {
namespace {

const char* const kDaemons[] = {"schedd", "psd", "workerd"};

std::string Binary(const std::string& d) { return Runfile(absl::StrCat("daemons/", d, "/", d)); }

std::string WriteConfig(const std::string& name, const std::string& text) {
  std::string path = TempDir("cfg_" + name) + "/config.yaml";
  std::ofstream(path) << text;
  return path;
}

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

void ExpectConfigError(const std::vector<std::string>& argv, const std::string& want) {
  ProcessResult r = RunCommand(argv, absl::Seconds(20));
  INFO("argv[0]=" << argv[0] << " stderr=" << r.stderr_text);
  CHECK(r.exit_code == 2);
  CHECK(Lines(r.stderr_text) == 1);
  CHECK(r.stderr_text.find(want) != std::string::npos);
  CHECK(r.stdout_text.empty());
}

// A listening TCP socket on 127.0.0.1; returns its port.
int Occupy(int* fd_out) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(listen(fd, 4) == 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *fd_out = fd;
  return ntohs(a.sin_port);
}

TEST_CASE("unknown key in the config file") {
  for (const char* d : kDaemons) {
    std::string path = WriteConfig(d, "log_level: info\nheartbeat_intervall_ms: 5\n");
    ExpectConfigError({Binary(d), "--config=" + path},
                      absl::StrCat(d, ": config error: unknown key 'heartbeat_intervall_ms' in ",
                                   path, " line 2"));
  }
}

TEST_CASE("wrong type in the config file") {
  for (const char* d : kDaemons) {
    std::string path = WriteConfig(d, "shutdown_grace_ms: soon\n");
    ExpectConfigError({Binary(d), "--config", path},
                      "key 'shutdown_grace_ms' in " + path + " line 1: expected an integer");
  }
  std::string path = WriteConfig("schedd_range", "heartbeat_interval_ms: 0\n");
  ExpectConfigError({Binary("schedd"), "--config=" + path}, "out of range");
  path = WriteConfig("psd_addr", "scheduler: localhost\n");
  ExpectConfigError({Binary("psd"), "--config=" + path}, "key 'scheduler'");
}

TEST_CASE("missing and unreadable config files") {
  for (const char* d : kDaemons) {
    ExpectConfigError({Binary(d), "--config=/nonexistent/hetps.yaml"},
                      "cannot read config file '/nonexistent/hetps.yaml': No such file");
  }
  std::string dir = TempDir("cfg_dir");
  ExpectConfigError({Binary("psd"), "--config=" + dir}, "': not a regular file");
}

TEST_CASE("bad flags") {
  for (const char* d : kDaemons) {
    ExpectConfigError({Binary(d), "--no_such_flag=1"}, "unknown flag --no_such_flag");
    ExpectConfigError({Binary(d), "--log_level=loud"}, "flag --log_level");
    ExpectConfigError({Binary(d), "--cpu_affinity=0-x"},
                      absl::StrCat(d, ": config error: cpu_affinity: bad CPU list item \"0-x\""));
  }
  // CPU 1023 is on no machine these tests run on.
  ExpectConfigError({Binary("psd"), "--cpu_affinity=0,1023"},
                    "cpu_affinity: CPU 1023 is not one this process may run on");
}

TEST_CASE("a daemon pinned by cpu_affinity runs every thread there") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) last = c;
  }
  REQUIRE(last >= 0);
  const std::string dir = TempDir("cfg_pinned");
  const std::string ready = dir + "/ready.json";
  absl::StatusOr<Process> p =
      Process::Start({Binary("schedd"), "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                      "--insecure", "--state_dir=" + dir + "/state", "--ready_file=" + ready,
                      absl::StrCat("--cpu_affinity=", last)},
                     dir, "schedd");
  REQUIRE(p.ok());
  REQUIRE(WaitFor([&] { return access(ready.c_str(), F_OK) == 0; }, absl::Seconds(30)));
  // Every thread the daemon started (gRPC's, the metrics server's) inherited it.
  int threads = 0;
  for (const auto& t :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", p->pid(), "/task"))) {
    std::ifstream status(t.path() / "status");
    std::string line;
    std::string list;
    while (std::getline(status, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0)
        list = line.substr(line.find_first_not_of(" \t", 18));
    }
    INFO(t.path() << " " << list);
    CHECK(list == absl::StrCat(last));
    ++threads;
  }
  CHECK(threads > 1);
  p->Signal(SIGTERM);
  CHECK(p->Wait(absl::Seconds(30)) == 0);
}

TEST_CASE("port in use, control and metrics") {
  int fd;
  int port = Occupy(&fd);
  for (const char* d : kDaemons) {
    ExpectConfigError(
        {Binary(d), absl::StrCat("--listen=127.0.0.1:", port), "--metrics_listen=127.0.0.1:0",
         "--insecure"},
        absl::StrCat("cannot listen on 127.0.0.1:", port, " (listen): Address already in use"));
    ExpectConfigError({Binary(d), "--listen=127.0.0.1:0",
                       absl::StrCat("--metrics_listen=127.0.0.1:", port), "--insecure"},
                      absl::StrCat("cannot listen on 127.0.0.1:", port,
                                   " (metrics_listen): Address already in use"));
  }
  close(fd);
}

TEST_CASE("the control plane needs TLS, or insecure: true said out loud") {
  LocalCluster c("tlscfg");  // makes the development CA
  const std::string dir = c.certs_dir();
  REQUIRE(c.Identity("psd-0", false).ok());
  for (const char* d : kDaemons) {
    ExpectConfigError({Binary(d), "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"},
                      "the control plane needs TLS: set tls_ca, tls_cert and tls_key");
  }
  auto tls = [&](const std::string& who) {
    return std::vector<std::string>{Binary("psd"),
                                    "--listen=127.0.0.1:0",
                                    "--metrics_listen=127.0.0.1:0",
                                    "--tls_ca=" + dir + "/ca.pem",
                                    "--tls_cert=" + dir + "/" + who + ".pem",
                                    "--tls_key=" + dir + "/" + who + ".key"};
  };
  // A node may act only as its certificate's identity.
  std::vector<std::string> argv = tls("psd-0");
  argv.push_back("--node_id=psd-1");
  ExpectConfigError(argv, "node_id 'psd-1' is not the CN of tls_cert");
  // An admin certificate is not a daemon's.
  ExpectConfigError(tls("admin"), "a daemon needs OU=node");
  // The key must be the certificate's.
  argv = tls("psd-0");
  argv.back() = "--tls_key=" + dir + "/admin.key";
  ExpectConfigError(argv, "is not the key of tls_cert");
  argv = tls("psd-0");
  argv.push_back("--insecure");
  ExpectConfigError(argv, "insecure: true and tls_ca/tls_cert/tls_key are both set");
  argv = tls("psd-0");
  argv[4] = "--tls_cert=/nonexistent.pem";
  ExpectConfigError(argv, "tls_cert: cannot read '/nonexistent.pem'");
}

TEST_CASE("--print-config shows flag > file > default and exits 0") {
  std::string path = WriteConfig("print", "heartbeat_interval_ms: 250\nlog_level: warn\n");
  ProcessResult r =
      RunCommand({Binary("schedd"), "--config=" + path, "--log_level=debug", "--print-config"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.stdout_text.find("heartbeat_interval_ms: 250  # file") != std::string::npos);
  CHECK(r.stdout_text.find("log_level: \"debug\"  # flag") != std::string::npos);
  CHECK(r.stdout_text.find("dead_after_missed_heartbeats: 10  # default") != std::string::npos);
  ProcessResult help = RunCommand({Binary("workerd"), "--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.stdout_text.find("--scheduler") != std::string::npos);
}

}  // namespace
}  // namespace testing
}  // namespace hetps
