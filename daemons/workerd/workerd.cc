#include "daemons/workerd/workerd.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <tuple>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/daemon/artifacts.h"
#include "lib/daemon/job_runner.h"
#include "lib/job/bsp_worker.h"
#include "lib/train/backend.h"
#include "lib/train/model.h"

namespace hetps {

void DeclareWorkerdConfig(ConfigSchema* schema, WorkerdConfig* c) {
  DeclareCommonConfig(schema, &c->common);
  DeclareAgentConfig(schema, &c->agent);
  DeclareDataPlaneConfig(schema, &c->data);
  schema->Int("cpu_threads", &c->cpu_threads,
              "BLAS threads of the CPU backend (0 = OpenBLAS's default, every core).", 0, 1024);
  schema->Double("compute_slowdown", &c->compute_slowdown,
                 "Fault injection: each iteration's compute takes this many times as long (the "
                 "trainer idles for the rest); 1 = off.",
                 1, 100);
  schema->Int("report_every", &c->report_every,
              "Iterations between progress log lines and reports to schedd.", 1, 1 << 30);
  schema->String("model_dir", &c->model_dir,
                 "Where rank 0 saves each succeeded job's model (<job_id>.safetensors; psctl job "
                 "export fetches it), created if missing. Empty: no models are kept.");
  schema->Int("model_keep", &c->model_keep, "Models kept in model_dir (the newest).", 1, 100000);
}

// The workerd's part of a job: one BspWorker, run to the end.
class Workerd::Jobs final : public JobRunner {
 public:
  explicit Jobs(Workerd* w)
      : JobRunner(w->runtime_->logger().WithComponent("job"), w->runtime_->node_id()),
        w_(w),
        data_metrics_(w->runtime_->registry(), "workerd") {
    prometheus::Registry& r = w->runtime_->registry();
    auto gauge = [&r](const char* name, const char* help) {
      return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
    };
    iteration_ = gauge("workerd_job_iteration", "Iterations done in the current job.");
    total_ = gauge("workerd_job_iterations", "Iterations of the current job.");
    loss_ = gauge("workerd_job_loss", "Mean training loss since the previous report.");
    accuracy_ = gauge("workerd_job_test_accuracy",
                      "Newest test-set accuracy (rank 0 evaluates; -1 before the first).");
    samples_ = gauge("workerd_job_samples_per_second", "Training samples per second.");
    batch_ = gauge("workerd_job_batch_size", "Samples in this worker's latest iteration.");
    auto& phase = prometheus::BuildCounter()
                      .Name("workerd_job_phase_seconds_total")
                      .Help(
                          "Time per phase of an iteration: compute (forward/backward), push "
                          "(gradients to psd), pull_wait (waiting for parameters), start_wait "
                          "(waiting for the initial parameters).")
                      .Register(r);
    compute_ = &phase.Add({{"phase", "compute"}});
    push_ = &phase.Add({{"phase", "push"}});
    pull_wait_ = &phase.Add({{"phase", "pull_wait"}});
    start_wait_ = &phase.Add({{"phase", "start_wait"}});
    skipped_ = &prometheus::BuildCounter()
                    .Name("workerd_job_skipped_iterations_total")
                    .Help("Iterations jumped over after a round closed without this worker.")
                    .Register(r)
                    .Add({});
  }
  ~Jobs() override { Shutdown(); }

