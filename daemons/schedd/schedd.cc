#include "daemons/schedd/schedd.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/base/net_address.h"
#include "lib/base/status_macros.h"
#include "lib/base/version.h"
#include "lib/job/job_spec.h"
#include "lib/rpc/grpc_util.h"
#include "lib/rpc/membership_proto.h"
#include "lib/train/model.h"
#include "proto/hetps/v1/scheduler.grpc.pb.h"

namespace hetps {

void DeclareScheddConfig(ConfigSchema* schema, ScheddConfig* c) {
  DeclareCommonConfig(schema, &c->common);
  schema->Int("heartbeat_interval_ms", &c->heartbeat_interval_ms,
              "Interval nodes heartbeat at (schedd tells them at registration).", 10, 60000);
  schema->Int("dead_after_missed_heartbeats", &c->dead_after_missed_heartbeats,
              "A node silent for this many intervals is marked dead.", 1, 1000);
  schema->Int("watch_queue_max", &c->watch_queue_max,
              "Events buffered per membership watcher before it is closed as too slow.", 1,
              1 << 20);
  schema->Int("nodes_max", &c->nodes_max, "Bound on the membership table.", 1, 1 << 20);
  schema->String("state_dir", &c->state_dir,
                 "Directory of schedd's state store (RocksDB: jobs, counters), created if "
                 "missing; a restarted schedd carries on from it. Empty: in memory only (a "
                 "restart forgets every job).");
  schema->Int("readopt_grace_ms", &c->readopt_grace_ms,
              "After a restart: how long the active job's members have to come back before "
              "they count as lost.",
              100, 3'600'000);
}

// Prometheus metrics of schedd. Families live in the runtime's registry.
class Schedd::Metrics {
 public:
  explicit Metrics(prometheus::Registry& r)
      : rpcs_(prometheus::BuildCounter()
                  .Name("schedd_rpc_requests_total")
                  .Help("Scheduler RPCs handled, by method and gRPC status code.")
                  .Register(r)),
        nodes_(prometheus::BuildGauge()
                   .Name("schedd_nodes")
                   .Help("Known nodes by role and membership state.")
                   .Register(r)),
        deaths_(prometheus::BuildCounter()
                    .Name("schedd_node_deaths_total")
                    .Help("Nodes declared dead after missing heartbeats.")
                    .Register(r)
                    .Add({})),
        version_(prometheus::BuildGauge()
                     .Name("schedd_membership_version")
                     .Help("Membership version; bumps on every join, death or leave.")
                     .Register(r)
                     .Add({})),
        watchers_(prometheus::BuildGauge()
                      .Name("schedd_watchers")
                      .Help("Open WatchMembership streams.")
                      .Register(r)
                      .Add({})),
        jobs_(prometheus::BuildGauge()
                  .Name("schedd_jobs")
                  .Help("Jobs in schedd's history (the last 16) by state.")
                  .Register(r)),
        watch_overflows_(prometheus::BuildCounter()
                             .Name("schedd_watch_overflows_total")
                             .Help("Watch streams closed because the watcher fell behind.")
                             .Register(r)
                             .Add({})),
        link_rate_(prometheus::BuildGauge()
                       .Name("schedd_link_bytes_per_second")
                       .Help("Newest reported throughput of each directed link between nodes.")
                       .Register(r)),
        link_age_(prometheus::BuildGauge()
                      .Name("schedd_link_age_seconds")
                      .Help("Time since each link's newest report.")
                      .Register(r)),
        plan_version_(prometheus::BuildGauge()
                          .Name("schedd_plan_version")
                          .Help("Version of the plan in force for the active adaptive job "
                                "(0: none; 1: the even split).")
                          .Register(r)
                          .Add({})),
        plans_issued_(prometheus::BuildCounter()
                          .Name("schedd_plans_issued_total")
                          .Help("Plans issued by the policy loop.")
                          .Register(r)
                          .Add({})),
        plan_settle_(prometheus::BuildGauge()
                         .Name("schedd_plan_settle_seconds")
                         .Help("Seconds from issuing the plan in force until every psd closed "
                               "its first round (0: not yet, or version 1).")
                         .Register(r)
                         .Add({})),
        plan_changed_(prometheus::BuildGauge()
                          .Name("schedd_plan_changed_ratio")
                          .Help("Fraction of chunks the plan in force moved.")
                          .Register(r)
                          .Add({})),
        plan_chunks_(prometheus::BuildGauge()
                         .Name("schedd_plan_server_chunks")
                         .Help("Chunks each psd owns in the plan in force.")
                         .Register(r)),
        plan_rate_(prometheus::BuildGauge()
                       .Name("schedd_plan_server_bytes_per_second")
                       .Help("Host throughput of each psd the plan in force was made from.")
                       .Register(r)) {}

