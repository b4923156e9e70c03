#include "daemons/psd/psd.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/daemon/job_runner.h"
#include "lib/job/model_file.h"
#include "lib/ps/shard_server.h"
#include "lib/rpc/grpc_util.h"
#include "lib/storage/checkpoint_store.h"
#include "lib/storage/checkpoint_writer.h"
#include "lib/train/model.h"

namespace hetps {
namespace {

// init_from: checkpoint:JOB[@ROUND] (docs/jobs.md).
constexpr char kCheckpointPrefix[] = "checkpoint:";

}  // namespace

void DeclarePsdConfig(ConfigSchema* schema, PsdConfig* c) {
  DeclareCommonConfig(schema, &c->common);
  DeclareAgentConfig(schema, &c->agent);
  DeclareDataPlaneConfig(schema, &c->data);
  schema->String("checkpoint_dir", &c->checkpoint_dir,
                 "Directory of this psd's checkpoint store (RocksDB; docs/storage-format.md), "
                 "created if missing. Empty: jobs' checkpoint_every_rounds is ignored, with a "
                 "warning.");
  schema->Int("checkpoint_keep", &c->checkpoint_keep, "Checkpoints kept per job (the newest).", 1,
              1000);
  schema->Int("checkpoint_keep_jobs", &c->checkpoint_keep_jobs,
              "Earlier jobs whose checkpoints stay (the most recent); a job that starts "
              "checkpointing removes the others'.",
              0, 1000);
}

// The psd's part of a job: one ShardServer, started at schedd's word.
class Psd::Jobs final : public JobRunner {
 public:
  explicit Jobs(Psd* psd)
      : JobRunner(psd->runtime_->logger().WithComponent("job"), psd->runtime_->node_id()),
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
    round_hist_ =
        &prometheus::BuildHistogram()
             .Name("psd_round_duration_seconds")
             .Help("Rounds by duration, open to applied.")
             .Register(r)
             .Add({}, prometheus::Histogram::BucketBoundaries(ps::kRoundSecondsBounds.begin(),
                                                              ps::kRoundSecondsBounds.end()));
    aggregate_seconds_ =
        gauge("psd_aggregate_seconds", "Aggregation and optimizer time of the last round.");
    snapshot_seconds_ = gauge("psd_checkpoint_snapshot_seconds",
                              "The round thread's copy for the newest checkpoint it offered.");
    checkpoint_round_ = gauge("psd_checkpoint_round", "Round of the newest checkpoint written.");
    checkpoint_bytes_ =
        gauge("psd_checkpoint_bytes", "Parameters and optimizer state in the newest checkpoint.");
    checkpoint_write_seconds_ =
        gauge("psd_checkpoint_write_seconds", "Time to write the newest checkpoint.");
    checkpoint_unix_seconds_ = gauge("psd_checkpoint_last_unix_seconds",
                                     "When the newest checkpoint was written (its age: time() "
                                     "minus this).");
    auto& checkpoints = prometheus::BuildCounter()
                            .Name("psd_checkpoints_total")
                            .Help(
                                "Checkpoints by result: written, failed (disk error; training "
                                "goes on), skipped (the previous still being written), "
                                "open_failed (the store could not be opened).")
                            .Register(r);
    checkpoints_written_ = &checkpoints.Add({{"result", "written"}});
    checkpoints_failed_ = &checkpoints.Add({{"result", "failed"}});
    checkpoints_skipped_ = &checkpoints.Add({{"result", "skipped"}});
    checkpoint_open_failed_ = &checkpoints.Add({{"result", "open_failed"}});
    checkpoints_invalid_ = &prometheus::BuildCounter()
                                .Name("psd_checkpoints_invalid_total")
                                .Help(
                                    "Checkpoints that failed their checks when read for a "
                                    "recovery (skipped; an older one is used).")
                                .Register(r)
                                .Add({});
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
    plan_version_ = gauge("psd_plan_version", "Version of the plan this server follows.");
    plan_switches_ = &prometheus::BuildCounter()
                          .Name("psd_plan_switches_total")
                          .Help("Plans switched to (each moves chunks at one round).")
                          .Register(r)
                          .Add({});
    auto& moved = prometheus::BuildCounter()
                      .Name("psd_plan_chunks_moved_total")
                      .Help("Chunks moved with their optimizer state, by direction.")
                      .Register(r);
    chunks_sent_ = &moved.Add({{"direction", "sent"}});
    chunks_received_ = &moved.Add({{"direction", "received"}});
    auto& plan_flows = prometheus::BuildCounter()
                           .Name("psd_plan_flows_total")
                           .Help(
                               "Flows by how their plan version was taken: stale (older plan, "
                               "refused), ahead (a push of a newer plan, refused), held (kept "
                               "until this server knew or switched to the plan).")
                           .Register(r);
    plan_stale_ = &plan_flows.Add({{"result", "stale"}});
    plan_ahead_ = &plan_flows.Add({{"result", "ahead"}});
    plan_held_ = &plan_flows.Add({{"result", "held"}});
    rounds_reopened_ = &prometheus::BuildCounter()
                            .Name("psd_rounds_reopened_total")
                            .Help("Rounds opened again: their plan was announced here late.")
                            .Register(r)
                            .Add({});
    segments_streamed_ =
        &prometheus::BuildCounter()
             .Name("psd_segments_streamed_total")
             .Help("Segments stepped and sent as the next round's before their round closed.")
             .Register(r)
             .Add({});
    segments_ahead_ =
        &prometheus::BuildCounter()
             .Name("psd_segments_ahead_total")
             .Help("Segments of a plan's first round sent before the switch that opens it.")
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
      offered_.clear();
      resume_plan_round_ = 0;
      resume_plan_.Clear();
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
    std::vector<float> init;
    std::optional<storage::Checkpoint> start_from;  // init_from: checkpoint:...
    if (spec.init_from.empty()) {
      init = model->InitialParameters(spec.seed);
    } else if (absl::StartsWith(spec.init_from, kCheckpointPrefix)) {
      init = model->InitialParameters(spec.seed);  // this psd's chunks are replaced
      ASSIGN_OR_RETURN(start_from, InitCheckpoint(spec.init_from, uint32_t(index)));
      logger().Info("starting from a checkpoint",
                    {{"job_id", a.job_id()},
                     {"init_from", spec.init_from},
                     {"round", static_cast<unsigned long long>(start_from->round)}});
      {
        absl::MutexLock lock(&mu_);  // reported: schedd checks every psd uses the same round
        offered_ = {start_from->round};
      }
      start_from->round = 0;  // a new job: its own rounds from 0
      // under the even split: a checkpoint trained under another plan holds
      // other chunks than this server's, and Create says so.
      start_from->plan = storage::CheckpointPlan();
    } else {
      // The job fails with the reason (file missing, another model, ...).
      ASSIGN_OR_RETURN(init, LoadModelFile(spec.init_from, *model));
      logger().Info("initial parameters from a model file",
                    {{"job_id", a.job_id()}, {"init_from", spec.init_from}});
    }
    ASSIGN_OR_RETURN(transport::DataKey key,
                     transport::DataKeyFromBytes(uint8_t(a.data_key_id()), a.data_key()));
    ASSIGN_OR_RETURN(transport::Transport * data,
                     SelectJobTransport(spec, key, psd_->endpoint_.get(), psd_->tcp_.get()));
    storage::CheckpointWriter* writer = nullptr;
    if (spec.checkpoint_every_rounds > 0) writer = CheckpointWriterFor(a.job_id());
    ASSIGN_OR_RETURN(std::unique_ptr<storage::CheckpointStore> adopted,
                     OpenAdopted(a.servers(index)));
    if (a.recovery_epoch() > 0) {
      OfferCheckpoints(a.job_id(), uint32_t(index), writer, adopted.get());
    }
    MarkReady();

