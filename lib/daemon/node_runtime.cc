#include "lib/daemon/node_runtime.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "lib/base/json_writer.h"
#include "lib/base/net_address.h"
#include "lib/base/status_macros.h"
#include "lib/base/version.h"
#include "lib/daemon/capabilities.h"
#include "lib/rpc/membership_proto.h"

namespace hetps {

class NodeRuntime::AdminService final : public v1::Admin::Service {
 public:
  explicit AdminService(NodeRuntime* rt) : rt_(rt) {}

  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest*,
                         v1::GetStatusResponse* resp) override {
    if (grpc::Status a = rt_->authorizer_->RequireAny(ctx, "Admin.GetStatus"); !a.ok()) return a;
    resp->set_node_id(rt_->node_id_);
    resp->set_role(RoleToProto(rt_->role_));
    resp->set_version(kVersion);
    resp->set_serving_state(static_cast<v1::ServingState>(rt_->serving_state_.load()));
    resp->set_start_unix_ms(absl::ToUnixMillis(rt_->start_time_));
    resp->set_control_address(rt_->control_address_);
    resp->set_metrics_address(rt_->metrics_address());
    CapabilitiesToProto(rt_->capabilities_, resp->mutable_capabilities());
    if (rt_->status_hook_) rt_->status_hook_(resp);
    return grpc::Status::OK;
  }

  grpc::Status Drain(grpc::ServerContext* ctx, const v1::DrainRequest* req,
                     v1::DrainResponse* resp) override {
    if (grpc::Status a = rt_->authorizer_->RequireAdmin(ctx, "Admin.Drain"); !a.ok()) return a;
    if (!req->force() && rt_->drain_guard_) {
      const std::string harm = rt_->drain_guard_();
      if (!harm.empty()) {
        rt_->logger_.Warn("drain refused",
                          {{"by", rt_->authorizer_->Identify(ctx).name}, {"reason", harm}});
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat(harm, "; drain with --force to do it anyway"));
      }
    }
    rt_->logger_.Info("drain requested",
                      {{"via", "admin rpc"}, {"by", rt_->authorizer_->Identify(ctx).name}});
    if (!rt_->drain_requested_.HasBeenNotified()) rt_->drain_requested_.Notify();
    resp->set_accepted(true);
    return grpc::Status::OK;
  }

  grpc::Status GetConfig(grpc::ServerContext* ctx, const v1::GetConfigRequest*,
                         v1::GetConfigResponse* resp) override {
    if (grpc::Status a = rt_->authorizer_->RequireAny(ctx, "Admin.GetConfig"); !a.ok()) return a;
    resp->set_config_file(rt_->env_.config_path);
    for (const ConfigSchema::Entry& e : rt_->env_.config_entries) {
      v1::ConfigEntry* out = resp->add_entries();
      out->set_key(e.key);
      out->set_value(e.value);
      out->set_source(ConfigSourceName(e.source));
    }
    return grpc::Status::OK;
  }

 private:
  NodeRuntime* rt_;
};

NodeRuntime::NodeRuntime(std::string daemon_name, NodeRole role, CommonConfig config, DaemonEnv env)
    : daemon_name_(std::move(daemon_name)),
      role_(role),
      config_(std::move(config)),
      env_(std::move(env)),
      start_time_(absl::Now()),
      registry_(std::make_shared<prometheus::Registry>()) {}

NodeRuntime::~NodeRuntime() { StopControl(); }

absl::StatusOr<std::unique_ptr<NodeRuntime>> NodeRuntime::Create(const std::string& daemon_name,
                                                                 NodeRole role,
                                                                 const CommonConfig& config,
                                                                 const DaemonEnv& env) {
  std::unique_ptr<NodeRuntime> rt(new NodeRuntime(daemon_name, role, config, env));
  rt->node_id_ = config.node_id;
  rt->logger_ = Logger(env.log_sink, config.node_id, daemon_name);
  RegisterProcessMetrics(*rt->registry_, daemon_name, kVersion);
  ASSIGN_OR_RETURN(rt->metrics_,
                   MetricsServer::Create(config.metrics_listen, "metrics_listen", rt->registry_));
  rt->capabilities_ = LocalCapabilities(&rt->gpu_note_);
  ASSIGN_OR_RETURN(rt->tls_, LoadTls(config.tls));
  if (!rt->tls_.insecure) {
    if (rt->tls_.role != Role::kNode) {
      return absl::InvalidArgumentError(
          absl::StrCat("tls_cert '", config.tls.tls_cert, "' is an ", RoleName(rt->tls_.role),
                       " certificate (OU=", RoleName(rt->tls_.role), "); a daemon needs OU=node"));
    }
    if (rt->node_id_.empty()) rt->node_id_ = rt->tls_.name;
    if (rt->node_id_ != rt->tls_.name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node_id '", rt->node_id_, "' is not the CN of tls_cert '", config.tls.tls_cert, "' ('",
          rt->tls_.name, "'): a node may act only as the identity its certificate names"));
    }
    rt->logger_ = rt->logger_.WithNodeId(rt->node_id_);
  }
  rt->authorizer_ = std::make_unique<Authorizer>(rt->tls_, rt->registry_.get(), daemon_name);
  return rt;
}

