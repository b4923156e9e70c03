#include "lib/job/job_spec.h"

#include <catch2/catch.hpp>

namespace hetps {
namespace {

TEST_CASE("readings reach back half an update period, 2 s at least", "[job]") {
  CHECK(MeasureWindowMs(1000) == 1000);
  CHECK(MeasureWindowMs(2000) == 2000);
  CHECK(MeasureWindowMs(3000) == 2000);
  CHECK(MeasureWindowMs(5000) == 2500);
  CHECK(MeasureWindowMs(10000) == 5000);
}

TEST_CASE("a minimal job gets the documented defaults", "[job]") {
  auto j = ParseJobSpec("iterations: 100\n", "job.yaml");
  REQUIRE(j.ok());
  CHECK(j->model == "mlp");
  CHECK(j->batch_size == 64);
  CHECK(j->optimizer_config().kind == train::OptimizerConfig::Kind::kSgd);
  CHECK(j->optimizer_config().schedule == train::OptimizerConfig::Schedule::kConstant);
  CHECK(j->TotalIterations(60000, 2) == 100);
  // Segments of 128 KiB: 2 chunks of 16384 floats.
  CHECK(j->segment_bytes == 128 << 10);
  CHECK(j->SegmentChunks() == 2);
}

TEST_CASE("segment_bytes: whole chunks, at least one; 0 turns segments off", "[job]") {
  auto j = ParseJobSpec("iterations: 1\nchunk_size: 4096\nsegment_bytes: 65536\n", "job.yaml");
  REQUIRE(j.ok());
  CHECK(j->SegmentChunks() == 4);
  j->segment_bytes = 70000;  // 4.27 chunks
  CHECK(j->SegmentChunks() == 4);
  j->segment_bytes = 1000;  // less than a chunk
  CHECK(j->SegmentChunks() == 1);
  j->segment_bytes = 0;
  CHECK(j->SegmentChunks() == 0);
  CHECK(!ParseJobSpec("iterations: 1\nsegment_bytes: -1\n", "job.yaml").ok());
}

TEST_CASE("lr_schedule: cosine parses, anything else is named in the error", "[job]") {
  auto j = ParseJobSpec("iterations: 10\nlr_schedule: cosine\n", "job.yaml");
  REQUIRE(j.ok());
  CHECK(j->optimizer_config().schedule == train::OptimizerConfig::Schedule::kCosine);
  CHECK(ParseJobSpec(JobSpecToYaml(*j), "again").value().lr_schedule == "cosine");
  auto bad = ParseJobSpec("iterations: 10\nlr_schedule: linear\n", "job.yaml");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("lr_schedule") != std::string::npos);
}

TEST_CASE("epochs count iterations over each worker's shard", "[job]") {
  auto j = ParseJobSpec("epochs: 2\nbatch_size: 100\n", "job.yaml");
  REQUIRE(j.ok());
  CHECK(j->TotalIterations(60000, 2) == 600);   // 30000 / 100 * 2
  CHECK(j->TotalIterations(60001, 1) == 1202);  // a partial last batch counts
}

TEST_CASE("transport and the Early Close constants", "[job][ltp]") {
  auto def = ParseJobSpec("iterations: 1\n", "job.yaml");
  REQUIRE(def.ok());
  CHECK(def->transport == "reliable");
  CHECK(!def->loss_tolerant());
  auto j = ParseJobSpec(
      "iterations: 1\ntransport: ltp\nltp_min_delivered: 0.9\nltp_slack_ms: 100\n"
      "ltp_lt_factor: 2\nltp_lt_fixed_ms: 7\n",
      "job.yaml");
  REQUIRE(j.ok());
  CHECK(j->loss_tolerant());
  const transport::EarlyCloseConfig ec = j->early_close();
  CHECK(ec.min_fraction == 0.9);
  CHECK(ec.slack_us == 100'000);
  CHECK(ec.lt_rtprop_factor == 2);
  CHECK(ec.lt_fixed_us == 7000);
  CHECK(transport::ValidateEarlyCloseConfig(ec).ok());
  // Kernel TCP with a chosen congestion control; unknown ones refused.
  auto tcp = ParseJobSpec("iterations: 1\ntransport: tcp\ntcp_congestion: cubic\n", "job.yaml");
  REQUIRE(tcp.ok());
  CHECK(!tcp->loss_tolerant());
  CHECK(tcp->tcp_congestion_name() == "cubic");
  CHECK(ParseJobSpec("iterations: 1\n", "job.yaml")->tcp_congestion_name().empty());
  auto quic = ParseJobSpec("iterations: 1\ntransport: quic\n", "job.yaml");
  REQUIRE(!quic.ok());
  CHECK(quic.status().message().find("transport") != std::string::npos);
  auto vegas = ParseJobSpec("iterations: 1\ntcp_congestion: vegas\n", "job.yaml");
  REQUIRE(!vegas.ok());
  CHECK(vegas.status().message().find("tcp_congestion") != std::string::npos);
  auto zero = ParseJobSpec("iterations: 1\nltp_min_delivered: 0\n", "job.yaml");
  REQUIRE(!zero.ok());
  CHECK(zero.status().message().find("ltp_min_delivered") != std::string::npos);
  // The spec's YAML round-trips the new keys.
  auto back = ParseJobSpec(JobSpecToYaml(*j), "round-trip");
  REQUIRE(back.ok());
  CHECK(back->transport == "ltp");
  CHECK(back->ltp_lt_fixed_ms == 7);
  auto tcp_back = ParseJobSpec(JobSpecToYaml(*tcp), "round-trip");
  REQUIRE(tcp_back.ok());
  CHECK(tcp_back->transport == "tcp");
  CHECK(tcp_back->tcp_congestion == "cubic");
}

TEST_CASE("bad jobs are errors naming the key", "[job]") {
  auto msg = [](const char* yaml) {
    auto j = ParseJobSpec(yaml, "job.yaml");
    return j.ok() ? std::string("ok") : std::string(j.status().message());
  };
  CHECK(msg("iterations: 10\nmodel: resnet\n").find("model") != std::string::npos);
  CHECK(msg("iterations: 10\nlearning_rat: 0.1\n").find("unknown key 'learning_rat'") !=
        std::string::npos);
  CHECK(msg("iterations: 10\nbatch_size: 0\n").find("batch_size") != std::string::npos);
  CHECK(msg("iterations: ten\n").find("iterations") != std::string::npos);
  CHECK(msg("model: mlp\n").find("exactly one of 'iterations' and 'epochs'") != std::string::npos);
  CHECK(msg("iterations: 5\nepochs: 1\n").find("both are set") != std::string::npos);
  CHECK(msg("iterations: 5\noptimizer: lbfgs\n").find("optimizer") != std::string::npos);
  CHECK(msg("iterations: 5\nname: \"\"\n").find("'name'") != std::string::npos);
  CHECK(msg("- a\n- b\n") != "ok");
  CHECK(msg("epochs: 0\n").find("'epochs: 0' trains nothing") != std::string::npos);
  CHECK(msg("iterations: 0\n").find("'iterations: 0' trains nothing") != std::string::npos);
  CHECK(msg("iterations: 0\nepochs: 2\n") == "ok");  // 0: not set
  CHECK(msg("iterations: 5\niterations: 6\n").find("'iterations' is given twice") !=
        std::string::npos);
  CHECK(msg("iterations: x5\n").find("expected an integer") != std::string::npos);
  CHECK(msg("iterations: 5\nmodel: [a]\n").find("expected one of") != std::string::npos);
  CHECK(msg("iterations: 5\nname: \"\xff\xfe\"\n").find("not UTF-8 text (byte 21)") !=
        std::string::npos);
  CHECK(!ParseJobSpecFile("/nonexistent/job.yaml").ok());
}

TEST_CASE("a spec survives the trip to YAML and back exactly", "[job]") {
  auto j = ParseJobSpec(
      "name: wide\nmodel: mlp-wide\noptimizer: adam\nlearning_rate: 0.0012345678901234\n"
      "epochs: 3\nseed: 77\nchunk_size: 4096\nbackend: cpu\n",
      "job.yaml");
  REQUIRE(j.ok());
  auto back = ParseJobSpec(JobSpecToYaml(*j), "round trip");
  REQUIRE(back.ok());
  CHECK(back->name == "wide");
  CHECK(back->model == "mlp-wide");
  CHECK(back->learning_rate == j->learning_rate);
  CHECK(back->epsilon == j->epsilon);
  CHECK(back->epochs == 3);
  CHECK(back->seed == 77);
  CHECK(back->chunk_size == 4096);
  CHECK(back->backend == "cpu");
}

TEST_CASE("adaptive load policies: keys parsed, with checkpoints too", "[job]") {
  auto j = ParseJobSpec("iterations: 5\nload_policy: adlb\nupdate_time_s: 3\n", "t");
  REQUIRE(j.ok());
  CHECK(j->adaptive());
  CHECK(j->update_time_s == 3);
  CHECK(!ParseJobSpec("iterations: 5\nload_policy: fastest\n", "t").ok());
  // Checkpoints record the plan of their round (docs/plan.md, "Recovery").
  auto both =
      ParseJobSpec("iterations: 5\nload_policy: elastic\ncheckpoint_every_rounds: 10\n", "t");
  REQUIRE(both.ok());
  CHECK(both->checkpoint_every_rounds == 10);
  // WLBS: batches by worker speed, up to 4x batch_size each (at most the
  // global batch).
  auto wlbs = ParseJobSpec("iterations: 5\nbatch_size: 16\nbatch_policy: wlbs\n", "t");
  REQUIRE(wlbs.ok());
  CHECK(wlbs->adaptive());
  CHECK(!wlbs->load_adaptive());
  CHECK(wlbs->BatchMax(8) == 64);
  CHECK(wlbs->BatchMax(2) == 32);
  auto equal = ParseJobSpec("iterations: 5\nbatch_size: 16\n", "t");
  CHECK(equal->BatchMax(8) == 16);
  CHECK(!ParseJobSpec("iterations: 5\nbatch_policy: fastest\n", "t").ok());
  CHECK(ParseJobSpec("iterations: 5\nbatch_policy: wlbs\ncheckpoint_every_rounds: 10\n", "t").ok());
}

}  // namespace
}  // namespace hetps