    // A recovery resumes every server at the round schedd picked from what
    // they offered (0: the initial parameters above), under the plan that
    // round was trained under: loaded once the round is picked, its plan
    // reported (schedd starts the epoch under it), then the start awaited.
    v1::JobAssignment latest = a;
    std::optional<storage::Checkpoint> resume;
    auto load = [&]() -> absl::Status {
      if (latest.recovery_epoch() == 0 || latest.resume_round() <= 0 || resume.has_value()) {
        return absl::OkStatus();
      }
      ASSIGN_OR_RETURN(resume, LoadCheckpoint(a.job_id(), uint32_t(index),
                                              uint64_t(latest.resume_round()), adopted.get()));
      ReportResumePlan(latest, *resume);
      return absl::OkStatus();
    };
    while (!latest.start()) {
      RETURN_IF_ERROR(load());
      if (!WaitUpdate(absl::Seconds(1), latest.roster_version(), &latest)) return absl::OkStatus();
    }
    RETURN_IF_ERROR(load());
    if (resume.has_value()) RETURN_IF_ERROR(CheckStartPlan(latest, *resume));
    {
      absl::MutexLock lock(&mu_);  // schedd has it: heartbeats stop carrying it
      resume_plan_round_ = 0;
      resume_plan_.Clear();
    }
    if (latest.recovery_epoch() > 0) {
      logger().Info("resuming", {{"job_id", a.job_id()},
                                 {"round", static_cast<long long>(latest.resume_round())},
                                 {"recovery_epoch", latest.recovery_epoch()}});
    }
    ps::ShardServerConfig c;
    c.server_index = static_cast<uint32_t>(index);
    c.num_servers = static_cast<uint32_t>(a.servers_size());
    c.num_workers = static_cast<uint32_t>(a.workers_size());
    c.batch_size = static_cast<uint32_t>(spec.batch_size);
    c.batch_max = static_cast<uint32_t>(spec.BatchMax(c.num_workers));
    c.num_params = init.size();
    c.chunk_floats = static_cast<uint32_t>(spec.chunk_size);
    c.segment_chunks = spec.SegmentChunks();
    c.optimizer = spec.optimizer_config();
    c.total_iterations = static_cast<uint32_t>(latest.total_iterations());
    c.round_deadline = absl::Milliseconds(spec.round_deadline_ms);
    c.plan_lead = static_cast<uint32_t>(spec.plan_lead_rounds);
    c.endpoint = data->config();
    c.endpoint.early_close = spec.early_close();
    ASSIGN_OR_RETURN(std::unique_ptr<TraceLog> trace,
                     OpenJobTrace(psd_->config_.data, a, psd_->runtime_->node_id()));
    c.trace = trace.get();
    c.trace_node = psd_->runtime_->node_id();
    c.job_id = a.job_id();
    if (writer != nullptr) {
      c.checkpoints = writer;
      c.checkpoint_every_rounds = static_cast<uint32_t>(spec.checkpoint_every_rounds);
      c.spec_text = JobSpecToYaml(spec);
    }
    if (resume.has_value()) {
      c.resume = &*resume;
    } else if (start_from.has_value()) {
      c.resume = &*start_from;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<ps::ShardServer> server,
                     ps::ShardServer::Create(c, init, data));
    ASSIGN_OR_RETURN(std::vector<transport::Peer> workers, LiveWorkers(latest));
    server->SetWorkers(workers);
    ASSIGN_OR_RETURN(std::vector<transport::Peer> servers, DataPeersOf(latest.servers(), false));
    server->SetServers(servers);
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
    uint64_t proposed = 1;  // the newest plan handed to the server (server 0 sequences them)
    auto propose = [&](const v1::JobAssignment& a) {
      if (index != 0 || !a.has_plan() || a.plan().version() <= proposed) return;
      proposed = a.plan().version();
      absl::Status s = ProposePlan(*server, a, c);
      logger().Log(s.ok() ? LogLevel::kInfo : LogLevel::kError, "plan proposed",
                   {{"job_id", a.job_id()},
                    {"version", static_cast<unsigned long long>(proposed)},
                    {"error", std::string(s.message())}});
    };
    propose(latest);
    while (!server->WaitFinished(absl::ZeroDuration())) {
      if (!WaitUpdate(absl::Milliseconds(100), known, &latest)) break;
      if (latest.roster_version() == known) continue;
      known = latest.roster_version();
      propose(latest);
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
    r->set_plan_version(s.plan_version);
    r->set_plan_from(s.plan_from);
    if (Store() != nullptr) r->set_checkpoint_dir(OwnCheckpointDir());  // usable: adoptable
    {
      absl::MutexLock lock(&mu_);
      for (uint64_t round : offered_) r->add_checkpoint_rounds(round);
      if (resume_plan_round_ > 0) {
        r->set_resume_plan_round(resume_plan_round_);
        *r->mutable_resume_plan() = resume_plan_;
      }
    }
    // Metrics follow the same stats (this runs on every heartbeat).
    if (s.iteration < last_.iteration) last_ = ps::ShardServerStats();  // a new job
    AdvanceCounter(rounds_complete_, s.rounds_complete, &last_.rounds_complete);
    AdvanceCounter(rounds_deadline_, s.rounds_by_deadline, &last_.rounds_by_deadline);
    AdvanceCounter(rounds_membership_, s.rounds_by_membership, &last_.rounds_by_membership);
    AdvanceCounter(stale_, s.stale_pushes, &last_.stale_pushes);
    AdvanceCounter(plan_switches_, s.plan_switches, &last_.plan_switches);
    AdvanceCounter(chunks_sent_, s.chunks_sent, &last_.chunks_sent);
    AdvanceCounter(chunks_received_, s.chunks_received, &last_.chunks_received);
    AdvanceCounter(plan_stale_, s.stale_plan, &last_.stale_plan);
    AdvanceCounter(plan_ahead_, s.plan_ahead, &last_.plan_ahead);
    AdvanceCounter(plan_held_, s.held_flows, &last_.held_flows);
    AdvanceCounter(rounds_reopened_, s.rounds_reopened, &last_.rounds_reopened);
    AdvanceCounter(segments_streamed_, s.segments_streamed, &last_.segments_streamed);
    AdvanceCounter(segments_ahead_, s.segments_ahead, &last_.segments_ahead);
    plan_version_->Set(s.plan_version);
    AdvanceCounter(partial_pushes_, s.partial_pushes, &last_.partial_pushes);
    AdvanceCounter(bubble_bytes_, s.bubble_bytes, &last_.bubble_bytes);
    for (const auto& [peer, fraction] : s.last_delivered) {
      delivered_->Add({{"worker", peer.ToString()}}).Set(fraction);
    }
    last_.iteration = s.iteration;
    iteration_->Set(s.iteration);
    contributors_->Set(s.last_contributors);
    round_seconds_->Set(s.last_round_ms / 1e3);
    AdvanceRoundHistogram(s);
    aggregate_seconds_->Set(s.last_aggregate_ms / 1e3);
    snapshot_seconds_->Set(s.last_snapshot_ms / 1e3);
    UpdateCheckpointMetrics();
  }

