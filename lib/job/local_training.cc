#include "lib/job/local_training.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/data/idx.h"
#include "lib/data/sampler.h"
#include "lib/job/model_file.h"
#include "lib/train/optimizer.h"

namespace hetps {

absl::StatusOr<LocalTrainingResult> RunLocalTraining(
    const JobSpec& job, uint32_t workers, int64_t report_every,
    const std::function<void(const TrainingProgress&)>& progress) {
  if (workers == 0 || workers > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("workers = ", workers, " outside [1, 1024]"));
  }
  ASSIGN_OR_RETURN(ImageDataset train, LoadFashionMnist(job.dataset, true));
  ASSIGN_OR_RETURN(ImageDataset test, LoadFashionMnist(job.dataset, false));
  ASSIGN_OR_RETURN(train::BackendKind kind, train::ParseBackendKind(job.backend));
  ASSIGN_OR_RETURN(std::unique_ptr<train::Backend> backend, train::CreateBackend(kind));
  ASSIGN_OR_RETURN(train::ModelSpec spec, train::BuiltinModel(job.model));
  const int combined = static_cast<int>(job.batch_size * workers);
  ASSIGN_OR_RETURN(std::unique_ptr<train::Model> model,
                   train::Model::Create(spec, backend.get(), combined));
  if (model->input_size() != train.pixels_per_image()) {
    return absl::InvalidArgumentError(absl::StrCat("model ", job.model, " takes ",
                                                   model->input_size(), " inputs, dataset has ",
                                                   train.pixels_per_image()));
  }

  std::vector<ShardSampler> samplers;
  for (uint32_t w = 0; w < workers; ++w) {
    samplers.emplace_back(train.size(), w, workers, job.seed,
                          static_cast<uint32_t>(job.batch_size));
  }
  LocalTrainingResult result;
  if (job.init_from.empty()) {
    result.params = model->InitialParameters(job.seed);
  } else if (absl::StartsWith(job.init_from, "checkpoint:")) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_from ", job.init_from,
                     ": a checkpoint is read by the psds that wrote it; outside a cluster, "
                     "start from a model file (psctl job export)"));
  } else {
    ASSIGN_OR_RETURN(result.params, LoadModelFile(job.init_from, *model));
  }
  std::vector<float> grad(result.params.size());
  const size_t px = train.pixels_per_image();
  std::vector<float> x(static_cast<size_t>(combined) * px);
  std::vector<uint8_t> y(combined);
  const int64_t total = job.TotalIterations(train.size(), workers);
  train::OptimizerConfig opt_config = job.optimizer_config();
  opt_config.total_steps = static_cast<uint64_t>(total);
  train::OptimizerState opt(opt_config, result.params.size());
  const size_t eval_n = std::min<size_t>(job.eval_samples, test.size());

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last = start;
  double loss_sum = 0;
  int64_t loss_count = 0, last_iter = 0;
  for (int64_t it = 0; it < total; ++it) {
    size_t k = 0;
    for (auto& s : samplers) {
      for (uint32_t idx : s.Batch(it)) {
        std::copy_n(train.pixels.begin() + size_t(idx) * px, px, x.begin() + k * px);
        y[k++] = train.labels[idx];
      }
    }
    RETURN_IF_ERROR(model->SetParameters(result.params));
    ASSIGN_OR_RETURN(float loss,
                     model->ComputeGradients(x.data(), y.data(), combined, absl::MakeSpan(grad)));
    opt.Apply(absl::MakeSpan(result.params), grad);
    loss_sum += loss;
    ++loss_count;
    const int64_t done = it + 1;
    const bool eval = done == total || (job.eval_every > 0 && done % job.eval_every == 0);
    const bool report = eval || (report_every > 0 && done % report_every == 0);
    if (!report) continue;
    TrainingProgress p;
    p.iteration = done;
    p.total = total;
    p.epoch = double(done) * job.batch_size / std::max<size_t>(1, samplers[0].shard_size());
    p.loss = loss_sum / loss_count;
    p.backend = backend->name();
    // Throughput of training alone: measured before the evaluation.
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - last).count();
    p.samples_per_s = dt > 0 ? double(done - last_iter) * combined / dt : 0;
    if (eval) {
      RETURN_IF_ERROR(model->SetParameters(result.params));
      ASSIGN_OR_RETURN(result.final_eval,
                       model->Evaluate(test.pixels.data(), test.labels.data(), eval_n));
      p.test_accuracy = result.final_eval.accuracy;
      p.test_loss = result.final_eval.loss;
    }
    p.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (progress) progress(p);
    last = Clock::now();
    last_iter = done;
    loss_sum = 0;
    loss_count = 0;
  }
  result.iterations = total;
  return result;
}

}  // namespace hetps
