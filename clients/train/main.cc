// hetps-train: runs a job spec in one process (the single-process reference
// for the cluster), printing progress; --save writes the trained model as a
// safetensors file (lib/job/model_file.h). --eval reports the test accuracy
// of a saved model instead. Exit codes: 0 done, 2 bad arguments, job, data
// or model file, 1 training failed.
//
// usage: hetps-train JOB.yaml [--workers N] [--report-every N] [--save FILE]
//        hetps-train --eval FILE [--dataset DIR]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "lib/data/idx.h"
#include "lib/job/job_spec.h"
#include "lib/job/local_training.h"
#include "lib/job/model_file.h"
#include "lib/train/backend.h"

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "hetps-train: %s\nusage: hetps-train JOB.yaml [--workers N] [--report-every N] "
               "[--save FILE]\n       hetps-train --eval FILE [--dataset DIR]\n",
               why);
  return 2;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "hetps-train: %s\n", std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument || s.code() == absl::StatusCode::kNotFound
             ? 2
             : 1;
}

// The test accuracy of a saved model, on every test image of its dataset.
int Evaluate(const std::string& path, std::string dataset) {
  auto file = hetps::ReadModelFile(path);  // read once: metadata and tensors
  if (!file.ok()) return Fail(file.status());
  const hetps::ModelFileInfo* info = &file->info;
  if (dataset.empty()) dataset = info->dataset;
  auto spec = hetps::train::BuiltinModel(info->model);
  if (!spec.ok()) return Fail(spec.status());
  auto test = hetps::LoadFashionMnist(dataset, false);
  if (!test.ok()) return Fail(test.status());
  std::unique_ptr<hetps::train::Backend> cpu = hetps::train::NewCpuBackend();
  auto model = hetps::train::Model::Create(*spec, cpu.get(), 256);
  if (!model.ok()) return Fail(model.status());
  auto params = hetps::ModelParams(file->tensors, **model, path);
  if (!params.ok()) return Fail(params.status());
  absl::Status s = (*model)->SetParameters(*params);
  if (!s.ok()) return Fail(s);
  auto eval = (*model)->Evaluate(test->pixels.data(), test->labels.data(), test->size());
  if (!eval.ok()) return Fail(eval.status());
  std::printf("hetps-train: %s (model %s, job %s): test accuracy %.4f, loss %.4f on %zu samples\n",
              path.c_str(), info->model.c_str(), info->job.c_str(), eval->accuracy, eval->loss,
              eval->samples);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string job_path, save_path, eval_path, dataset;
  uint32_t workers = 1;
  int64_t report_every = 100;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (a == "--workers") {
      const char* v = value("--workers");
      if (v == nullptr || !absl::SimpleAtoi(v, &workers)) return Usage("--workers needs a number");
    } else if (a == "--report-every") {
      const char* v = value("--report-every");
      if (v == nullptr || !absl::SimpleAtoi(v, &report_every) || report_every < 0) {
        return Usage("--report-every needs a number >= 0");
      }
    } else if (a == "--save" || a == "--eval" || a == "--dataset") {
      const char* v = value(a.c_str());
      if (v == nullptr || *v == '\0') return Usage((a + " needs a path").c_str());
      (a == "--save" ? save_path : a == "--eval" ? eval_path : dataset) = v;
    } else if (a == "-h" || a == "--help") {
      return Usage("trains a job in one process");
    } else if (!a.empty() && a[0] == '-') {
      return Usage(("unknown flag " + a).c_str());
    } else if (job_path.empty()) {
      job_path = a;
    } else {
      return Usage("more than one job file");
    }
  }
  if (!eval_path.empty()) {
    if (!job_path.empty() || !save_path.empty()) return Usage("--eval takes no job file");
    return Evaluate(eval_path, dataset);
  }
  if (job_path.empty()) return Usage("no job file");
  auto job = hetps::ParseJobSpecFile(job_path);
  if (!job.ok()) {
    std::fprintf(stderr, "hetps-train: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  std::printf("hetps-train: job %s, model %s, %u worker(s) x batch %lld, optimizer %s lr %g\n",
              job->name.c_str(), job->model.c_str(), workers,
              static_cast<long long>(job->batch_size), job->optimizer.c_str(), job->learning_rate);
  std::fflush(stdout);
  auto result =
      hetps::RunLocalTraining(*job, workers, report_every, [](const hetps::TrainingProgress& p) {
        std::printf("iter %6lld/%lld  epoch %5.2f  loss %.4f", static_cast<long long>(p.iteration),
                    static_cast<long long>(p.total), p.epoch, p.loss);
        if (p.test_accuracy >= 0) {
          std::printf("  test_acc %.4f  test_loss %.4f", p.test_accuracy, p.test_loss);
        }
        std::printf("  %.0f samples/s  %.1fs  [%s]\n", p.samples_per_s, p.elapsed_s,
                    p.backend.c_str());
        std::fflush(stdout);
      });
  if (!result.ok()) {
    std::fprintf(stderr, "hetps-train: %s\n", std::string(result.status().message()).c_str());
    return result.status().code() == absl::StatusCode::kInvalidArgument ||
                   result.status().code() == absl::StatusCode::kNotFound
               ? 2
               : 1;
  }
  std::printf("hetps-train: done, %lld iterations, test accuracy %.4f on %zu samples\n",
              static_cast<long long>(result->iterations), result->final_eval.accuracy,
              result->final_eval.samples);
  if (!save_path.empty()) {
    auto spec = hetps::train::BuiltinModel(job->model);
    if (!spec.ok()) return Fail(spec.status());
    std::unique_ptr<hetps::train::Backend> cpu = hetps::train::NewCpuBackend();
    auto model = hetps::train::Model::Create(*spec, cpu.get(), 1);
    if (!model.ok()) return Fail(model.status());
    absl::Status s = hetps::SaveModelFile(save_path, **model, result->params,
                                          {job->model, job->dataset, job->name});
    if (!s.ok()) return Fail(s);
    std::printf("hetps-train: model saved to %s\n", save_path.c_str());
  }
  return 0;
}