  void Rpc(const char* method, grpc::StatusCode code) {
    rpcs_.Add({{"method", method}, {"code", CodeName(code)}}).Increment();
  }

  void Refresh(const Membership& m) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (NodeRole role : {NodeRole::kScheduler, NodeRole::kServer, NodeRole::kWorker}) {
      for (NodeState state : {NodeState::kAlive, NodeState::kDead, NodeState::kLeft}) {
        counts[{NodeRoleName(role), NodeStateName(state)}] = 0;
      }
    }
    for (const NodeRecord& n : m.List(true)) {
      ++counts[{NodeRoleName(n.role), NodeStateName(n.state)}];
    }
    for (const auto& [key, n] : counts) {
      nodes_.Add({{"role", key.first}, {"state", key.second}}).Set(n);
    }
    version_.Set(static_cast<double>(m.version()));
  }

  void RefreshJobs(const JobTable& t) {
    for (const auto& [state, n] : t.StateCounts()) {
      std::string name = v1::JobState_Name(state);
      name = absl::AsciiStrToLower(name.substr(std::string("JOB_STATE_").size()));
      jobs_.Add({{"state", name}}).Set(n);
    }
  }

  // Links and the active job's plan. Series of links and servers gone
  // are removed, so the families hold what the tables hold.
  // settled_ms: JobTable::PlanSettledMs of the loop's plan in force.
  void RefreshPolicy(const LinkTable& links, const PolicyLoop& loop, bool active, int64_t now_ms,
                     int64_t settled_ms) {
    std::set<std::pair<std::string, std::string>> seen;
    for (const v1::LinkReport& l : links.All()) {
      const auto key = std::make_pair(l.from_node_id(), l.to_node_id());
      seen.insert(key);
      const prometheus::Labels labels = {{"from", key.first}, {"to", key.second}};
      link_rate_.Add(labels).Set(l.throughput_bytes_per_second());
      link_age_.Add(labels).Set(std::max<int64_t>(0, now_ms - l.measured_unix_ms()) / 1e3);
    }
    for (const auto& key : links_shown_) {
      if (seen.count(key) > 0) continue;
      const prometheus::Labels labels = {{"from", key.first}, {"to", key.second}};
      link_rate_.Remove(&link_rate_.Add(labels));
      link_age_.Remove(&link_age_.Add(labels));
    }
    links_shown_ = std::move(seen);
    const v1::Policy& p = loop.current();
    std::set<std::string> servers;
    if (active) {
      for (size_t i = 0; i < loop.servers().size(); ++i) {
        const std::string& id = loop.servers()[i];
        servers.insert(id);
        if (int(i) < p.server_chunks_size()) {
          plan_chunks_.Add({{"server", id}}).Set(double(p.server_chunks(int(i))));
        }
        if (int(i) < p.server_throughput_bytes_per_second_size()) {
          plan_rate_.Add({{"server", id}}).Set(p.server_throughput_bytes_per_second(int(i)));
        }
      }
    }
    for (const std::string& id : servers_shown_) {
      if (servers.count(id) > 0) continue;
      plan_chunks_.Remove(&plan_chunks_.Add({{"server", id}}));
      plan_rate_.Remove(&plan_rate_.Add({{"server", id}}));
    }
    servers_shown_ = std::move(servers);
    plan_version_.Set(active ? double(p.version()) : 0);
    plan_changed_.Set(active ? p.changed_fraction() : 0);
    plan_settle_.Set(active && settled_ms > 0 && p.version() > 1
                         ? std::max<int64_t>(0, settled_ms - p.issued_unix_ms()) / 1e3
                         : 0);
  }

