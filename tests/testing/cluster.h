// LocalCluster: the real schedd/psd/workerd binaries on 127.0.0.1 with
// ephemeral ports, for cross-component tests. Each daemon writes a ready
// file; the cluster reads addresses from there. The destructor SIGKILLs
// whatever still runs. The control plane runs with mTLS: the cluster makes
// a development CA and a certificate per node id on first use
// (tools/dev-certs.sh), and talks to it as "admin". Not thread-safe.
#ifndef HETPS_TESTS_TESTING_CLUSTER_H_
#define HETPS_TESTS_TESTING_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/rpc/security.h"
#include "proto/hetps/v1/admin.grpc.pb.h"
#include "proto/hetps/v1/scheduler.grpc.pb.h"
#include "tests/testing/process.h"

namespace hetps {
namespace testing {

struct DaemonHandle {
  Process process;
  std::string control_address;
  std::string metrics_address;
};

// A job that succeeded, failed or was cancelled.
bool JobEnded(const v1::JobStatus& job);

class LocalCluster {
 public:
  explicit LocalCluster(std::string name, int heartbeat_interval_ms = 300);

  absl::Status StartSchedd(const std::vector<std::string>& extra_flags = {});
  // Starts schedd again (after Kill and WaitExit) at the address it had,
  // with the flags it had.
  absl::Status RestartSchedd();
  // TLS flags for a daemon that runs as `node_id` (its certificate is made
  // on first use).
  std::vector<std::string> TlsFlags(const std::string& node_id);
  // psctl's connection flags: the admin certificate.
  std::vector<std::string> PsctlFlags() const;
  // The material of `name` (a node or admin certificate, made on first use).
  absl::StatusOr<TlsMaterial> Identity(const std::string& name, bool admin);
  // daemon is "psd" or "workerd"; node_id is also the handle's key.
  absl::Status StartNode(const std::string& daemon, const std::string& node_id,
                         std::vector<std::string> extra_flags = {});
  void Kill(const std::string& node_id, int sig);
  // Waits for the node's process to exit; returns its exit code.
  int WaitExit(const std::string& node_id, absl::Duration timeout);

  DaemonHandle& node(const std::string& node_id) { return nodes_.at(node_id); }
  const std::string& schedd_address() const { return schedd_address_; }
  const std::string& dir() const { return dir_; }
  int heartbeat_interval_ms() const { return heartbeat_interval_ms_; }
  // A stub calling schedd as "admin", or as another identity.
  std::unique_ptr<v1::Scheduler::Stub> SchedulerStub() const;
  std::unique_ptr<v1::Scheduler::Stub> SchedulerStubAs(const std::string& name, bool admin);
  const std::string& certs_dir() const { return certs_; }
  // Live nodes according to schedd (ListNodes), or -1 on RPC failure.
  int AliveCount() const;
  // psctl as "admin" against schedd, or against `endpoint`.
  ProcessResult Psctl(std::vector<std::string> args, const std::string& endpoint = "") const;
  // The newest job as schedd reports it (empty on RPC failure).
  v1::JobStatus Job() const;
  // Polls the newest job until it ends; *job is its last status.
  bool WaitJobEnded(absl::Duration timeout, v1::JobStatus* job) const;

 private:
  absl::Status Launch(const std::string& daemon, const std::string& node_id,
                      std::vector<std::string> extra);

  absl::Status EnsureCert(const std::string& name, bool admin);

  std::string dir_;
  std::string certs_;
  TlsMaterial admin_;
  int heartbeat_interval_ms_;
  std::string schedd_address_;
  std::vector<std::string> schedd_flags_;  // StartSchedd's, for RestartSchedd
  std::map<std::string, DaemonHandle> nodes_;
};

}  // namespace testing
}  // namespace hetps

#endif  // HETPS_TESTS_TESTING_CLUSTER_H_