 protected:
  absl::Status RunJob(const v1::JobAssignment& a, const JobSpec& spec) override {
    data_metrics_.SetPeerNames(PeerNamesOf(a));
    {
      absl::MutexLock lock(&mu_);  // nothing of the previous job is reported for this one
      progress_ = WorkerProgress();
      progress_.test_accuracy = -1;
      last_ = WorkerProgress();
    }
    int rank = -1;
    for (const v1::JobMember& m : a.workers()) {
      if (m.node_id() == w_->runtime_->node_id()) rank = static_cast<int>(m.rank());
    }
    if (rank < 0) return absl::InvalidArgumentError("this workerd is not among the job's workers");
    // A recovery: the round and the plan to resume under are picked from
    // the servers' checkpoints first; this worker is built under them.
    v1::JobAssignment latest = a;
    while (latest.recovery_epoch() > 0 && !latest.resume_decided() && !latest.start()) {
      if (!WaitUpdate(absl::Seconds(1), latest.roster_version(), &latest)) return absl::OkStatus();
    }
    BspWorkerConfig c;
    if (latest.recovery_epoch() > 0 && latest.has_plan() && latest.plan().version() == 1 &&
        latest.plan().recovery_epoch() == latest.recovery_epoch() &&
        latest.plan().chunk_server_size() > 0) {
      const v1::Policy& plan = latest.plan();
      c.start_plan.chunk_server.assign(plan.chunk_server().begin(), plan.chunk_server().end());
      c.start_plan.batch.assign(latest.workers_size(), 0);
      bool mine = false;
      for (const v1::WorkerBatch& b : plan.worker_batches()) {
        for (const v1::JobMember& m : latest.workers()) {
          if (m.node_id() != b.worker_node_id() || m.rank() >= uint32_t(latest.workers_size())) {
            continue;
          }
          c.start_plan.batch[m.rank()] = b.batch_size();
          if (int(m.rank()) == rank) {
            c.resume_samples = b.resume_samples();
            mine = true;
          }
        }
      }
      if (!mine) {
        return absl::InvalidArgumentError("the plan to resume under has no batch for this worker");
      }
    }
    c.job = spec;
    c.rank = static_cast<uint32_t>(rank);
    c.workers = static_cast<uint32_t>(a.workers_size());
    ASSIGN_OR_RETURN(c.servers, ServersOf(a));
    ASSIGN_OR_RETURN(transport::DataKey key,
                     transport::DataKeyFromBytes(uint8_t(a.data_key_id()), a.data_key()));
    ASSIGN_OR_RETURN(transport::Transport * data,
                     SelectJobTransport(spec, key, w_->endpoint_.get(), w_->tcp_.get()));
    c.endpoint = data->config();
    c.evaluate = rank == 0;
    ASSIGN_OR_RETURN(std::unique_ptr<TraceLog> trace,
                     OpenJobTrace(w_->config_.data, a, w_->runtime_->node_id()));
    c.trace = trace.get();
    c.trace_node = w_->runtime_->node_id();
    c.compute_slowdown = w_->config_.compute_slowdown;
    // Rounds start once every member is ready: allow for slow starters.
    c.pull_timeout = absl::Seconds(120);
    ASSIGN_OR_RETURN(train::BackendKind kind, train::ParseBackendKind(spec.backend));
    if (w_->config_.cpu_threads > 0) {
      train::SetCpuThreads(static_cast<int>(w_->config_.cpu_threads));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<train::Backend> backend, train::CreateBackend(kind));
    ASSIGN_OR_RETURN(std::unique_ptr<BspWorker> worker, BspWorker::Create(c, backend.get(), data));
    {
      absl::MutexLock lock(&mu_);
      worker_ = worker.get();
      progress_.total = worker->total_iterations();
    }
    w_->mux_.Set(worker.get());
    if (StopRequested()) worker->Stop();
    MarkReady();
    if (a.recovery_epoch() > 0) {
      // A recovery: every member is ready before the servers resume, at
      // the round schedd picked from their checkpoints.
      while (!latest.start()) {
        if (!WaitUpdate(absl::Seconds(1), latest.roster_version(), &latest)) {
          Detach();
          return absl::OkStatus();
        }
      }
      // (Server addresses never change within an epoch: schedd starts a
      // new one when a psd comes back elsewhere. Parameters of the resume
      // round may have arrived already; ResumeAt keeps them.)
      worker->ResumeAt(latest.resume_round());
      logger().Info("resuming", {{"job_id", a.job_id()},
                                 {"iteration", static_cast<long long>(latest.resume_round())},
                                 {"recovery_epoch", latest.recovery_epoch()}});
    }
    logger().Info("training", {{"job_id", a.job_id()},
                               {"rank", rank},
                               {"workers", a.workers_size()},
                               {"backend", backend->name()},
                               {"iterations", static_cast<long long>(worker->total_iterations())}});
    double best_accuracy = -1;
    absl::Status s = worker->Run(w_->config_.report_every, [&](const WorkerProgress& p) {
      if (p.test_accuracy >= 0) best_accuracy = p.test_accuracy;
      {
        absl::MutexLock lock(&mu_);
        const double acc = progress_.test_accuracy;
        progress_ = p;
        if (p.test_accuracy < 0) progress_.test_accuracy = acc;  // keep the newest measured
      }
      logger().Info("progress", {{"job_id", a.job_id()},
                                 {"iteration", absl::StrCat(p.iteration, "/", p.total)},
                                 {"loss", p.loss},
                                 {"test_accuracy", p.test_accuracy},
                                 {"samples_per_s", p.samples_per_s},
                                 {"compute_s", p.compute_s},
                                 {"push_s", p.push_s},
                                 {"pull_wait_s", p.pull_wait_s},
                                 {"start_wait_s", p.start_wait_s}});
    });
    Detach();
    if (s.ok() && rank == 0) SaveModel(a.job_id(), spec, worker->params());
    if (s.ok()) {
      logger().Info("job part done",
                    {{"job_id", a.job_id()},
                     {"final_test_accuracy", best_accuracy},
                     {"skipped_iterations", static_cast<long long>(progress_snapshot().skipped)}});
    }
    return s;
  }

