// Single-process reference training: runs a job's BSP iterations as a
// cluster of `workers` workers would, but in one process, on one combined
// batch per iteration (each worker's ShardSampler batch, concatenated). The
// equivalence tests compare the cluster against it, and `hetps-train` uses
// it to check a job spec on one machine.
#ifndef HETPS_LIB_JOB_LOCAL_TRAINING_H_
#define HETPS_LIB_JOB_LOCAL_TRAINING_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/job/job_spec.h"
#include "lib/train/model.h"

namespace hetps {

struct TrainingProgress {
  int64_t iteration = 0;  // iterations done
  int64_t total = 0;
  double epoch = 0;           // passes over each worker's shard so far
  double loss = 0;            // mean training loss since the last report
  double test_accuracy = -1;  // -1 when this report has no evaluation
  double test_loss = -1;
  double samples_per_s = 0;  // since the last report
  double elapsed_s = 0;
  std::string backend;
};

struct LocalTrainingResult {
  std::vector<float> params;
  train::EvalResult final_eval;
  int64_t iterations = 0;
};

// Calls `progress` every `report_every` iterations (0: only at evaluations)
// and at every evaluation (job.eval_every, and the end).
absl::StatusOr<LocalTrainingResult> RunLocalTraining(
    const JobSpec& job, uint32_t workers, int64_t report_every,
    const std::function<void(const TrainingProgress&)>& progress);

}  // namespace hetps

#endif  // HETPS_LIB_JOB_LOCAL_TRAINING_H_
