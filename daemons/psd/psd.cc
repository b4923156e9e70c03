#include "daemons/psd/psd.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/daemon/job_runner.h"
#include "lib/ps/shard_server.h"
#include "lib/train/model.h"

namespace hetps {

void DeclarePsdConfig(ConfigSchema* schema, PsdConfig* c) {
  DeclareCommonConfig(schema, &c->common);
  DeclareAgentConfig(schema, &c->agent);
  DeclareDataPlaneConfig(schema, &c->data);
}

// The psd's part of a job: one ShardServer, started at schedd's word.
class Psd::Jobs final : public JobRunner {
 public:
  explicit Jobs(Psd* psd)
      : JobRunner(psd->runtime_->logger().WithComponent("job")),
        psd_(psd),
        data_metrics_(psd->runtime_->registry(), "psd") {
    prometheus::Registry& r = psd->runtime_->registry();
    auto& rounds = prometheus::BuildCounter()
                       .Name("psd_rounds_total")
                       .Help(
                           "BSP rounds closed, by why: complete (every live worker pushed), "
                           "deadline (closed at round_deadline_ms without some), membership "
                           "(a worker schedd declared gone).")
                       .Register(r);
    rounds_complete_ = &rounds.Add({{"close", "complete"}});
    rounds_deadline_ = &rounds.Add({{"close", "deadline"}});
    rounds_membership_ = &rounds.Add({{"close", "membership"}});
    auto gauge = [&r](const char* name, const char* help) {
      return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
    };
    iteration_ = gauge("psd_job_iteration", "Rounds closed in the current job.");
    contributors_ = gauge("psd_round_contributors", "Workers averaged in the last round.");
    round_seconds_ = gauge("psd_round_seconds", "Duration of the last round (open to applied).");
    aggregate_seconds_ =
        gauge("psd_aggregate_seconds", "Aggregation and optimizer time of the last round.");
    partial_pushes_ = &prometheus::BuildCounter()
                           .Name("psd_partial_pushes_total")
                           .Help("LTP pushes aggregated with holes (closed early).")
                           .Register(r)
                           .Add({});
    bubble_bytes_ = &prometheus::BuildCounter()
                         .Name("psd_bubble_bytes_total")
                         .Help(
                             "Gradient bytes zero-filled because their packets never arrived "
                             "(excluded from each element's average).")
                         .Register(r)
                         .Add({});
    delivered_ = &prometheus::BuildGauge()
                      .Name("psd_push_delivered_ratio")
                      .Help("Delivered fraction of each worker's latest push.")
                      .Register(r);
    stale_ = &prometheus::BuildCounter()
                  .Name("psd_stale_pushes_total")
                  .Help("Push flows refused: wrong iteration or not a live worker of the round.")
                  .Register(r)
                  .Add({});
  }
  ~Jobs() override { Shutdown(); }