  void OnHeartbeatTick() override {
    data_metrics_.Update(CombinedStats(*psd_->endpoint_, psd_->tcp_.get()));
  }

  std::vector<transport::PeerEstimate> PeerEstimates() const override {
    return CombinedStats(*psd_->endpoint_, psd_->tcp_.get()).peers;
  }

 private:
  // Adds the rounds closed since the last heartbeat to the histogram.
  void AdvanceRoundHistogram(const ps::ShardServerStats& s) {
    std::vector<double> added(s.round_buckets.size());
    bool any = false;
    for (size_t i = 0; i < added.size(); ++i) {
      if (s.round_buckets[i] > last_.round_buckets[i]) {
        added[i] = double(s.round_buckets[i] - last_.round_buckets[i]);
        any = true;
      }
    }
    if (any) round_hist_->ObserveMultiple(added, s.round_seconds_sum - last_.round_seconds_sum);
    last_.round_buckets = s.round_buckets;
    last_.round_seconds_sum = s.round_seconds_sum;
  }

  // The checkpoint writer over this psd's store, opened at the first job
  // that asks; null (logged) without a checkpoint_dir or when the store
  // cannot be opened: the job then runs without checkpoints.
  storage::CheckpointWriter* CheckpointWriterFor(const std::string& job_id) {
    if (psd_->config_.checkpoint_dir.empty()) {
      logger().Warn("job asks for checkpoints but this psd has no checkpoint_dir: none written",
                    {{"job_id", job_id}});
      return nullptr;
    }
    absl::Status open = OpenStore();
    absl::MutexLock lock(&mu_);
    if (!open.ok()) {
      logger().Error(
          "checkpoint store cannot be opened: the job runs without checkpoints",
          {{"job_id", job_id}, {"dir", psd_->config_.checkpoint_dir}, {"error", open.message()}});
      checkpoint_open_failed_->Increment();
      return nullptr;
    }
    PruneJobs(job_id);
    return writer_.get();
  }