  prometheus::Counter& plans_issued() { return plans_issued_; }
  prometheus::Counter& deaths() { return deaths_; }
  prometheus::Gauge& watchers() { return watchers_; }
  prometheus::Counter& watch_overflows() { return watch_overflows_; }

 private:
  static const char* CodeName(grpc::StatusCode code) {
    switch (code) {
      case grpc::StatusCode::OK:
        return "OK";
      case grpc::StatusCode::INVALID_ARGUMENT:
        return "INVALID_ARGUMENT";
      case grpc::StatusCode::NOT_FOUND:
        return "NOT_FOUND";
      case grpc::StatusCode::FAILED_PRECONDITION:
        return "FAILED_PRECONDITION";
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
        return "RESOURCE_EXHAUSTED";
      case grpc::StatusCode::UNIMPLEMENTED:
        return "UNIMPLEMENTED";
      case grpc::StatusCode::CANCELLED:
        return "CANCELLED";
      case grpc::StatusCode::UNAVAILABLE:
        return "UNAVAILABLE";
      default:
        return "OTHER";
    }
  }

  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Gauge>& nodes_;
  prometheus::Counter& deaths_;
  prometheus::Gauge& version_;
  prometheus::Gauge& watchers_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Counter& watch_overflows_;
  prometheus::Family<prometheus::Gauge>& link_rate_;
  prometheus::Family<prometheus::Gauge>& link_age_;
  prometheus::Gauge& plan_version_;
  prometheus::Counter& plans_issued_;
  prometheus::Gauge& plan_settle_;
  prometheus::Gauge& plan_changed_;
  prometheus::Family<prometheus::Gauge>& plan_chunks_;
  prometheus::Family<prometheus::Gauge>& plan_rate_;
  std::set<std::pair<std::string, std::string>> links_shown_;
  std::set<std::string> servers_shown_;
};

class Schedd::Service final : public v1::Scheduler::Service {
 public:
  static constexpr size_t kSpecBytesMax = 64 << 10;
  static constexpr int kLinksPerReportMax = 4096;

  Service(Schedd* schedd) : s_(schedd), log_(schedd->runtime_->logger().WithComponent("rpc")) {}

  // Set on shutdown so open watch streams end promptly.
  void Stop() { stopping_.store(true); }

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override {
    grpc::Status st = authz().RequireNode(ctx, req->node_id(), "Register");
    if (st.ok()) st = DoRegister(ctx, req, resp);
    s_->metrics_->Rpc("Register", st.error_code());
    if (!st.ok()) {
      log_.Warn(
          "register rejected",
          {{"peer", ctx->peer()}, {"node_id", req->node_id()}, {"error", st.error_message()}});
    }
    return st;
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    if (grpc::Status a = authz().RequireNode(ctx, req->node_id(), "Heartbeat"); !a.ok()) {
      s_->metrics_->Rpc("Heartbeat", a.error_code());
      return a;
    }
    absl::Status s = s_->membership_->Heartbeat(req->node_id(), req->incarnation());
    grpc::Status st = ToGrpcStatus(s);
    s_->metrics_->Rpc("Heartbeat", st.error_code());
    if (s.ok()) {
      resp->set_membership_version(s_->membership_->version());
      // The node as membership has it (its data address for a re-adoption).
      absl::optional<NodeRecord> node = s_->membership_->Get(req->node_id());
      if (node.has_value()) {
        s_->jobs_->OnHeartbeat(*node, req->has_job() ? &req->job() : nullptr, resp);
      }
    }
    return st;
  }