 protected:
  absl::Status RunJob(const v1::JobAssignment& a, const JobSpec& spec) override {
    data_metrics_.SetPeerNames(PeerNamesOf(a));
    {
      absl::MutexLock lock(&mu_);  // nothing of the previous job is reported for this one
      final_ = ps::ShardServerStats();
    }
    int index = -1;
    for (const v1::JobMember& m : a.servers()) {
      if (m.node_id() == psd_->runtime_->node_id()) index = static_cast<int>(m.rank());
    }
    if (index < 0) return absl::InvalidArgumentError("this psd is not among the job's servers");
    ASSIGN_OR_RETURN(train::ModelSpec model_spec, train::BuiltinModel(spec.model));
    std::unique_ptr<train::Backend> cpu = train::NewCpuBackend();
    ASSIGN_OR_RETURN(std::unique_ptr<train::Model> model,
                     train::Model::Create(model_spec, cpu.get(), 1));
    const std::vector<float> init = model->InitialParameters(spec.seed);
    ASSIGN_OR_RETURN(transport::DataKey key,
                     transport::DataKeyFromBytes(uint8_t(a.data_key_id()), a.data_key()));
    ASSIGN_OR_RETURN(transport::Transport * data,
                     SelectJobTransport(spec, key, psd_->endpoint_.get(), psd_->tcp_.get()));
    MarkReady();

    v1::JobAssignment latest = a;
    while (!latest.start()) {
      if (!WaitUpdate(absl::Seconds(1), latest.roster_version(), &latest)) return absl::OkStatus();
    }
    ps::ShardServerConfig c;
    c.server_index = static_cast<uint32_t>(index);
    c.num_servers = static_cast<uint32_t>(a.servers_size());
    c.num_params = init.size();
    c.chunk_floats = static_cast<uint32_t>(spec.chunk_size);
    c.optimizer = spec.optimizer_config();
    c.total_iterations = static_cast<uint32_t>(latest.total_iterations());
    c.round_deadline = absl::Milliseconds(spec.round_deadline_ms);
    c.endpoint = data->config();
    c.endpoint.early_close = spec.early_close();
    ASSIGN_OR_RETURN(std::unique_ptr<TraceLog> trace,
                     OpenJobTrace(psd_->config_.data, a.job_id(), psd_->runtime_->node_id()));
    c.trace = trace.get();
    c.trace_node = psd_->runtime_->node_id();
    ASSIGN_OR_RETURN(std::unique_ptr<ps::ShardServer> server,
                     ps::ShardServer::Create(c, init, data));
    ASSIGN_OR_RETURN(std::vector<transport::Peer> workers, LiveWorkers(latest));
    server->SetWorkers(workers);
    {
      absl::MutexLock lock(&mu_);
      server_ = server.get();
    }
    psd_->mux_.Set(server.get());
    server->Start();
    logger().Info("rounds started",
                  {{"job_id", a.job_id()},
                   {"index", index},
                   {"chunks", static_cast<unsigned>(server->owned_chunks().size())},
                   {"iterations", static_cast<long long>(c.total_iterations)},
                   {"workers", static_cast<unsigned>(workers.size())}});
    absl::Status result = absl::OkStatus();
    uint64_t known = latest.roster_version();
    while (!server->WaitFinished(absl::ZeroDuration())) {
      if (!WaitUpdate(absl::Milliseconds(100), known, &latest)) break;
      if (latest.roster_version() == known) continue;
      known = latest.roster_version();
      absl::StatusOr<std::vector<transport::Peer>> live = LiveWorkers(latest);
      if (live.ok()) {
        logger().Info("workers changed",
                      {{"job_id", a.job_id()}, {"live", static_cast<unsigned>(live->size())}});
        server->SetWorkers(*live);
      }
    }
    psd_->mux_.Set(nullptr);
    {
      absl::MutexLock lock(&mu_);
      final_ = server->GetStats();
      server_ = nullptr;
    }
    server.reset();  // cancels and waits out its flows on the shared endpoint
    return result;
  }

  void StopJob() override {}  // RunJob's loop sees the stop in WaitUpdate

  void FillProgress(v1::NodeJobReport* r) override {
    ps::ShardServerStats s;
    {
      absl::MutexLock lock(&mu_);
      s = server_ != nullptr ? server_->GetStats() : final_;
    }
    r->set_iteration(s.iteration);
    r->set_rounds_complete(s.rounds_complete);
    r->set_rounds_by_deadline(s.rounds_by_deadline);
    r->set_rounds_by_membership(s.rounds_by_membership);
    r->set_last_contributors(s.last_contributors);
    r->set_last_round_ms(s.last_round_ms);
    // Metrics follow the same stats (this runs on every heartbeat).
    if (s.iteration < last_.iteration) last_ = ps::ShardServerStats();  // a new job
    AdvanceCounter(rounds_complete_, s.rounds_complete, &last_.rounds_complete);
    AdvanceCounter(rounds_deadline_, s.rounds_by_deadline, &last_.rounds_by_deadline);
    AdvanceCounter(rounds_membership_, s.rounds_by_membership, &last_.rounds_by_membership);
    AdvanceCounter(stale_, s.stale_pushes, &last_.stale_pushes);
    AdvanceCounter(partial_pushes_, s.partial_pushes, &last_.partial_pushes);
    AdvanceCounter(bubble_bytes_, s.bubble_bytes, &last_.bubble_bytes);
    for (const auto& [peer, fraction] : s.last_delivered) {
      delivered_->Add({{"worker", peer.ToString()}}).Set(fraction);
    }
    last_.iteration = s.iteration;
    iteration_->Set(s.iteration);
    contributors_->Set(s.last_contributors);
    round_seconds_->Set(s.last_round_ms / 1e3);
    aggregate_seconds_->Set(s.last_aggregate_ms / 1e3);
  }

