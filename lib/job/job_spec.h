// A training job as an operator writes it: a flat YAML mapping parsed with
// the same ConfigSchema as the daemon configs (unknown keys, wrong types and
// out-of-range values are errors naming the key and line), then checked
// across fields. The validated text travels unchanged from psctl through
// schedd to every daemon, so they all train the same job.
//
// Pure apart from ParseJobSpecFile's read. Values are plain structs.
#ifndef HETPS_LIB_JOB_JOB_SPEC_H_
#define HETPS_LIB_JOB_JOB_SPEC_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/train/optimizer.h"
#include "lib/transport/early_close.h"

namespace hetps {

struct JobSpec {
  std::string name = "fashion-mnist-mlp";
  std::string model = "mlp";
  std::string dataset = "/usr/share/datasets/fashion-mnist";
  std::string optimizer = "sgd";
  double learning_rate = 0.05;
  std::string lr_schedule = "constant";  // constant | cosine (to 0 over the job)
  double momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  int64_t batch_size = 64;  // per worker
  int64_t iterations = 0;   // exactly one of iterations and epochs is > 0
  int64_t epochs = 0;
  int64_t chunk_size = 16384;  // floats per parameter chunk
  // Parameter bytes per broadcast segment (docs/plan.md, "Segments"); 0:
  // one flow per psd. 128 KiB: twice the default probe_chunk_bytes, so a
  // segment is long enough to measure its link.
  int64_t segment_bytes = 128 << 10;
  int64_t seed = 1;
  int64_t eval_every = 200;          // iterations between test-set evaluations; 0 = only at the end
  int64_t eval_samples = 10000;      // test samples per evaluation (first N of the test split)
  int64_t round_deadline_ms = 5000;  // a BSP round closes with whoever arrived by then
  // Every psd checkpoints its part every this many rounds (into its
  // checkpoint_dir; a psd without one writes none). 0: no checkpoints.
  int64_t checkpoint_every_rounds = 0;
  // With checkpoints, a job whose psd is lost waits this long (RECOVERING)
  // for it to come back, then every member resumes from the newest round
  // all psds have a checkpoint of. 0: the job fails at once.
  int64_t recover_timeout_s = 60;
  // A model file (hetps-train --save; lib/job/model_file.h) to start from
  // instead of the seed's initial parameters; read by every psd, so it
  // must be on a path each of them can read. Empty: from the seed.
  std::string init_from;
  std::string backend = "auto";  // auto | cpu | cuda
  // Data transport: reliable (UDP, every packet), ltp (loss-tolerant
  // pushes: Early Close, bubble-filling, unbiased aggregation; pull is always
  // reliable) or tcp (kernel TCP with tcp_congestion: the baseline).
  std::string transport = "reliable";
  std::string tcp_congestion = "default";  // default | cubic | bbr | reno
  double ltp_min_delivered = 0.8;          // Early Close: fraction needed after the LT threshold
  int64_t ltp_slack_ms = 30;               // C: deadline = max(LT) + C (30 datacenter, 100 WAN)
  double ltp_lt_factor = 1.5;              // initial LT = factor x RTprop + size / BtlBw
  int64_t ltp_lt_fixed_ms = 0;             // > 0: fixed LT instead of the measured one
  // Load distribution over the psds (docs/plan.md, docs/policy.md):
  // average (the even split, fixed), or a plan schedd recomputes from the
  // measured links every update_time_s: elastic (shares follow
  // throughput), adlb-alg1 (ADLB's Algorithm 1) or adlb (the exact optimum).
  std::string load_policy = "average";
  int64_t update_time_s = 10;  // UPDATE_TIME: seconds between policy decisions (MeasureWindowMs)
  double update_rate = 0.1;    // UPDATE_RATE: a plan is issued when this much of it changed
  double report_rate = 0.1;    // REPORT_RATE: a link is reported again when it moved this much
  int64_t probe_chunk_bytes = 64 << 10;  // PROBE_CHUNK_SIZE: smaller flows are not probes
  int64_t probe_chunk_num = 4;           // PROBE_CHUNK_NUM: probes per link estimate (the largest)
  int64_t plan_lead_rounds = 1;          // a plan starts this many rounds after psd 0 announces it
  // Batch per worker (docs/plan.md): equal (batch_size each, fixed), or
  // wlbs: schedd splits the global batch (workers x batch_size) in
  // proportion to each worker's measured compute speed, each at most
  // kWlbsSpread x batch_size.
  std::string batch_policy = "equal";
  static constexpr int64_t kWlbsSpread = 4;
  bool adaptive() const { return load_policy != "average" || batch_policy == "wlbs"; }
  bool load_adaptive() const { return load_policy != "average"; }
  // The most samples one of `workers` workers may be given per iteration.
  int64_t BatchMax(uint32_t workers) const {
    return batch_policy == "wlbs" ? std::min<int64_t>(workers, kWlbsSpread) * batch_size
                                  : batch_size;
  }

  // Chunks per segment (ps::PlanShape::segment_chunks): as many whole
  // chunks as fit in segment_bytes, at least one; 0 without segments.
  uint32_t SegmentChunks() const {
    if (segment_bytes <= 0) return 0;
    return static_cast<uint32_t>(
        std::max<int64_t>(1, segment_bytes / (chunk_size * int64_t(sizeof(float)))));
  }

  bool loss_tolerant() const { return transport == "ltp"; }
  // TCP_CONGESTION name for the tcp transport ("" = the kernel default).
  std::string tcp_congestion_name() const;
  transport::EarlyCloseConfig early_close() const;

  // total_steps is left 0: whoever knows the job's iterations sets it.
  train::OptimizerConfig optimizer_config() const;
  // Iterations the job runs for `train_samples` training samples split over
  // `workers` workers (epochs are counted on each worker's shard).
  int64_t TotalIterations(uint64_t train_samples, uint32_t workers) const;
};

// How far back link estimates and host throughputs reach for a job of
// this update period (docs/awareness.md): half of it, at least 2 s, at
// most all of it. A drop shows once the faster readings before it are
// this old; a map waits a whole period of readings, so longer would only
// hold a host's old rate longer.
int64_t MeasureWindowMs(int64_t update_time_ms);

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view yaml, absl::string_view origin);
absl::StatusOr<JobSpec> ParseJobSpecFile(const std::string& path);
// The spec as YAML that ParseJobSpec reads back to an equal spec.
std::string JobSpecToYaml(const JobSpec& spec);

}  // namespace hetps

#endif  // HETPS_LIB_JOB_JOB_SPEC_H_