 public:
  // The store and its writer, opened at the first use (a job that
  // checkpoints, or psctl listing them) and kept for the daemon's life.
  absl::Status OpenStore() {
    absl::MutexLock lock(&mu_);
    if (store_ != nullptr) return absl::OkStatus();
    storage::CheckpointStoreConfig sc;
    sc.dir = psd_->config_.checkpoint_dir;
    sc.keep_last = static_cast<uint32_t>(psd_->config_.checkpoint_keep);
    ASSIGN_OR_RETURN(store_, storage::CheckpointStore::Open(sc));
    writer_ = std::make_unique<storage::CheckpointWriter>(store_.get());
    logger().Info("checkpoint store open", {{"dir", sc.dir}});
    return absl::OkStatus();
  }

  // Artifacts.ListCheckpoints.
  grpc::Status ListCheckpoints(const std::string& job_id, v1::ListCheckpointsResponse* out) {
    out->set_dir(psd_->config_.checkpoint_dir);
    if (psd_->config_.checkpoint_dir.empty()) return grpc::Status::OK;
    if (absl::Status s = OpenStore(); !s.ok()) return ToGrpcStatus(s);
    storage::CheckpointStore* store = Store();
    std::vector<std::string> jobs = {job_id};
    if (job_id.empty()) {
      absl::StatusOr<std::vector<std::string>> all = store->Jobs();
      if (!all.ok()) return ToGrpcStatus(all.status());
      jobs = std::move(*all);
    }
    for (const std::string& id : jobs) {
      absl::StatusOr<std::vector<storage::CheckpointInfo>> list = store->List(id);
      if (!list.ok()) return ToGrpcStatus(list.status());
      for (const storage::CheckpointInfo& c : *list) {
        v1::CheckpointDescription* d = out->add_checkpoints();
        d->set_job_id(c.job_id);
        d->set_server_index(c.server_index);
        d->set_round(c.round);
        d->set_written_unix_ms(int64_t(c.written_unix_ms));
        d->set_chunks(c.chunks);
        d->set_bytes(c.bytes);
      }
    }
    return grpc::Status::OK;
  }