absl::Status NodeRuntime::StartControl(const std::vector<grpc::Service*>& services, StatusHook hook,
                                       DrainGuard drain_guard) {
  status_hook_ = std::move(hook);
  drain_guard_ = std::move(drain_guard);
  admin_ = std::make_unique<AdminService>(this);
  std::vector<grpc::Service*> all = services;
  all.push_back(admin_.get());
  ASSIGN_OR_RETURN(StartedGrpcServer started,
                   StartGrpcServer(config_.listen, "listen", all, ServerCredentials(tls_)));
  server_ = std::move(started.server);
  ASSIGN_OR_RETURN(HostPort listen, ParseHostPort(config_.listen));
  HostPort advertised{listen.host, static_cast<uint16_t>(started.port)};
  if (listen.IsWildcard()) {
    advertised.host =
        config_.advertise_host.empty() ? capabilities_.hostname : config_.advertise_host;
  }
  control_address_ = advertised.ToString();
  if (node_id_.empty()) {
    node_id_ = role_ == NodeRole::kScheduler
                   ? "schedd"
                   : absl::StrCat(daemon_name_, "-", capabilities_.hostname, "-", started.port);
  }
  logger_ = logger_.WithNodeId(node_id_);
  return absl::OkStatus();
}

absl::Status NodeRuntime::MarkServing() {
  serving_state_ = v1::SERVING_STATE_SERVING;
  logger_.Info("serving", {{"control", control_address_},
                           {"metrics", metrics_address()},
                           {"version", kVersion},
                           {"cpu_cores", capabilities_.cpu_cores},
                           {"gpus", static_cast<unsigned>(capabilities_.gpus.size())}});
  if (capabilities_.gpus.empty()) logger_.Info("no gpu", {{"reason", gpu_note_}});
  if (tls_.insecure) {
    logger_.Warn("insecure control plane",
                 {{"detail",
                   "insecure: true: no TLS and no authentication; anyone who reaches the control "
                   "port can register, submit, cancel and drain"}});
  } else {
    logger_.Info("control plane tls", {{"identity", tls_.name}, {"role", RoleName(tls_.role)}});
  }
  if (config_.ready_file.empty()) return absl::OkStatus();
  JsonWriter w;
  w.BeginObject()
      .Key("node_id")
      .String(node_id_)
      .Key("daemon")
      .String(daemon_name_)
      .Key("control_address")
      .String(control_address_)
      .Key("metrics_address")
      .String(metrics_address())
      .Key("pid")
      .Int(getpid())
      .EndObject();
  // Write then rename, so a reader never sees a partial file.
  std::string tmp = config_.ready_file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << w.str() << "\n";
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ready_file '", tmp, "'"));
  }
  if (std::rename(tmp.c_str(), config_.ready_file.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ready_file to '", config_.ready_file, "'"));
  }
  return absl::OkStatus();
}

void NodeRuntime::Fatal(absl::Status why) {
  {
    absl::MutexLock lock(&fatal_mu_);
    if (!fatal_.ok()) return;
    fatal_ = std::move(why);
  }
  if (!drain_requested_.HasBeenNotified()) drain_requested_.Notify();
}

absl::Status NodeRuntime::fatal() const {
  absl::MutexLock lock(&fatal_mu_);
  return fatal_;
}

void NodeRuntime::StopControl() {
  serving_state_ = v1::SERVING_STATE_DRAINING;
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(config_.shutdown_grace_ms));
    server_->Wait();
    server_.reset();
  }
}

}  // namespace hetps