  grpc::Status Deregister(grpc::ServerContext* ctx, const v1::DeregisterRequest* req,
                          v1::DeregisterResponse*) override {
    grpc::Status st = authz().RequireNode(ctx, req->node_id(), "Deregister");
    if (st.ok()) {
      st = ToGrpcStatus(s_->membership_->Deregister(req->node_id(), req->incarnation()));
    }
    s_->metrics_->Rpc("Deregister", st.error_code());
    return st;
  }

  grpc::Status ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest* req,
                         v1::ListNodesResponse* resp) override {
    if (grpc::Status a = authz().RequireAny(ctx, "ListNodes"); !a.ok()) {
      s_->metrics_->Rpc("ListNodes", a.error_code());
      return a;
    }
    for (const NodeRecord& n : s_->membership_->List(req->include_departed())) {
      NodeToProto(n, resp->add_nodes());
    }
    resp->set_membership_version(s_->membership_->version());
    resp->set_heartbeat_interval_ms(static_cast<uint32_t>(s_->config_.heartbeat_interval_ms));
    s_->metrics_->Rpc("ListNodes", grpc::StatusCode::OK);
    return grpc::Status::OK;
  }

  grpc::Status WatchMembership(grpc::ServerContext* ctx, const v1::WatchMembershipRequest*,
                               grpc::ServerWriter<v1::MembershipEvent>* writer) override {
    if (grpc::Status a = authz().RequireAny(ctx, "WatchMembership"); !a.ok()) {
      s_->metrics_->Rpc("WatchMembership", a.error_code());
      return a;
    }
    MembershipEvent snap;
    snap.kind = MembershipEventKind::kSnapshot;
    auto sub = s_->membership_->Watch(&snap.snapshot, &snap.version);
    s_->metrics_->watchers().Increment();
    grpc::Status result = Stream(ctx, writer, snap, sub.get());
    s_->membership_->Unwatch(sub);
    s_->metrics_->watchers().Decrement();
    s_->metrics_->Rpc("WatchMembership", result.error_code());
    return result;
  }

  grpc::Status ReportLinks(grpc::ServerContext* ctx, const v1::ReportLinksRequest* req,
                           v1::ReportLinksResponse*) override {
    if (grpc::Status a = authz().RequireNode(ctx, req->node_id(), "ReportLinks"); !a.ok()) {
      s_->metrics_->Rpc("ReportLinks", a.error_code());
      return a;
    }
    absl::optional<NodeRecord> node = s_->membership_->Get(req->node_id());
    if (!node.has_value() || node->state != NodeState::kAlive) {
      s_->metrics_->Rpc("ReportLinks", grpc::StatusCode::NOT_FOUND);
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("node ", req->node_id(), " is not registered and alive"));
    }
    if (req->links_size() > kLinksPerReportMax) {
      s_->metrics_->Rpc("ReportLinks", grpc::StatusCode::INVALID_ARGUMENT);
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat(req->links_size(), " links in one report; at most ", kLinksPerReportMax));
    }
    grpc::Status st;
    {
      absl::MutexLock lock(&s_->policy_mu_);
      const int64_t now = absl::ToUnixMillis(s_->clock_->Now());
      for (const v1::LinkReport& l : req->links()) {
        absl::Status s = s_->links_.Record(req->node_id(), l, now);
        if (!s.ok() && st.ok()) st = ToGrpcStatus(s);  // the others are kept
      }
      if (req->has_traffic()) {
        absl::Status s = s_->links_.RecordTraffic(req->node_id(), req->traffic(), now);
        if (!s.ok() && st.ok()) st = ToGrpcStatus(s);
      }
    }
    s_->metrics_->Rpc("ReportLinks", st.error_code());
    return st;
  }

  grpc::Status ListLinks(grpc::ServerContext* ctx, const v1::ListLinksRequest*,
                         v1::ListLinksResponse* resp) override {
    if (grpc::Status a = authz().RequireAny(ctx, "ListLinks"); !a.ok()) {
      s_->metrics_->Rpc("ListLinks", a.error_code());
      return a;
    }
    {
      absl::MutexLock lock(&s_->policy_mu_);
      for (v1::LinkReport& l : s_->links_.All()) *resp->add_links() = std::move(l);
    }
    resp->set_now_unix_ms(absl::ToUnixMillis(s_->clock_->Now()));
    s_->metrics_->Rpc("ListLinks", grpc::StatusCode::OK);
    return grpc::Status::OK;
  }

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    grpc::Status st = authz().RequireAdmin(ctx, "SubmitJob");
    if (st.ok() && req->spec_yaml().size() > kSpecBytesMax) {
      st = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("job spec is ", req->spec_yaml().size(),
                                     " bytes; the limit is ", kSpecBytesMax));
    } else if (st.ok()) {
      absl::StatusOr<v1::JobStatus> job = s_->jobs_->Submit(*req, s_->membership_->List(false));
      if (job.ok()) *resp->mutable_job() = std::move(*job);
      st = ToGrpcStatus(job.status());
    }
    s_->metrics_->Rpc("SubmitJob", st.error_code());
    if (!st.ok())
      log_.Warn("job rejected", {{"origin", req->origin()}, {"error", st.error_message()}});
    return st;
  }

  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::GetJobResponse* resp) override {
    if (grpc::Status a = authz().RequireAny(ctx, "GetJob"); !a.ok()) {
      s_->metrics_->Rpc("GetJob", a.error_code());
      return a;
    }
    absl::StatusOr<v1::JobStatus> job = s_->jobs_->Get(req->job_id());
    if (job.ok()) *resp->mutable_job() = std::move(*job);
    grpc::Status st = ToGrpcStatus(job.status());
    s_->metrics_->Rpc("GetJob", st.error_code());
    return st;
  }

  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::CancelJobResponse* resp) override {
    if (grpc::Status a = authz().RequireAdmin(ctx, "CancelJob"); !a.ok()) {
      s_->metrics_->Rpc("CancelJob", a.error_code());
      return a;
    }
    absl::StatusOr<v1::JobStatus> job = s_->jobs_->Cancel(req->job_id());
    if (job.ok()) *resp->mutable_job() = std::move(*job);
    grpc::Status st = ToGrpcStatus(job.status());
    s_->metrics_->Rpc("CancelJob", st.error_code());
    return st;
  }

  grpc::Status GetPolicy(grpc::ServerContext* ctx, const v1::GetPolicyRequest*,
                         v1::GetPolicyResponse* resp) override {
    if (grpc::Status a = authz().RequireAny(ctx, "GetPolicy"); !a.ok()) {
      s_->metrics_->Rpc("GetPolicy", a.error_code());
      return a;
    }
    absl::MutexLock lock(&s_->policy_mu_);
    if (s_->policy_.job_id().empty()) {
      s_->metrics_->Rpc("GetPolicy", grpc::StatusCode::NOT_FOUND);
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          "no adaptive job (load_policy or batch_policy: wlbs) has run since schedd started");
    }
    *resp->mutable_policy() = s_->policy_.current();
    for (const v1::Policy& p : s_->policy_.history()) *resp->add_history() = p;
    resp->set_last_decision(s_->policy_.last_decision());
    for (const v1::PolicyDecision& d : s_->policy_.decisions()) *resp->add_decisions() = d;
    if (s_->policy_.current().version() > 1) resp->set_settled_unix_ms(s_->PlanSettledMs());
    s_->metrics_->Rpc("GetPolicy", grpc::StatusCode::OK);
    return grpc::Status::OK;
  }

 private:
  const Authorizer& authz() const { return s_->runtime_->authorizer(); }

  grpc::Status DoRegister(grpc::ServerContext*, const v1::RegisterRequest* req,
                          v1::RegisterResponse* resp) {
    NodeRole role = RoleFromProto(req->role());
    if (role == NodeRole::kScheduler) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "a scheduler cannot register with another scheduler");
    }
    if (req->control_address().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "control_address is empty");
    }
    for (const std::string* a :
         {&req->control_address(), &req->data_address(), &req->metrics_address()}) {
      if (a->empty()) continue;
      absl::StatusOr<HostPort> hp = ParseHostPort(*a);
      if (!hp.ok()) return ToGrpcStatus(hp.status());
    }
    if (req->version().size() > 64) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "version is longer than 64 bytes");
    }
    NodeRecord n;
    n.node_id = req->node_id();
    n.role = role;
    n.control_address = req->control_address();
    n.data_address = req->data_address();
    n.metrics_address = req->metrics_address();
    n.version = req->version();
    n.capabilities = CapabilitiesFromProto(req->capabilities());
    absl::StatusOr<uint64_t> inc = s_->membership_->Register(std::move(n));
    if (!inc.ok()) return ToGrpcStatus(inc.status());
    resp->set_incarnation(*inc);
    resp->set_heartbeat_interval_ms(static_cast<uint32_t>(s_->config_.heartbeat_interval_ms));
    resp->set_membership_version(s_->membership_->version());
    return grpc::Status::OK;
  }

  grpc::Status Stream(grpc::ServerContext* ctx, grpc::ServerWriter<v1::MembershipEvent>* writer,
                      const MembershipEvent& snap, MembershipSubscription* sub) {
    v1::MembershipEvent out;
    EventToProto(snap, &out);
    if (!writer->Write(out)) return grpc::Status(grpc::StatusCode::CANCELLED, "watcher gone");
    while (!ctx->IsCancelled() && !stopping_.load()) {
      MembershipEvent e;
      switch (sub->Next(absl::Milliseconds(100), &e)) {
        case MembershipSubscription::Result::kEvent:
          out.Clear();
          EventToProto(e, &out);
          if (!writer->Write(out)) {
            return grpc::Status(grpc::StatusCode::CANCELLED, "watcher gone");
          }
          break;
        case MembershipSubscription::Result::kTimeout:
          break;
        case MembershipSubscription::Result::kClosed:
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "schedd is shutting down");
        case MembershipSubscription::Result::kOverflowed:
          s_->metrics_->watch_overflows().Increment();
          return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                              "watcher fell behind; watch again for a fresh snapshot");
      }
    }
    return stopping_.load() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "schedd is shutting down")
                            : grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
  }

  Schedd* const s_;
  const Logger log_;
  std::atomic<bool> stopping_{false};
};