  void StopJob() override {
    absl::MutexLock lock(&mu_);
    if (worker_ != nullptr) worker_->Stop();
  }

  void FillProgress(v1::NodeJobReport* r) override {
    WorkerProgress p = progress_snapshot();
    {
      absl::MutexLock lock(&mu_);  // fresher than the last report: WLBS's speeds
      if (worker_ != nullptr) std::tie(p.samples, p.compute_s) = worker_->ComputeDone();
    }
    r->set_iteration(p.iteration);
    r->set_total_iterations(p.total);
    r->set_loss(p.loss);
    r->set_test_accuracy(p.test_accuracy);
    r->set_samples_per_second(p.samples_per_s);
    r->set_compute_seconds(p.compute_s);
    r->set_push_seconds(p.push_s);
    r->set_pull_wait_seconds(p.pull_wait_s);
    r->set_start_wait_seconds(p.start_wait_s);
    r->set_samples(p.samples);
    r->set_batch_size(p.batch);
    iteration_->Set(static_cast<double>(p.iteration));
    total_->Set(static_cast<double>(p.total));
    loss_->Set(p.loss);
    accuracy_->Set(p.test_accuracy);
    samples_->Set(p.samples_per_s);
    batch_->Set(static_cast<double>(p.batch));
    absl::MutexLock lock(&mu_);
    AdvanceCounter(compute_, p.compute_s, &last_.compute_s);
    AdvanceCounter(push_, p.push_s, &last_.push_s);
    AdvanceCounter(pull_wait_, p.pull_wait_s, &last_.pull_wait_s);
    AdvanceCounter(start_wait_, p.start_wait_s, &last_.start_wait_s);
    AdvanceCounter(skipped_, p.skipped, &last_.skipped);
  }

  void OnHeartbeatTick() override {
    data_metrics_.Update(CombinedStats(*w_->endpoint_, w_->tcp_.get()));
  }

  std::vector<transport::PeerEstimate> PeerEstimates() const override {
    return CombinedStats(*w_->endpoint_, w_->tcp_.get()).peers;
  }

 private:
  static absl::StatusOr<std::vector<transport::Peer>> ServersOf(const v1::JobAssignment& a) {
    return DataPeersOf(a.servers(), /*live_only=*/false);
  }

