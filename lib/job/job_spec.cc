#include "lib/job/job_spec.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/escape.h"
#include "lib/base/status_macros.h"
#include "lib/config/config.h"
#include "lib/train/model.h"

namespace hetps {
namespace {

void Bind(ConfigSchema& s, JobSpec& j) {
  s.String("name", &j.name, "job name, shown by psctl job status");
  s.Enum("model", &j.model, "model to train", train::BuiltinModelNames());
  s.String("dataset", &j.dataset, "directory holding the Fashion-MNIST IDX files");
  s.String("init_from", &j.init_from,
           "a model file (hetps-train --save, psctl job export) the parameters start from; "
           "every psd reads it. Or checkpoint:JOB[@ROUND]: each psd starts its part from its "
           "checkpoint of JOB (same model, chunk_size and psds). Empty: from the seed");
  s.Enum("optimizer", &j.optimizer, "server-side optimizer", {"sgd", "adam"});
  s.Double("learning_rate", &j.learning_rate, "learning rate", 1e-9, 10);
  s.Enum("lr_schedule", &j.lr_schedule,
         "learning rate over the job: constant, or cosine (half a cosine down to 0)",
         {"constant", "cosine"});
  s.Double("momentum", &j.momentum, "SGD momentum", 0, 0.9999);
  s.Double("beta1", &j.beta1, "Adam beta1", 0, 0.9999);
  s.Double("beta2", &j.beta2, "Adam beta2", 0, 0.999999);
  s.Double("epsilon", &j.epsilon, "Adam epsilon", 1e-12, 0.1);
  s.Double("weight_decay", &j.weight_decay, "L2 weight decay", 0, 0.5);
  s.Int("batch_size", &j.batch_size, "samples per worker per iteration", 1, 65536);
  s.Int("iterations", &j.iterations, "iterations to run (or set epochs)", 0, 100'000'000);
  s.Int("epochs", &j.epochs, "passes over each worker's shard (or set iterations)", 0, 10'000);
  s.Int("chunk_size", &j.chunk_size, "floats per parameter chunk", 64, 64 << 20);
  s.Int("segment_bytes", &j.segment_bytes,
        "parameter bytes per segment a psd sends as soon as every worker pushed it (0: one flow)",
        0, 1 << 30);
  s.Int("seed", &j.seed, "seed for initial parameters and data order", 0, INT64_MAX);
  s.Int("eval_every", &j.eval_every, "iterations between test evaluations (0: at the end)", 0,
        100'000'000);
  s.Int("eval_samples", &j.eval_samples, "test samples per evaluation", 1, 1'000'000);
  s.Int("round_deadline_ms", &j.round_deadline_ms,
        "a round closes with the workers that arrived by then", 10, 3'600'000);
  s.Int("checkpoint_every_rounds", &j.checkpoint_every_rounds,
        "each psd checkpoints its part every this many rounds (0: never; needs the psd's "
        "checkpoint_dir)",
        0, 100'000'000);
  s.Int("recover_timeout_s", &j.recover_timeout_s,
        "with checkpoints: how long a job whose psd was lost waits (RECOVERING) for it to "
        "come back before failing (0: it fails at once)",
        0, 86'400);
  s.Enum("backend", &j.backend, "compute backend on workers", {"auto", "cpu", "cuda"});
  s.Enum("transport", &j.transport,
         "data transport: reliable (UDP), ltp (loss-tolerant pushes, Early Close), or tcp "
         "(kernel TCP, the baseline)",
         {"reliable", "ltp", "tcp"});
  s.Enum("tcp_congestion", &j.tcp_congestion,
         "tcp: congestion control of every connection (default: the kernel's)",
         {"default", "cubic", "bbr", "reno"});
  s.Double("ltp_min_delivered", &j.ltp_min_delivered,
           "ltp: delivered fraction that lets a push close after the LT threshold", 0.01, 1);
  s.Int("ltp_slack_ms", &j.ltp_slack_ms,
        "ltp: deadline = max(LT) + max(this, 5% of max(LT)) (30 DC, 100 WAN)", 0, 600'000);
  s.Double("ltp_lt_factor", &j.ltp_lt_factor,
           "ltp: initial LT threshold = this x RTprop + size / BtlBw", 0, 100);
  s.Int("ltp_lt_fixed_ms", &j.ltp_lt_fixed_ms, "ltp: fixed LT threshold (0: measured)", 0,
        3'600'000);
  s.Enum("load_policy", &j.load_policy,
         "chunks per psd: average (even, fixed), or recomputed from measured links: elastic "
         "(in proportion to throughput), adlb-alg1 (ADLB Algorithm 1), adlb (exact optimum)",
         {"average", "elastic", "adlb-alg1", "adlb"});
  s.Enum("batch_policy", &j.batch_policy,
         "samples per worker per iteration: equal (batch_size each), or wlbs (the global batch "
         "split by measured compute speed, up to 4x batch_size each)",
         {"equal", "wlbs"});
  s.Int("update_time_s", &j.update_time_s, "seconds between policy decisions (UPDATE_TIME)", 1,
        86'400);
  s.Double("update_rate", &j.update_rate,
           "a new plan is issued when at least this fraction of it changed (UPDATE_RATE)", 0, 1);
  s.Double("report_rate", &j.report_rate,
           "a link is reported again when its rate moved by this fraction (REPORT_RATE)", 0, 1);
  s.Int("probe_chunk_bytes", &j.probe_chunk_bytes,
        "flows smaller than this are not used to measure links (PROBE_CHUNK_SIZE)", 1024,
        int64_t(1) << 32);
  s.Int("probe_chunk_num", &j.probe_chunk_num,
        "flows per link estimate, the largest of them (PROBE_CHUNK_NUM)", 1, 64);
  s.Int("plan_lead_rounds", &j.plan_lead_rounds,
        "a new plan starts this many rounds after psd 0 announces it", 1, 1000);
}

absl::Status Validate(const JobSpec& j, absl::string_view origin) {
  if ((j.iterations > 0) == (j.epochs > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": set exactly one of 'iterations' and 'epochs' (both are ",
                     j.iterations > 0 ? "set" : "unset", ")"));
  }
  if (j.name.empty() || j.name.size() > 128) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": 'name' must be 1 to 128 characters"));
  }
  if (j.dataset.empty())
    return absl::InvalidArgumentError(absl::StrCat(origin, ": 'dataset' is empty"));
  train::OptimizerConfig oc = j.optimizer_config();
  oc.total_steps = 1;  // the servers set it from the job's iterations
  absl::Status s = train::ValidateOptimizerConfig(oc);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(origin, ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace

train::OptimizerConfig JobSpec::optimizer_config() const {
  train::OptimizerConfig c;
  c.kind = optimizer == "adam" ? train::OptimizerConfig::Kind::kAdam
                               : train::OptimizerConfig::Kind::kSgd;
  c.learning_rate = static_cast<float>(learning_rate);
  c.schedule = lr_schedule == "cosine" ? train::OptimizerConfig::Schedule::kCosine
                                       : train::OptimizerConfig::Schedule::kConstant;
  c.momentum = static_cast<float>(momentum);
  c.beta1 = static_cast<float>(beta1);
  c.beta2 = static_cast<float>(beta2);
  c.epsilon = static_cast<float>(epsilon);
  c.weight_decay = static_cast<float>(weight_decay);
  return c;
}

std::string JobSpec::tcp_congestion_name() const {
  return tcp_congestion == "default" ? "" : tcp_congestion;
}

transport::EarlyCloseConfig JobSpec::early_close() const {
  transport::EarlyCloseConfig c;
  c.min_fraction = ltp_min_delivered;
  c.slack_us = static_cast<uint32_t>(ltp_slack_ms * 1000);
  c.lt_rtprop_factor = ltp_lt_factor;
  c.lt_fixed_us = static_cast<uint32_t>(std::min<int64_t>(ltp_lt_fixed_ms * 1000, UINT32_MAX));
  return c;
}

int64_t JobSpec::TotalIterations(uint64_t train_samples, uint32_t workers) const {
  if (iterations > 0) return iterations;
  const uint64_t shard = workers == 0 ? train_samples : train_samples / workers;
  const uint64_t per_epoch = (shard + batch_size - 1) / batch_size;
  return static_cast<int64_t>(per_epoch) * epochs;
}

int64_t MeasureWindowMs(int64_t update_time_ms) {
  return std::min(update_time_ms, std::max<int64_t>(2000, update_time_ms / 2));
}

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view yaml, absl::string_view origin) {
  JobSpec j;
  ConfigSchema schema("job");
  Bind(schema, j);
  if (const size_t bad = FirstNonText(yaml); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": not UTF-8 text (byte ", bad, "): a job spec is a YAML file"));
  }
  RETURN_IF_ERROR(schema.LoadYamlString(yaml, origin));
  // 0 means "not set" for these two (the canonical YAML writes the unset
  // one as 0); written out while the other is unset too, it is a job that
  // trains nothing, which deserves its own message.
  for (const ConfigSchema::Entry& e : schema.Entries()) {
    if ((e.key == "epochs" || e.key == "iterations") && e.source == ConfigSource::kFile &&
        e.value == "0" && j.epochs <= 0 && j.iterations <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": '", e.key,
                                                     ": 0' trains nothing; set it to at least 1, "
                                                     "or leave it out and set ",
                                                     e.key == "epochs" ? "iterations" : "epochs"));
    }
  }
  RETURN_IF_ERROR(Validate(j, origin));
  return j;
}

absl::StatusOr<JobSpec> ParseJobSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseJobSpec(ss.str(), path);
}

std::string JobSpecToYaml(const JobSpec& spec) {
  JobSpec copy = spec;
  ConfigSchema schema("job");
  Bind(schema, copy);
  return schema.DumpYaml();
}

}  // namespace hetps