Schedd::Schedd(const ScheddConfig& config, const Clock* clock) : config_(config), clock_(clock) {}

Schedd::~Schedd() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Schedd>> Schedd::Create(const ScheddConfig& config,
                                                       const DaemonEnv& env, const Clock* clock) {
  std::unique_ptr<Schedd> s(new Schedd(config, clock));
  ASSIGN_OR_RETURN(s->runtime_,
                   NodeRuntime::Create("schedd", NodeRole::kScheduler, config.common, env));
  Membership::Options opts;
  opts.heartbeat_interval = absl::Milliseconds(config.heartbeat_interval_ms);
  opts.dead_after_missed = static_cast<int>(config.dead_after_missed_heartbeats);
  opts.watch_queue_max = static_cast<size_t>(config.watch_queue_max);
  opts.nodes_max = static_cast<size_t>(config.nodes_max);
  s->jobs_ = std::make_unique<JobTable>(clock, s->runtime_->logger().WithComponent("jobs"));
  if (!config.state_dir.empty()) {
    ASSIGN_OR_RETURN(s->store_, ScheddStore::Open(config.state_dir));
    RETURN_IF_ERROR(
        s->jobs_->UseStore(s->store_.get(), absl::Milliseconds(config.readopt_grace_ms)));
    // Incarnations go on from where the previous run stopped: a node's new
    // one is always newer than any a stored job names.
    opts.first_incarnation = s->jobs_->next_incarnation();
    JobTable* jobs = s->jobs_.get();
    opts.on_incarnation = [jobs](uint64_t next) { jobs->SetNextIncarnation(next); };
  }
  s->membership_ = std::make_unique<Membership>(opts, clock);
  s->metrics_ = std::make_unique<Metrics>(s->runtime_->registry());
  return s;
}

