// hetps-train: runs a job spec in one process (the single-process reference
// for the cluster), printing progress. Exit codes: 0 done, 2 bad arguments,
// job or data, 1 training failed.
//
// usage: hetps-train JOB.yaml [--workers N] [--report-every N]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "lib/job/job_spec.h"
#include "lib/job/local_training.h"

namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "hetps-train: %s\nusage: hetps-train JOB.yaml [--workers N] [--report-every N]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string job_path;
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
  return 0;
}