  void OnHeartbeatTick() override {
    data_metrics_.Update(CombinedStats(*psd_->endpoint_, psd_->tcp_.get()));
  }

 private:
  static absl::StatusOr<std::vector<transport::Peer>> LiveWorkers(const v1::JobAssignment& a) {
    std::vector<transport::Peer> out;
    for (const v1::JobMember& m : a.workers()) {
      if (!m.alive()) continue;
      ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(m.data_address()));
      ASSIGN_OR_RETURN(transport::Peer p, transport::ResolvePeer(hp));
      out.push_back(p);
    }
    return out;
  }

  Psd* const psd_;
  TransportMetrics data_metrics_;
  absl::Mutex mu_;
  ps::ShardServer* server_ ABSL_GUARDED_BY(mu_) = nullptr;
  ps::ShardServerStats final_ ABSL_GUARDED_BY(mu_);
  ps::ShardServerStats last_;  // agent thread only
  prometheus::Counter *rounds_complete_, *rounds_deadline_, *rounds_membership_, *stale_,
      *partial_pushes_, *bubble_bytes_;
  prometheus::Family<prometheus::Gauge>* delivered_;
  prometheus::Gauge *iteration_, *contributors_, *round_seconds_, *aggregate_seconds_;
};

absl::StatusOr<std::unique_ptr<Psd>> Psd::Create(const PsdConfig& config, const DaemonEnv& env) {
  std::unique_ptr<Psd> d(new Psd(config));
  ASSIGN_OR_RETURN(d->runtime_, NodeRuntime::Create("psd", NodeRole::kServer, config.common, env));
  RETURN_IF_ERROR(CreateDataEndpoints(config.data, config.common.advertise_host, &d->mux_,
                                      &d->endpoint_, &d->tcp_, &d->data_address_));
  return d;
}

Psd::Psd(const PsdConfig& config) : config_(config) {}

Psd::~Psd() { Shutdown(); }

absl::Status Psd::Start() {
  RETURN_IF_ERROR(runtime_->StartControl(
      {},
      [this](v1::GetStatusResponse* r) {
        r->set_scheduler_address(agent_->scheduler_address());
        r->set_scheduler_connected(agent_->connected());
        r->set_incarnation(agent_->incarnation());
        r->set_membership_version(agent_->membership_version());
      },
      [this]() -> std::string {
        Jobs* jobs = jobs_view_.load();  // set once the runner exists (RPCs start first)
        const std::string job = jobs != nullptr ? jobs->ActiveJob() : "";
        if (job.empty()) return "";
        return absl::StrCat(runtime_->node_id(), " holds a shard of the parameters of running job ",
                            job, ": draining it loses that shard and fails the job");
      }));
  jobs_ = std::make_unique<Jobs>(this);
  jobs_view_.store(jobs_.get());
  jobs_->Start();
  agent_ =
      std::make_unique<SchedulerAgent>(config_.agent, runtime_.get(), data_address_, jobs_.get());
  agent_->Start();
  runtime_->logger().Info("data plane", {{"data_address", data_address_}});
  return runtime_->MarkServing();
}

void Psd::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Leave the cluster first so schedd reports LEFT rather than DEAD.
  if (agent_) agent_->Stop();
  if (jobs_) jobs_->Shutdown();
  if (endpoint_) endpoint_->Shutdown();
  if (tcp_) tcp_->Shutdown();
  if (runtime_) runtime_->StopControl();
}

}  // namespace hetps