absl::Status Schedd::Start() {
  service_ = std::make_unique<Service>(this);
  RETURN_IF_ERROR(runtime_->StartControl({service_.get()}, [this](v1::GetStatusResponse* r) {
    uint32_t dead = 0;
    auto& by_role = *r->mutable_alive_nodes_by_role();
    for (const NodeRecord& n : membership_->List(true)) {
      if (n.state == NodeState::kAlive) {
        ++by_role[NodeRoleName(n.role)];
      } else if (n.state == NodeState::kDead) {
        ++dead;
      }
    }
    r->set_dead_nodes(dead);
    r->set_membership_version(membership_->version());
  }));
  // schedd lists itself, so `psctl nodes` shows the whole cluster.
  NodeRecord self;
  self.node_id = runtime_->node_id();
  self.role = NodeRole::kScheduler;
  self.control_address = runtime_->control_address();
  self.metrics_address = runtime_->metrics_address();
  self.version = kVersion;
  self.capabilities = runtime_->capabilities();
  self.expires = false;
  RETURN_IF_ERROR(membership_->Register(self).status());
  metrics_->Refresh(*membership_);
  reaper_ = std::thread([this] { ReaperLoop(); });
  if (store_ == nullptr) {
    runtime_->logger().Warn("no state_dir: jobs are kept in memory only; a restart forgets them");
  }
  return runtime_->MarkServing();
}

