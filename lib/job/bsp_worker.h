// BspWorker: the trainer side of bulk-synchronous training (the heart of
// workerd). Each iteration t:
//   1. pull: wait until every server has delivered its chunks of parameters t
//      (servers push them when round t opens);
//   2. compute: forward/backward on this worker's ShardSampler batch t;
//   3. push: send each server the gradient of the chunks it owns.
// It ends when the final parameters (iteration = total) arrive. If this
// worker falls behind (a round closed at its deadline without it), it jumps
// to the newest parameters the servers sent; its stale pushes are refused.
//
// Plans (lib/ps/plan.h): which server owns which chunk is the plan server
// 0 sent the round's parameters under; server 0 announces each plan to
// this worker before it starts. A round is pulled once every server sent
// it under that plan: a flow of an older plan is refused and counted, one
// of a plan not yet announced here is held (bounded by the model's size)
// until the announcement comes. Pushes go by that plan and carry it.
//
// Threads: Run() on the caller's thread; the transport's thread delivers
// parameters under mu_. Stop() may be called from any thread.
#ifndef HETPS_LIB_JOB_BSP_WORKER_H_
#define HETPS_LIB_JOB_BSP_WORKER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/trace_log.h"
#include "lib/data/idx.h"
#include "lib/data/sampler.h"
#include "lib/job/job_spec.h"
#include "lib/ps/chunk_map.h"
#include "lib/ps/plan.h"
#include "lib/train/model.h"
#include "lib/transport/tcp_endpoint.h"

namespace hetps {

struct BspWorkerConfig {
  JobSpec job;
  uint32_t rank = 0;
  uint32_t workers = 1;
  std::vector<transport::Peer> servers;  // by server index
  transport::EndpointConfig endpoint;
  absl::Duration pull_timeout = absl::Seconds(60);  // no parameters at all: give up
  bool evaluate = true;                             // test-set evaluation (rank 0 usually)
  // One line per iteration (docs/tracing.md) when set; not owned, must
  // outlive the worker.
  TraceLog* trace = nullptr;
  std::string trace_node;  // the node id the lines name
  // Fault injection (workerd's compute_slowdown): compute takes this many
  // times as long; the worker idles for the difference. 1: off.
  double compute_slowdown = 1.0;
  // A recovery that resumes under the plan its checkpoint recorded
  // (docs/plan.md, "Recovery"): version 1 (every chunk's owner, every
  // worker's batch), and the samples this worker had drawn before the
  // resume round. Empty chunk_server: the even split, and ResumeAt's
  // iteration x batch_size drawn.
  ps::PlanBook::Start start_plan;
  uint64_t resume_samples = 0;
};

struct WorkerProgress {
  int64_t iteration = 0;  // iterations done
  int64_t total = 0;
  double loss = 0;
  double test_accuracy = -1;  // -1: not evaluated at this report
  double samples_per_s = 0;
  int64_t batch = 0;     // samples in this worker's latest iteration
  int64_t samples = 0;   // samples computed, cumulative (with compute_s: its speed)
  double compute_s = 0;  // cumulative time breakdown
  double push_s = 0;
  double pull_wait_s = 0;  // waiting for parameters, after the first ones
  // Waiting for the initial parameters: the job's start-up (every server
  // given its part and broadcasting), not a cost of training. Kept out of
  // pull_wait_s, as DDP's constructor syncs its initial parameters before
  // its training loop starts.
  double start_wait_s = 0;
  int64_t skipped = 0;  // iterations jumped over after falling behind
};

struct WorkerPlanStats {
  uint32_t version = 1;     // the plan of the latest iteration pulled
  int64_t stale_plan = 0;   // parameter flows refused: an older plan than the round's
  int64_t held_flows = 0;   // accepted before their plan was announced here
  int64_t bad_packets = 0;  // chunks a server does not own under the flow's plan
};

class BspWorker : public transport::Receiver {
 public:
  // Loads the datasets, builds the model on `backend` (not owned; must
  // outlive the worker) and binds its own endpoint from config.endpoint, or
  // uses `shared` (a daemon's long-lived endpoint, not owned): the caller
  // then routes the endpoint's Receiver callbacks to this worker (e.g. with
  // a ReceiverMux) and detaches it before destroying the worker.
  static absl::StatusOr<std::unique_ptr<BspWorker>> Create(const BspWorkerConfig& config,
                                                           train::Backend* backend,
                                                           transport::Transport* shared = nullptr);
  ~BspWorker() override;

  transport::Peer local() const { return endpoint_->local(); }
  transport::EndpointStats endpoint_stats() const { return endpoint_->GetStats(); }
  // Servers are given later when they start after the workers.
  void SetServers(const std::vector<transport::Peer>& servers);

