// Helpers of the tests that run jobs through the real binaries
// (job_test, recovery_test). Test only.
#ifndef HETPS_TESTS_JOB_HELPERS_H_
#define HETPS_TESTS_JOB_HELPERS_H_

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/testing/cluster.h"

namespace hetps {
namespace testing {

inline std::string WriteJob(const LocalCluster& c, const std::string& name,
                            const std::string& yaml) {
  const std::string path = c.dir() + "/" + name;
  std::ofstream(path) << yaml;
  return path;
}

// schedd, 2 psd and `workers` workerd; the trainers use one BLAS thread
// each (this machine has 2 cores for all of them).
inline void StartCluster(LocalCluster& c, int workers, const std::vector<std::string>& extra = {},
                         const std::vector<std::string>& schedd_flags = {},
                         const std::vector<std::string>& worker_flags = {}) {
  REQUIRE(c.StartSchedd(schedd_flags).ok());
  for (const char* id : {"psd-0", "psd-1"}) {
    std::vector<std::string> flags = {"--data_peer_forget_ms=1500"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    absl::Status s = c.StartNode("psd", id, flags);
    INFO(s.message());
    REQUIRE(s.ok());
  }
  for (int i = 0; i < workers; ++i) {
    std::vector<std::string> flags = {"--cpu_threads=1", "--report_every=10"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    flags.insert(flags.end(), worker_flags.begin(), worker_flags.end());
    absl::Status s = c.StartNode("workerd", "worker-" + std::to_string(i), flags);
    INFO(s.message());
    REQUIRE(s.ok());
  }
  REQUIRE(WaitFor([&] { return c.AliveCount() == 3 + workers; }, absl::Seconds(15)));
}

// schedd, psd-0, psd-1, worker-0 and worker-1, each node on its own
// loopback address (127.0.0.2-5), so schedd counts them as four hosts and
// the links between them count for its policy loop.
inline void StartHostsCluster(LocalCluster& c, const std::vector<std::string>& worker_flags = {}) {
  REQUIRE(c.StartSchedd().ok());
  int host = 2;
  for (const char* id : {"psd-0", "psd-1", "worker-0", "worker-1"}) {
    const bool psd = id[0] == 'p';
    std::vector<std::string> flags = {"--data_listen=127.0.0." + std::to_string(host++) + ":0"};
    if (!psd) flags.push_back("--cpu_threads=1");
    if (!psd) flags.insert(flags.end(), worker_flags.begin(), worker_flags.end());
    absl::Status s = c.StartNode(psd ? "psd" : "workerd", id, flags);
    INFO(s.message());
    REQUIRE(s.ok());
  }
  REQUIRE(WaitFor([&] { return c.AliveCount() == 5; }, absl::Seconds(15)));
}

inline const v1::NodeJobStatus* Node(const v1::JobStatus& j, const std::string& id) {
  for (const auto& n : j.nodes()) {
    if (n.node_id() == id) return &n;
  }
  return nullptr;
}

// The lines of a trace file; each must be one JSON object naming `ev`.
inline std::vector<std::string> TraceLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The unsigned value of `"key":` in a trace line (0 when absent).
inline uint64_t Field(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return 0;
  return std::strtoull(line.c_str() + at + key.size() + 3, nullptr, 10);
}

// Submits `job` (psctl job submit JOB EXTRA...) and waits for it to end;
// it must succeed. Its final status.
inline v1::JobStatus RunToEnd(LocalCluster& c, const std::string& job,
                              std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"job", "submit", job, "-o", "json"};
  args.insert(args.end(), extra.begin(), extra.end());
  ProcessResult sub = c.Psctl(args);
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  v1::JobStatus j;
  REQUIRE(c.WaitJobEnded(absl::Seconds(180), &j));
  INFO(j.message());
  REQUIRE(j.state() == v1::JOB_STATE_SUCCEEDED);
  return j;
}

}  // namespace testing
}  // namespace hetps

#endif  // HETPS_TESTS_JOB_HELPERS_H_