void Schedd::ReaperLoop() {
  const Logger log = runtime_->logger().WithComponent("membership");
  const absl::Duration tick = std::clamp(absl::Milliseconds(config_.heartbeat_interval_ms) / 50,
                                         absl::Milliseconds(2), absl::Milliseconds(100));
  std::vector<NodeRecord> unused;
  uint64_t version;
  auto sub = membership_->Watch(&unused, &version);
  while (!stop_.WaitForNotificationWithTimeout(tick)) {
    int died = membership_->Expire();
    if (died > 0) metrics_->deaths().Increment(died);
    bool changed = false;
    MembershipEvent e;
    MembershipSubscription::Result r;
    while ((r = sub->Next(absl::ZeroDuration(), &e)) == MembershipSubscription::Result::kEvent) {
      changed = true;
      const NodeRecord& n = e.node;
      const char* what = e.kind == MembershipEventKind::kJoined ? "node joined"
                         : e.kind == MembershipEventKind::kDied ? "node died"
                                                                : "node left";
      jobs_->OnMembershipEvent(e.kind, n);
      LogLevel level = e.kind == MembershipEventKind::kDied ? LogLevel::kWarn : LogLevel::kInfo;
      log.Log(level, what,
              {{"node_id", n.node_id},
               {"role", NodeRoleName(n.role)},
               {"incarnation", static_cast<unsigned long long>(n.incarnation)},
               {"control", n.control_address},
               {"membership_version", static_cast<unsigned long long>(e.version)}});
    }
    if (r == MembershipSubscription::Result::kOverflowed) {
      log.Warn("membership log fell behind; resubscribing");
      sub = membership_->Watch(&unused, &version);
      jobs_->Reconcile(membership_->List(true));
      changed = true;
    }
    if (changed) metrics_->Refresh(*membership_);
    // The node list only when a recovery is due (it copies the table).
    jobs_->Tick(jobs_->RecoveryDue() ? membership_->List(false) : std::vector<NodeRecord>());
    RunPolicy();
    metrics_->RefreshJobs(*jobs_);
  }
  membership_->Unwatch(sub);
}