  // Rank 0 holds the final parameters: saved for psctl job export. A
  // failure is logged; the job's outcome does not depend on it.
  void SaveModel(const std::string& job_id, const JobSpec& spec, const std::vector<float>& params) {
    const std::string& dir = w_->config_.model_dir;
    if (dir.empty()) return;
    std::unique_ptr<train::Backend> cpu = train::NewCpuBackend();
    absl::StatusOr<std::string> path = [&]() -> absl::StatusOr<std::string> {
      ASSIGN_OR_RETURN(train::ModelSpec ms, train::BuiltinModel(spec.model));
      ASSIGN_OR_RETURN(std::unique_ptr<train::Model> model, train::Model::Create(ms, cpu.get(), 1));
      return SaveJobModel(dir, job_id, *model, params, {spec.model, spec.dataset, spec.name},
                          size_t(w_->config_.model_keep));
    }();
    if (!path.ok()) {
      logger().Error("model not saved", {{"job_id", job_id}, {"error", path.status().message()}});
      return;
    }
    logger().Info("model saved", {{"job_id", job_id}, {"path", *path}});
  }

  // The worker stops receiving and being stopped through worker_.
  void Detach() {
    w_->mux_.Set(nullptr);
    absl::MutexLock lock(&mu_);
    worker_ = nullptr;
  }

  WorkerProgress progress_snapshot() {
    absl::MutexLock lock(&mu_);
    return progress_;
  }

  Workerd* const w_;
  TransportMetrics data_metrics_;
  absl::Mutex mu_;
  BspWorker* worker_ ABSL_GUARDED_BY(mu_) = nullptr;
  WorkerProgress progress_ ABSL_GUARDED_BY(mu_);
  WorkerProgress last_ ABSL_GUARDED_BY(mu_);  // what the counters hold
  prometheus::Gauge *iteration_, *total_, *loss_, *accuracy_, *samples_, *batch_;
  prometheus::Counter *compute_, *push_, *pull_wait_, *start_wait_, *skipped_;
};

Workerd::Workerd(const WorkerdConfig& config) : config_(config) {}

absl::StatusOr<std::unique_ptr<Workerd>> Workerd::Create(const WorkerdConfig& config,
                                                         const DaemonEnv& env) {
  std::unique_ptr<Workerd> d(new Workerd(config));
  ASSIGN_OR_RETURN(d->runtime_,
                   NodeRuntime::Create("workerd", NodeRole::kWorker, config.common, env));
  RETURN_IF_ERROR(CreateDataEndpoints(config.data, config.common.advertise_host, &d->mux_,
                                      &d->endpoint_, &d->tcp_, &d->data_address_));
  return d;
}

Workerd::~Workerd() { Shutdown(); }

absl::Status Workerd::Start() {
  artifacts_ = std::make_unique<ArtifactsService>(runtime_.get(), config_.model_dir, nullptr);
  RETURN_IF_ERROR(runtime_->StartControl(
      {artifacts_.get()},
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
        return absl::StrCat(runtime_->node_id(), " trains in running job ", job,
                            ": draining it ends its part; the job goes on with the other workers "
                            "and never sees this worker's data shard again");
      }));
  jobs_ = std::make_unique<Jobs>(this);
  mux_.SetObserver(&jobs_->link_meter());
  jobs_view_.store(jobs_.get());
  jobs_->Start();
  agent_ =
      std::make_unique<SchedulerAgent>(config_.agent, runtime_.get(), data_address_, jobs_.get());
  agent_->Start();
  runtime_->logger().Info("data plane", {{"data_address", data_address_}});
  return runtime_->MarkServing();
}

void Workerd::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Leave the cluster first so schedd reports LEFT rather than DEAD.
  if (agent_) agent_->Stop();
  if (jobs_) jobs_->Shutdown();
  mux_.SetObserver(nullptr);
  if (endpoint_) endpoint_->Shutdown();
  if (tcp_) tcp_->Shutdown();
  if (runtime_) runtime_->StopControl();
}

}  // namespace hetps