 private:
  // This psd's checkpoint_dir as other psds would name it (absolute), or
  // empty.
  std::string OwnCheckpointDir() const {
    const std::string& dir = psd_->config_.checkpoint_dir;
    if (dir.empty()) return "";
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::absolute(dir, ec);
    return ec ? dir : p.lexically_normal().string();
  }

  // Once opened, the store stays for the daemon's life.
  storage::CheckpointStore* Store() {
    absl::MutexLock lock(&mu_);
    return store_.get();
  }

  // In a recovery epoch, before reporting ready: the rounds of this
  // server's valid checkpoints of the job, in its own store and, for an
  // adopted part, in `adopted` (the lost psd's), for schedd to pick the
  // newest common one. A checkpoint failing its checks is skipped
  // (counted, logged); without a store only round 0 is on offer.
  void OfferCheckpoints(const std::string& job_id, uint32_t index,
                        storage::CheckpointWriter* writer, storage::CheckpointStore* adopted) {
    if (writer != nullptr) writer->Drain();  // the stopped part's last checkpoint counts too
    std::vector<uint64_t> offered;
    // Reads every checkpoint whole: not under mu_, which heartbeats take.
    for (storage::CheckpointStore* store : {writer != nullptr ? Store() : nullptr, adopted}) {
      if (store == nullptr) continue;
      storage::ReadStats stats;
      absl::StatusOr<std::vector<uint64_t>> rounds = store->ValidRounds(job_id, index, &stats);
      for (const std::string& why : stats.why) {
        logger().Warn("checkpoint skipped: it fails its checks",
                      {{"job_id", job_id}, {"dir", store->dir()}, {"why", why}});
      }
      checkpoints_invalid_->Increment(stats.skipped);
      if (!rounds.ok()) {
        logger().Error(
            "checkpoints cannot be listed",
            {{"job_id", job_id}, {"dir", store->dir()}, {"error", rounds.status().message()}});
        continue;
      }
      offered.insert(offered.end(), rounds->begin(), rounds->end());
    }
    std::sort(offered.rbegin(), offered.rend());
    offered.erase(std::unique(offered.begin(), offered.end()), offered.end());
    logger().Info(
        "checkpoints offered for recovery",
        {{"job_id", job_id},
         {"rounds", static_cast<unsigned>(offered.size())},
         {"newest", offered.empty() ? 0ull : static_cast<unsigned long long>(offered.front())}});
    absl::MutexLock lock(&mu_);
    offered_ = std::move(offered);
  }

