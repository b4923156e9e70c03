#include "tests/testing/cluster.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "lib/rpc/grpc_util.h"

namespace hetps {
namespace testing {

LocalCluster::LocalCluster(std::string name, int heartbeat_interval_ms)
    : dir_(TempDir(name)), certs_(dir_ + "/certs"), heartbeat_interval_ms_(heartbeat_interval_ms) {
  absl::StatusOr<TlsMaterial> admin = Identity("admin", true);
  if (admin.ok()) admin_ = *admin;
}

absl::Status LocalCluster::EnsureCert(const std::string& name, bool admin) {
  if (access(absl::StrCat(certs_, "/", name, ".pem").c_str(), R_OK) == 0) return absl::OkStatus();
  ProcessResult r = RunCommand({"/bin/bash", Runfile("tools/dev-certs.sh"), certs_, "--nodes",
                                admin ? "" : name, "--admins", admin ? name : ""});
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("dev-certs.sh failed: ", r.stderr_text));
  }
  return absl::OkStatus();
}

absl::StatusOr<TlsMaterial> LocalCluster::Identity(const std::string& name, bool admin) {
  absl::Status s = EnsureCert(name, admin);
  if (!s.ok()) return s;
  TlsConfig t;
  t.tls_ca = certs_ + "/ca.pem";
  t.tls_cert = absl::StrCat(certs_, "/", name, ".pem");
  t.tls_key = absl::StrCat(certs_, "/", name, ".key");
  return LoadTls(t);
}

std::vector<std::string> LocalCluster::TlsFlags(const std::string& node_id) {
  absl::Status s = EnsureCert(node_id, false);
  (void)s;  // a missing certificate shows as the daemon's own start-up error
  return {"--tls_ca=" + certs_ + "/ca.pem",
          absl::StrCat("--tls_cert=", certs_, "/", node_id, ".pem"),
          absl::StrCat("--tls_key=", certs_, "/", node_id, ".key"),
          "--admin_tokens_file=" + certs_ + "/admin-tokens"};
}

std::vector<std::string> LocalCluster::PsctlFlags() const {
  return {"--tls-ca=" + certs_ + "/ca.pem", "--tls-cert=" + certs_ + "/admin.pem",
          "--tls-key=" + certs_ + "/admin.key"};
}

absl::Status LocalCluster::Launch(const std::string& daemon, const std::string& node_id,
                                  std::vector<std::string> extra) {
  std::string ready = absl::StrCat(dir_, "/", node_id, ".ready");
  unlink(ready.c_str());
  std::vector<std::string> argv = {Runfile(absl::StrCat("daemons/", daemon, "/", daemon)),
                                   "--node_id=" + node_id,
                                   "--listen=127.0.0.1:0",
                                   "--metrics_listen=127.0.0.1:0",
                                   "--ready_file=" + ready,
                                   "--log_level=debug"};
  for (std::string& f : TlsFlags(node_id)) argv.push_back(std::move(f));
  argv.insert(argv.end(), extra.begin(), extra.end());
  absl::StatusOr<Process> p = Process::Start(argv, dir_, node_id);
  if (!p.ok()) return p.status();
  DaemonHandle& h = nodes_[node_id];
  h.process = std::move(*p);
  if (!WaitFor(
          [&] {
            return access(ready.c_str(), R_OK) == 0 || !h.process.running() ||
                   h.process.Wait(absl::ZeroDuration()) >= 0;
          },
          absl::Seconds(20)) ||
      access(ready.c_str(), R_OK) != 0) {
    return absl::UnavailableError(
        absl::StrCat(node_id, " did not become ready; stderr:\n", h.process.Stderr()));
  }
  std::string json = ReadFile(ready);
  h.control_address = JsonField(json, "control_address");
  h.metrics_address = JsonField(json, "metrics_address");
  return absl::OkStatus();
}

absl::Status LocalCluster::StartSchedd(const std::vector<std::string>& extra_flags) {
  // A loopback cluster: 3 silent intervals is death here, as the tests
  // that kill nodes expect (the default, 10, is for WAN links).
  schedd_flags_ = {absl::StrCat("--heartbeat_interval_ms=", heartbeat_interval_ms_),
                   "--dead_after_missed_heartbeats=3"};
  schedd_flags_.insert(schedd_flags_.end(), extra_flags.begin(), extra_flags.end());
  absl::Status s = Launch("schedd", "schedd", schedd_flags_);
  if (s.ok()) schedd_address_ = nodes_["schedd"].control_address;
  return s;
}

absl::Status LocalCluster::RestartSchedd() {
  std::vector<std::string> flags = schedd_flags_;
  flags.push_back("--listen=" + schedd_address_);  // the nodes know this address
  return Launch("schedd", "schedd", flags);
}

absl::Status LocalCluster::StartNode(const std::string& daemon, const std::string& node_id,
                                     std::vector<std::string> extra_flags) {
  std::vector<std::string> flags = {"--scheduler=" + schedd_address_, "--rpc_timeout_ms=1000"};
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  return Launch(daemon, node_id, flags);
}

void LocalCluster::Kill(const std::string& node_id, int sig) {
  nodes_.at(node_id).process.Signal(sig);
}

int LocalCluster::WaitExit(const std::string& node_id, absl::Duration timeout) {
  return nodes_.at(node_id).process.Wait(timeout);
}

std::unique_ptr<v1::Scheduler::Stub> LocalCluster::SchedulerStub() const {
  return v1::Scheduler::NewStub(MakeSecureChannel(schedd_address_, admin_));
}

std::unique_ptr<v1::Scheduler::Stub> LocalCluster::SchedulerStubAs(const std::string& name,
                                                                   bool admin) {
  absl::StatusOr<TlsMaterial> m = Identity(name, admin);
  if (!m.ok()) return nullptr;
  return v1::Scheduler::NewStub(MakeSecureChannel(schedd_address_, *m));
}

int LocalCluster::AliveCount() const {
  auto stub = SchedulerStub();
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(2));
  v1::ListNodesResponse resp;
  if (!stub->ListNodes(&ctx, v1::ListNodesRequest(), &resp).ok()) return -1;
  return resp.nodes_size();
}

bool JobEnded(const v1::JobStatus& j) {
  return j.state() == v1::JOB_STATE_SUCCEEDED || j.state() == v1::JOB_STATE_FAILED ||
         j.state() == v1::JOB_STATE_CANCELLED;
}

ProcessResult LocalCluster::Psctl(std::vector<std::string> args,
                                  const std::string& endpoint) const {
  std::vector<std::string> argv = {Runfile("clients/psctl/psctl"),
                                   "--endpoint=" + (endpoint.empty() ? schedd_address_ : endpoint)};
  for (std::string& f : PsctlFlags()) argv.push_back(std::move(f));
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

v1::JobStatus LocalCluster::Job() const {
  auto stub = SchedulerStub();
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(2));
  v1::GetJobResponse resp;
  grpc::Status s = stub->GetJob(&ctx, v1::GetJobRequest(), &resp);
  return s.ok() ? resp.job() : v1::JobStatus();
}

bool LocalCluster::WaitJobEnded(absl::Duration timeout, v1::JobStatus* job) const {
  return WaitFor(
      [&] {
        *job = Job();
        return JobEnded(*job);
      },
      timeout);
}

}  // namespace testing
}  // namespace hetps