  // Before Run, when the job resumes from a checkpoint: training starts at
  // `iteration`, and parameters of earlier rounds are refused.
  void ResumeAt(int64_t iteration);

  // Trains to the end. `progress` is called after every iteration that
  // evaluates and every `report_every` iterations.
  absl::Status Run(int64_t report_every,
                   const std::function<void(const WorkerProgress&)>& progress);
  void Stop();
  // The parameters after Run: the final ones the servers sent.
  const std::vector<float>& params() const { return params_; }
  const train::EvalResult& final_eval() const { return final_eval_; }
  WorkerPlanStats plan_stats() const;
  // Samples computed and compute seconds so far, updated every iteration
  // (progress reports come every report_every; WLBS needs fresher speeds).
  std::pair<int64_t, double> ComputeDone() const;
  int64_t total_iterations() const { return total_; }

  // transport::Receiver (endpoint thread)
  transport::DropReason AcceptFlow(const transport::Peer& from,
                                   const transport::Header& first) override;
  void OnData(const transport::Peer& from, const transport::Header& h,
              const uint8_t* payload) override;
  void OnFlowDone(const transport::Peer& from, const transport::FlowResult& result) override;

 private:
  explicit BspWorker(const BspWorkerConfig& config);
  int ServerIndex(const transport::Peer& p) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // -1: unknown

  BspWorkerConfig config_;
  ImageDataset train_, test_;
  std::unique_ptr<train::Model> model_;
  std::unique_ptr<ShardSampler> sampler_;
  std::unique_ptr<ps::ChunkLayout> layout_;
  std::unique_ptr<transport::Transport> own_endpoint_;
  transport::Transport* endpoint_ = nullptr;  // own_endpoint_ or the shared one
  std::vector<float> params_, grad_;
  train::EvalResult final_eval_;
  int64_t total_ = 0;
  std::atomic<bool> stop_{false};
  int64_t start_ = 0;    // ResumeAt's iteration
  ps::PlanShape shape_;  // the job's, for its plans

  mutable absl::Mutex live_mu_;
  std::pair<int64_t, double> compute_done_ ABSL_GUARDED_BY(live_mu_);

  mutable absl::Mutex mu_;
  absl::CondVar arrived_;
  std::vector<transport::Peer> servers_ ABSL_GUARDED_BY(mu_);
  std::vector<float> incoming_ ABSL_GUARDED_BY(mu_);
  // Per server: the newest iteration whose parameters fully arrived, and
  // the iteration being received.
  std::vector<int64_t> complete_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> receiving_ ABSL_GUARDED_BY(mu_);
  // Per server: the plan its newest complete flow was sent under.
  std::vector<uint32_t> complete_plan_ ABSL_GUARDED_BY(mu_);
  // The plans this worker knows (null until it knows its servers), and an
  // announcement being received from server 0.
  std::unique_ptr<ps::PlanBook> book_ ABSL_GUARDED_BY(mu_);
  absl::Status book_error_ ABSL_GUARDED_BY(mu_);  // why there is none (start_plan)
  std::unique_ptr<ps::PlanReceiver> announcements_in_ ABSL_GUARDED_BY(mu_);
  uint64_t pull_packets_max_ = 0;  // a flow of every chunk
  WorkerPlanStats plan_stats_ ABSL_GUARDED_BY(mu_);
  // Per server: the newest round whose segments are coming, under which
  // plan, a chunk of each segment flow that came whole, and the last
  // one's result. It is complete (complete_) once the plan is known and
  // every segment of the server came under it.
  struct Pull {
    int64_t iteration = -1;
    uint32_t plan = 0;
    std::vector<uint32_t> chunks;
    transport::FlowResult result;
  };
  std::vector<Pull> pulls_ ABSL_GUARDED_BY(mu_);
  // Parameter flows open: (server, flow id) -> the chunk of its first
  // packet, which names its segment.
  absl::flat_hash_map<std::pair<int, uint32_t>, uint32_t> flow_chunk_ ABSL_GUARDED_BY(mu_);
  void TryComplete(int s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Per server: its latest parameter flow's FlowResult (traces).
  std::vector<transport::FlowResult> pulled_ ABSL_GUARDED_BY(mu_);
  uint64_t bad_packets_ ABSL_GUARDED_BY(mu_) = 0;
  // This iteration's pushes, for Stop to cancel (a push to a server that
  // is gone would otherwise hold Run for up to the round deadline).
  std::vector<std::shared_ptr<transport::SendHandle>> in_flight_ ABSL_GUARDED_BY(mu_);
  // params_, incoming_ and grad_ page-locked for the backend's copies (a
  // GPU's): last, so released before the buffers go.
  std::vector<train::HostPin> pins_;
};

}  // namespace hetps

#endif  // HETPS_LIB_JOB_BSP_WORKER_H_