  // Reported from now on: the plan `c` was trained under, for schedd to
  // start the recovery epoch under (no chunk_server: the even split).
  void ReportResumePlan(const v1::JobAssignment& a, const storage::Checkpoint& c) {
    v1::Policy p;
    const storage::CheckpointPlan& plan = c.plan;
    if (!plan.empty()) {
      for (uint32_t o : plan.chunk_server) p.add_chunk_server(o);
      for (const v1::JobMember& m : a.workers()) {
        if (m.rank() >= plan.worker_batch.size()) continue;  // schedd finds it missing
        v1::WorkerBatch* b = p.add_worker_batches();
        b->set_worker_node_id(m.node_id());
        b->set_batch_size(plan.worker_batch[m.rank()]);
        b->set_resume_samples(plan.worker_samples[m.rank()]);
      }
    }
    absl::MutexLock lock(&mu_);
    resume_plan_round_ = int64_t(c.round);
    resume_plan_ = std::move(p);
  }

  // The plan schedd started the epoch under is the one `c` records.
  static absl::Status CheckStartPlan(const v1::JobAssignment& a, const storage::Checkpoint& c) {
    const bool given = a.has_plan() && a.plan().version() == 1 &&
                       a.plan().recovery_epoch() == a.recovery_epoch() &&
                       a.plan().chunk_server_size() > 0;
    const std::vector<uint32_t>& mine = c.plan.chunk_server;
    const bool same = given ? std::equal(mine.begin(), mine.end(), a.plan().chunk_server().begin(),
                                         a.plan().chunk_server().end())
                            : c.plan.empty();
    if (same) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("resume from round ", c.round,
                     ": the epoch's plan is not the one this psd's checkpoint was trained under"));
  }

  // The checkpoint of `round` to resume from, from this psd's store or
  // else `adopted`; this psd's later rounds are removed (a history that
  // will not happen). Fails the job's part when it cannot be read (it
  // passed the checks when offered).
  absl::StatusOr<storage::Checkpoint> LoadCheckpoint(const std::string& job_id, uint32_t index,
                                                     uint64_t round,
                                                     storage::CheckpointStore* adopted) {
    storage::CheckpointStore* own = Store();
    absl::StatusOr<storage::Checkpoint> c =
        absl::NotFoundError(absl::StrCat("resume from round ", round, ": no checkpoint store"));
    if (own != nullptr) c = own->Read(job_id, index, round);
    if (!c.ok() && adopted != nullptr) c = adopted->Read(job_id, index, round);
    if (!c.ok()) {
      return absl::Status(c.status().code(),
                          absl::StrCat("resume from round ", round, ": ", c.status().message()));
    }
    if (own != nullptr) {
      if (absl::Status d = own->DeleteAfter(job_id, index, round); !d.ok()) {
        logger().Warn("later checkpoints not removed", {{"error", d.message()}});
      }
    }
    return c;
  }

