#include "lib/job/local_training.h"

#include <catch2/catch.hpp>

namespace hetps {
namespace {

TEST_CASE("the default mlp job reaches 85% test accuracy in one process", "[training][data]") {
  auto job = ParseJobSpec(
      "model: mlp\nepochs: 4\nbatch_size: 64\nlearning_rate: 0.05\nmomentum: 0.9\n"
      "eval_every: 0\nbackend: cpu\n",
      "test job");
  REQUIRE(job.ok());
  int reports = 0;
  double last_loss = 0;
  auto r = RunLocalTraining(*job, 2, 500, [&](const TrainingProgress& p) {
    ++reports;
    last_loss = p.loss;
    CHECK(p.iteration <= p.total);
  });
  REQUIRE(r.ok());
  INFO("test accuracy " << r->final_eval.accuracy << ", last loss " << last_loss);
  CHECK(r->iterations == 4 * 469);  // ceil(30000 / 64) per epoch per worker
  CHECK(r->final_eval.samples == 10000);
  CHECK(r->final_eval.accuracy >= 0.85);
  CHECK(reports >= 2);
}

TEST_CASE("local training reports data and argument errors", "[training]") {
  auto job = ParseJobSpec("iterations: 1\ndataset: /nonexistent\n", "test job");
  REQUIRE(job.ok());
  auto r = RunLocalTraining(*job, 1, 0, nullptr);
  CHECK(!r.ok());
  CHECK(r.status().message().find("/nonexistent") != std::string::npos);
  CHECK(!RunLocalTraining(*job, 0, 0, nullptr).ok());
}

}  // namespace
}  // namespace hetps