void Schedd::RunPolicy() {
  std::optional<v1::JobAssignment> a = jobs_->Running();
  absl::MutexLock lock(&policy_mu_);
  if (a.has_value() && spec_for_ != a->job_id()) {
    // Once per job, not on every tick: the spec and its chunk count.
    spec_for_ = a->job_id();
    spec_ = ParseJobSpec(a->spec_yaml(), a->job_id());
    absl::StatusOr<train::ModelSpec> model =
        spec_.ok() ? train::BuiltinModel(spec_->model) : spec_.status();
    absl::StatusOr<size_t> params =
        model.ok() ? train::Model::CountParameters(*model) : model.status();
    if (!params.ok()) spec_ = params.status();
    if (spec_.ok()) num_chunks_ = int64_t((*params + spec_->chunk_size - 1) / spec_->chunk_size);
  }
  const bool active = a.has_value() && spec_.ok() && spec_->adaptive();
  const int64_t now_ms = absl::ToUnixMillis(clock_->Now());
  if (now_ms >= metrics_due_ms_) {  // at most once a second: links may be many
    metrics_due_ms_ = now_ms + 1000;
    metrics_->RefreshPolicy(links_, policy_, active && policy_.job_id() == a->job_id(), now_ms,
                            PlanSettledMs());
  }
  // The job's members and progress are gathered only when a decision is due.
  if (!active || !policy_.Due(a->job_id(), a->recovery_epoch(), now_ms)) return;
  const JobSpec* spec = &*spec_;
  PolicyJob job;
  job.job_id = a->job_id();
  job.recovery_epoch = a->recovery_epoch();
  job.load_policy = spec->load_policy;
  job.update_time_ms = spec->update_time_s * 1000;
  job.measure_window_ms = MeasureWindowMs(job.update_time_ms);
  job.update_rate = spec->update_rate;
  job.num_chunks = num_chunks_;
  // Enough chunks that a psd given none still moves flows big enough to
  // measure its links.
  const int64_t chunk_bytes = spec->chunk_size * int64_t(sizeof(float));
  job.probe_chunks =
      std::max<int64_t>(1, (spec->probe_chunk_bytes + chunk_bytes - 1) / chunk_bytes);
  job.chunk_bytes = double(chunk_bytes);
  job.segment_chunks = spec->SegmentChunks();
  for (const v1::JobMember& m : a->servers()) job.servers.push_back(m.node_id());
  job.batch_policy = spec->batch_policy;
  job.batch_size = uint32_t(spec->batch_size);
  job.batch_max = uint32_t(spec->BatchMax(uint32_t(a->workers_size())));
  job.workers.assign(a->workers_size(), "");
  for (const v1::JobMember& m : a->workers()) {
    if (m.rank() < uint32_t(a->workers_size())) job.workers[m.rank()] = m.node_id();
    if (!m.alive()) job.gone.insert(m.node_id());
  }
  if (spec->batch_policy == "wlbs") {
    // Each worker's progress as it last reported it (heartbeats).
    absl::StatusOr<v1::JobStatus> status = jobs_->Get(a->job_id());
    if (status.ok()) {
      for (const v1::NodeJobStatus& n : status->nodes()) {
        job.work[n.node_id()] = {n.report().samples(), n.report().compute_seconds()};
      }
    }
  }
  for (const auto* members : {&a->servers(), &a->workers()}) {
    for (const v1::JobMember& m : *members) {
      absl::StatusOr<HostPort> hp = ParseHostPort(m.data_address());
      job.host_of[m.node_id()] = hp.ok() ? hp->host : m.node_id();
    }
  }
  if (a->has_plan() && a->plan().version() == 1 &&
      a->plan().recovery_epoch() == a->recovery_epoch()) {
    job.start = a->plan();
  }
  job.plan_settled_ms = PlanSettledMs();
  {
    const v1::Policy& p = policy_.current();
    job.plan_round_ms = jobs_->PlanRoundMs(p.job_id(), p.recovery_epoch(), uint32_t(p.version()));
  }
  std::optional<v1::Policy> plan = policy_.Tick(job, links_, now_ms);
  if (plan.has_value()) {
    jobs_->IssuePlan(*plan);
    metrics_->plans_issued().Increment();
    metrics_due_ms_ = now_ms;  // show it at the next tick
  }
}

int64_t Schedd::PlanSettledMs() const {
  const v1::Policy& p = policy_.current();
  return jobs_->PlanSettledMs(p.job_id(), p.recovery_epoch(), uint32_t(p.version()));
}

void Schedd::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (reaper_.joinable()) reaper_.join();
  if (service_) service_->Stop();
  if (membership_) membership_->CloseWatchers();
  if (runtime_) runtime_->StopControl();
}

}  // namespace hetps