  // init_from: checkpoint:JOB[@ROUND]: this psd's part of JOB's newest
  // valid checkpoint (or of ROUND) in its own store, for the new job to
  // start from, parameters and optimizer state. The new job must have the
  // same model, chunk_size and number of psds (in the same order): the
  // checkpoint's chunks must be this server's, or the job fails saying so.
  absl::StatusOr<storage::Checkpoint> InitCheckpoint(const std::string& init_from, uint32_t index) {
    const std::string what = init_from.substr(std::strlen(kCheckpointPrefix));
    const size_t at = what.find('@');
    const std::string job = what.substr(0, at);
    uint64_t round = 0;
    if (at != std::string::npos && !absl::SimpleAtoi(what.substr(at + 1), &round)) {
      return absl::InvalidArgumentError(
          absl::StrCat("init_from ", init_from, ": after @ comes a round number"));
    }
    if (psd_->config_.checkpoint_dir.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("init_from ", init_from, ": this psd has no checkpoint_dir"));
    }
    if (absl::Status s = OpenStore(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("init_from ", init_from, ": ", s.message()));
    }
    absl::StatusOr<storage::Checkpoint> c = at == std::string::npos
                                                ? Store()->ReadNewest(job, index)
                                                : Store()->Read(job, index, round);
    if (!c.ok()) {
      return absl::Status(
          c.status().code(),
          absl::StrCat("init_from ", init_from, ": no usable checkpoint of server ", index,
                       " here (", c.status().message(),
                       "); a job starts from a checkpoint on the psds that wrote it"));
    }
    return c;
  }

  // For a part this psd adopted: the lost psd's store, read only. It must
  // be readable here (shared storage), or the job fails saying so.
  absl::StatusOr<std::unique_ptr<storage::CheckpointStore>> OpenAdopted(const v1::JobMember& me) {
    if (me.checkpoint_dir().empty() || me.checkpoint_dir() == OwnCheckpointDir()) {
      return std::unique_ptr<storage::CheckpointStore>();
    }
    storage::CheckpointStoreConfig sc;
    sc.dir = me.checkpoint_dir();
    sc.read_only = true;
    absl::StatusOr<std::unique_ptr<storage::CheckpointStore>> store =
        storage::CheckpointStore::Open(sc);
    if (!store.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this psd adopts the part of a psd that did not come back, but cannot read its "
          "checkpoints at ",
          sc.dir, " (", store.status().message(),
          "): adoption needs checkpoint_dir on storage every psd can read (docs/operations.md)"));
    }
    logger().Info("adopting a part from another psd's checkpoints", {{"dir", sc.dir}});
    return store;
  }

  // Earlier jobs' checkpoints beyond checkpoint_keep_jobs go, so that a
  // psd running job after job does not fill its disk.
  void PruneJobs(const std::string& current) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto removed =
        store_->KeepJobs(static_cast<size_t>(psd_->config_.checkpoint_keep_jobs), current);
    if (!removed.ok()) {
      logger().Warn("old checkpoints not removed", {{"error", removed.status().message()}});
      return;
    }
    for (const std::string& id : *removed) {
      logger().Info("checkpoints of an earlier job removed", {{"job_id", id}});
    }
  }

  void UpdateCheckpointMetrics() {
    storage::CheckpointWriterStats w;
    {
      absl::MutexLock lock(&mu_);
      if (writer_ == nullptr) return;
      w = writer_->stats();
    }
    AdvanceCounter(checkpoints_written_, w.written, &last_checkpoints_.written);
    AdvanceCounter(checkpoints_failed_, w.failed, &last_checkpoints_.failed);
    AdvanceCounter(checkpoints_skipped_, w.skipped_busy, &last_checkpoints_.skipped_busy);
    if (w.failed > last_failure_logged_) {
      last_failure_logged_ = w.failed;
      logger().Error("checkpoint write failed; training goes on", {{"error", w.last_error}});
    }
    if (w.last_unix_ms == 0) return;
    checkpoint_round_->Set(double(w.last_round));
    checkpoint_bytes_->Set(double(w.last_bytes));
    checkpoint_write_seconds_->Set(w.last_write_ms / 1e3);
    checkpoint_unix_seconds_->Set(double(w.last_unix_ms) / 1e3);
  }

  // schedd's plan (docs/plan.md) to server 0, which picks when it starts.
  static absl::Status ProposePlan(ps::ShardServer& server, const v1::JobAssignment& a,
                                  const ps::ShardServerConfig& c) {
    const v1::Policy& plan = a.plan();
    ASSIGN_OR_RETURN(ps::ChunkLayout layout, ps::ChunkLayout::Create(c.num_params, c.chunk_floats));
    ASSIGN_OR_RETURN(ps::ChunkMap map,
                     ps::ChunkMap::FromOwners(layout, c.num_servers,
                                              std::vector<uint32_t>(plan.chunk_server().begin(),
                                                                    plan.chunk_server().end()),
                                              plan.version()));
    // Batches by worker rank (none: the even split).
    std::vector<uint32_t> batch;
    if (plan.worker_batches_size() > 0) {
      std::map<std::string, uint32_t> by_node;
      for (const v1::WorkerBatch& b : plan.worker_batches()) {
        by_node[b.worker_node_id()] = b.batch_size();
      }
      batch.assign(a.workers_size(), 0);
      for (const v1::JobMember& m : a.workers()) {
        auto it = by_node.find(m.node_id());
        if (it == by_node.end() || m.rank() >= uint32_t(a.workers_size())) {
          return absl::InvalidArgumentError(
              absl::StrCat("plan ", plan.version(), ": no batch for worker ", m.node_id()));
        }
        batch[m.rank()] = it->second;
      }
    }
    return server.ProposePlan(map, std::move(batch), 0);
  }

  static absl::StatusOr<std::vector<transport::Peer>> LiveWorkers(const v1::JobAssignment& a) {
    return DataPeersOf(a.workers(), /*live_only=*/true);
  }

  Psd* const psd_;
  TransportMetrics data_metrics_;
  absl::Mutex mu_;
  ps::ShardServer* server_ ABSL_GUARDED_BY(mu_) = nullptr;
  ps::ShardServerStats final_ ABSL_GUARDED_BY(mu_);
  int64_t resume_plan_round_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none loaded
  v1::Policy resume_plan_ ABSL_GUARDED_BY(mu_);
  ps::ShardServerStats last_;  // agent thread only
  prometheus::Counter *rounds_complete_, *rounds_deadline_, *rounds_membership_, *stale_,
      *partial_pushes_, *bubble_bytes_;
  prometheus::Counter *plan_switches_, *chunks_sent_, *chunks_received_, *plan_stale_, *plan_ahead_,
      *plan_held_, *rounds_reopened_, *segments_streamed_, *segments_ahead_;
  prometheus::Gauge* plan_version_;
  prometheus::Family<prometheus::Gauge>* delivered_;
  prometheus::Gauge *iteration_, *contributors_, *round_seconds_, *aggregate_seconds_;
  prometheus::Histogram* round_hist_;
  // Checkpoints: the store and writer live as long as the daemon (opened
  // by the first job that asks).
  std::unique_ptr<storage::CheckpointStore> store_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<storage::CheckpointWriter> writer_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> offered_ ABSL_GUARDED_BY(mu_);  // OfferCheckpoints'
  storage::CheckpointWriterStats last_checkpoints_;     // agent thread only
  uint64_t last_failure_logged_ = 0;                    // agent thread only
  prometheus::Counter *checkpoints_written_, *checkpoints_failed_, *checkpoints_skipped_,
      *checkpoint_open_failed_, *checkpoints_invalid_;
  prometheus::Gauge *checkpoint_round_, *checkpoint_bytes_, *checkpoint_write_seconds_,
      *checkpoint_unix_seconds_, *snapshot_seconds_;
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
  artifacts_ = std::make_unique<ArtifactsService>(
      runtime_.get(), "", [this](const std::string& job_id, v1::ListCheckpointsResponse* out) {
        Jobs* jobs = jobs_view_.load();  // set once the runner exists (RPCs start first)
        if (jobs == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "starting");
        return jobs->ListCheckpoints(job_id, out);
      });
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
        return absl::StrCat(runtime_->node_id(), " holds a shard of the parameters of running job ",
                            job, ": draining it loses that shard and fails the job");
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

void Psd::Shutdown() {
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
