#include "clients/psctl/psctl.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/psctl/internal.h"
#include "lib/base/escape.h"
#include "lib/base/file.h"
#include "lib/base/json_writer.h"
#include "lib/base/net_address.h"
#include "lib/config/config.h"
#include "lib/rpc/grpc_util.h"
#include "lib/rpc/security.h"
#include "proto/hetps/v1/admin.grpc.pb.h"
#include "proto/hetps/v1/scheduler.grpc.pb.h"

namespace hetps {
namespace psctl {
namespace {

constexpr char kUsageText[] =
    "usage: psctl [--endpoint HOST:PORT] [--timeout_ms N] [-o table|json] [TLS] COMMAND\n"
    "\n"
    "TLS (docs/security.md): --tls-ca FILE with --tls-cert FILE --tls-key FILE (an admin\n"
    "  certificate, OU=admin) or --token-file FILE (a bearer token); --insecure for a\n"
    "  cluster run with insecure: true. --config FILE (or $HETPS_PSCTL_CONFIG) holds the\n"
    "  same as YAML keys endpoint, tls_ca, tls_cert, tls_key, token_file, insecure;\n"
    "  flags beat the file.\n"
    "\n"
    "commands:\n"
    "  status        the endpoint daemon's status (schedd adds cluster counts)\n"
    "  nodes [--all] cluster members from schedd (--all adds dead and left nodes)\n"
    "  config        the endpoint daemon's effective configuration and sources\n"
    "  drain [--force]  ask the endpoint daemon to drain and exit (refused for a member\n"
    "                of a running job, saying what it would do, unless --force)\n"
    "  job submit FILE [--servers N] [--workers N]\n"
    "                submit a YAML job spec to schedd (docs/jobs.md); N = 0 or absent:\n"
    "                every live node of that role\n"
    "  job status [JOB_ID]  a job's state and progress (default: the newest job)\n"
    "  job cancel [JOB_ID]  stop a job (default: the newest job)\n"
    "  job export [JOB_ID] -o FILE\n"
    "                fetch a succeeded job's model (safetensors) from its rank 0 worker\n"
    "  checkpoint list [JOB_ID]  each psd's checkpoints of a job (default: the newest)\n"
    "  checkpoint show [JOB_ID] [ROUND]  one round on every psd (default: the newest\n"
    "                round all of them hold, where a recovery would resume)\n"
    "  links         the links schedd measured (rate, RTT, age): jobs with an\n"
    "                adaptive load_policy report them (docs/awareness.md)\n"
    "  policy show   the active job's plan in force and the plans before it (docs/plan.md)\n"
    "  help          this text\n"
    "\n"
    "--endpoint defaults to 127.0.0.1:7070 (schedd) or $HETPS_ENDPOINT.\n"
    "exit codes: 0 ok, 1 error from the daemon (or a job that failed or was cancelled,\n"
    "for job status), 2 usage, 4 endpoint unavailable\n";

const char* RoleName(v1::Role r) {
  switch (r) {
    case v1::ROLE_SCHEDULER:
      return "scheduler";
    case v1::ROLE_SERVER:
      return "server";
    case v1::ROLE_WORKER:
      return "worker";
    default:
      return "unspecified";
  }
}

const char* StateName(v1::NodeState s) {
  switch (s) {
    case v1::NODE_STATE_ALIVE:
      return "alive";
    case v1::NODE_STATE_DEAD:
      return "dead";
    case v1::NODE_STATE_LEFT:
      return "left";
    default:
      return "unspecified";
  }
}

const char* ServingName(v1::ServingState s) {
  switch (s) {
    case v1::SERVING_STATE_STARTING:
      return "starting";
    case v1::SERVING_STATE_SERVING:
      return "serving";
    case v1::SERVING_STATE_DRAINING:
      return "draining";
    default:
      return "unspecified";
  }
}

}  // namespace

std::string Bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(b, " B") : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string Age(int64_t unix_ms, absl::Time now) {
  if (unix_ms <= 0) return "-";
  absl::Duration d = now - absl::FromUnixMillis(unix_ms);
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  if (d < absl::Seconds(10)) return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(d));
  if (d < absl::Minutes(2)) return absl::StrFormat("%ds", absl::ToInt64Seconds(d));
  if (d < absl::Hours(2)) return absl::StrFormat("%dm", absl::ToInt64Minutes(d));
  return absl::StrFormat("%dh", absl::ToInt64Hours(d));
}

// Left-aligned columns, two spaces apart. Every cell may come from outside
// (node ids, addresses, config values, errors): escaped (escape.h).
std::string Table(std::vector<std::vector<std::string>> rows) {
  for (auto& r : rows) {
    for (std::string& cell : r) cell = EscapeUntrusted(cell);
  }
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

namespace {

void CapabilitiesJson(const v1::Capabilities& c, JsonWriter& w) {
  w.BeginObject()
      .Key("hostname")
      .String(c.hostname())
      .Key("cpu_cores")
      .Uint(c.cpu_cores())
      .Key("memory_bytes")
      .Uint(c.memory_bytes())
      .Key("nccl_version")
      .Uint(c.nccl_version())
      .Key("gpus")
      .BeginArray();
  for (const auto& g : c.gpus()) {
    w.BeginObject()
        .Key("index")
        .Uint(g.index())
        .Key("name")
        .String(g.name())
        .Key("memory_bytes")
        .Uint(g.memory_bytes())
        .Key("compute_capability")
        .Uint(g.compute_capability())
        .EndObject();
  }
  w.EndArray().EndObject();
}

std::string GpuSummary(const v1::Capabilities& c) {
  if (c.gpus_size() == 0) return "0";
  std::vector<std::string> names;
  for (const auto& g : c.gpus()) names.push_back(g.name());
  return absl::StrCat(c.gpus_size(), " (", absl::StrJoin(names, ","), ")");
}

}  // namespace

std::string NodesTable(const v1::ListNodesResponse& resp, absl::Time now) {
  std::vector<std::vector<std::string>> rows = {{"NODE_ID", "ROLE", "STATE", "CONTROL", "METRICS",
                                                 "CORES", "MEMORY", "GPUS", "HEARTBEAT_AGE",
                                                 "INCARNATION"}};
  for (const auto& n : resp.nodes()) {
    rows.push_back({n.node_id(), RoleName(n.role()), StateName(n.state()), n.control_address(),
                    n.metrics_address().empty() ? "-" : n.metrics_address(),
                    absl::StrCat(n.capabilities().cpu_cores()),
                    Bytes(n.capabilities().memory_bytes()), GpuSummary(n.capabilities()),
                    n.role() == v1::ROLE_SCHEDULER ? "-" : Age(n.last_heartbeat_unix_ms(), now),
                    absl::StrCat(n.incarnation())});
  }
  int alive = 0;
  for (const auto& n : resp.nodes()) alive += n.state() == v1::NODE_STATE_ALIVE;
  return Table(rows) + absl::StrCat(alive, " alive of ", resp.nodes_size(),
                                    " listed; membership version ", resp.membership_version(),
                                    "\n");
}

std::string NodesJson(const v1::ListNodesResponse& resp, absl::Time now) {
  JsonWriter w;
  w.BeginObject()
      .Key("membership_version")
      .Uint(resp.membership_version())
      .Key("heartbeat_interval_ms")
      .Uint(resp.heartbeat_interval_ms())
      .Key("nodes")
      .BeginArray();
  for (const auto& n : resp.nodes()) {
    w.BeginObject()
        .Key("node_id")
        .String(n.node_id())
        .Key("role")
        .String(RoleName(n.role()))
        .Key("state")
        .String(StateName(n.state()))
        .Key("control_address")
        .String(n.control_address())
        .Key("data_address")
        .String(n.data_address())
        .Key("metrics_address")
        .String(n.metrics_address())
        .Key("version")
        .String(n.version())
        .Key("incarnation")
        .Uint(n.incarnation())
        .Key("registered_unix_ms")
        .Int(n.registered_unix_ms())
        .Key("last_heartbeat_unix_ms")
        .Int(n.last_heartbeat_unix_ms())
        .Key("state_changed_unix_ms")
        .Int(n.state_changed_unix_ms())
        .Key("heartbeat_age_ms")
        .Int(absl::ToInt64Milliseconds(now - absl::FromUnixMillis(n.last_heartbeat_unix_ms())))
        .Key("capabilities");
    CapabilitiesJson(n.capabilities(), w);
    w.EndObject();
  }
  w.EndArray().EndObject();
  return w.str() + "\n";
}

std::string StatusTable(const v1::GetStatusResponse& r, absl::Time now) {
  std::vector<std::vector<std::string>> rows = {
      {"node_id", r.node_id()},
      {"role", RoleName(r.role())},
      {"version", r.version()},
      {"state", ServingName(r.serving_state())},
      {"uptime", Age(r.start_unix_ms(), now)},
      {"control", r.control_address()},
      {"metrics", r.metrics_address()},
      {"host", r.capabilities().hostname()},
      {"cpu_cores", absl::StrCat(r.capabilities().cpu_cores())},
      {"memory", Bytes(r.capabilities().memory_bytes())},
      {"gpus", GpuSummary(r.capabilities())},
  };
  if (r.role() == v1::ROLE_SCHEDULER) {
    std::vector<std::string> parts;
    for (const char* role : {"scheduler", "server", "worker"}) {
      auto it = r.alive_nodes_by_role().find(role);
      parts.push_back(
          absl::StrCat(role, "=", it == r.alive_nodes_by_role().end() ? 0 : it->second));
    }
    rows.push_back({"alive_nodes", absl::StrJoin(parts, " ")});
    rows.push_back({"dead_nodes", absl::StrCat(r.dead_nodes())});
  } else {
    rows.push_back(
        {"scheduler", absl::StrCat(r.scheduler_address(),
                                   r.scheduler_connected() ? " (connected)" : " (not connected)")});
    rows.push_back({"incarnation", absl::StrCat(r.incarnation())});
  }
  rows.push_back({"membership_version", absl::StrCat(r.membership_version())});
  return Table(rows);
}

std::string StatusJson(const v1::GetStatusResponse& r, absl::Time now) {
  JsonWriter w;
  w.BeginObject()
      .Key("node_id")
      .String(r.node_id())
      .Key("role")
      .String(RoleName(r.role()))
      .Key("version")
      .String(r.version())
      .Key("serving_state")
      .String(ServingName(r.serving_state()))
      .Key("start_unix_ms")
      .Int(r.start_unix_ms())
      .Key("uptime_seconds")
      .Double(absl::ToDoubleSeconds(now - absl::FromUnixMillis(r.start_unix_ms())))
      .Key("control_address")
      .String(r.control_address())
      .Key("metrics_address")
      .String(r.metrics_address())
      .Key("scheduler_address")
      .String(r.scheduler_address())
      .Key("scheduler_connected")
      .Bool(r.scheduler_connected())
      .Key("incarnation")
      .Uint(r.incarnation())
      .Key("membership_version")
      .Uint(r.membership_version())
      .Key("alive_nodes_by_role")
      .BeginObject();
  for (const char* role : {"scheduler", "server", "worker"}) {
    auto it = r.alive_nodes_by_role().find(role);
    w.Key(role).Uint(it == r.alive_nodes_by_role().end() ? 0 : it->second);
  }
  w.EndObject().Key("dead_nodes").Uint(r.dead_nodes()).Key("capabilities");
  CapabilitiesJson(r.capabilities(), w);
  w.EndObject();
  return w.str() + "\n";
}

std::string ConfigTable(const v1::GetConfigResponse& r) {
  std::vector<std::vector<std::string>> rows = {{"KEY", "VALUE", "SOURCE"}};
  for (const auto& e : r.entries()) rows.push_back({e.key(), e.value(), e.source()});
  return absl::StrCat(
      "config file: ", r.config_file().empty() ? "(none)" : EscapeUntrusted(r.config_file()), "\n",
      Table(rows));
}

std::string ConfigJson(const v1::GetConfigResponse& r) {
  JsonWriter w;
  w.BeginObject().Key("config_file").String(r.config_file()).Key("entries").BeginArray();
  for (const auto& e : r.entries()) {
    w.BeginObject()
        .Key("key")
        .String(e.key())
        .Key("value")
        .String(e.value())
        .Key("source")
        .String(e.source())
        .EndObject();
  }
  w.EndArray().EndObject();
  return w.str() + "\n";
}

std::string JobStateName(v1::JobState s) {
  switch (s) {
    case v1::JOB_STATE_STARTING:
      return "starting";
    case v1::JOB_STATE_RUNNING:
      return "running";
    case v1::JOB_STATE_SUCCEEDED:
      return "succeeded";
    case v1::JOB_STATE_FAILED:
      return "failed";
    case v1::JOB_STATE_CANCELLED:
      return "cancelled";
    case v1::JOB_STATE_RECOVERING:
      return "recovering";
    default:
      return "unknown";
  }
}

namespace {

std::string Percent(double fraction) {
  return fraction < 0 ? "-" : absl::StrFormat("%.2f%%", 100 * fraction);
}

double ElapsedSeconds(const v1::JobStatus& j, absl::Time now) {
  if (j.started_unix_ms() == 0) return 0;
  absl::Time end = j.finished_unix_ms() != 0 ? absl::FromUnixMillis(j.finished_unix_ms()) : now;
  return absl::ToDoubleSeconds(end - absl::FromUnixMillis(j.started_unix_ms()));
}

}  // namespace

std::string JobStatusTable(const v1::JobStatus& j, absl::Time now) {
  std::string out;
  const double frac =
      j.total_iterations() > 0 ? double(j.iteration()) / double(j.total_iterations()) : 0;
  absl::StrAppend(&out, "job         ", EscapeUntrusted(j.job_id()), "  (",
                  EscapeUntrusted(j.name()), ", model ", EscapeUntrusted(j.model()), ")\n");
  absl::StrAppend(&out, "state       ", JobStateName(j.state()),
                  j.message().empty() ? "" : absl::StrCat(": ", EscapeUntrusted(j.message())),
                  "\n");
  absl::StrAppend(&out, "progress    ", j.iteration(), "/", j.total_iterations(), " iterations (",
                  absl::StrFormat("%.1f%%", 100 * frac), "), ",
                  absl::StrFormat("%.1f", ElapsedSeconds(j, now)), " s\n");
  absl::StrAppend(&out, "loss        ", absl::StrFormat("%.4f", j.loss()), "\n");
  absl::StrAppend(&out, "test acc    ", Percent(j.test_accuracy()), "\n");
  absl::StrAppend(&out, "samples/s   ", absl::StrFormat("%.0f", j.samples_per_second()), "\n");
  absl::StrAppend(&out, "rounds      ", j.rounds_by_deadline(), " closed at the deadline, ",
                  j.rounds_by_membership(), " by a membership change\n");
  if (j.recoveries() > 0) {
    absl::StrAppend(&out, "recoveries  ", j.recoveries(), ", the newest resumed from round ",
                    j.resume_round(), "\n");
  }
  out += "\n";
  std::vector<std::vector<std::string>> rows = {{"NODE", "ROLE", "RANK", "ALIVE", "ITER", "LOSS",
                                                 "SAMPLES/S", "COMPUTE_S", "PUSH_S", "PULL_WAIT_S",
                                                 "ROUNDS C/D/M", "REPORT_AGE"}};
  for (const v1::NodeJobStatus& n : j.nodes()) {
    const v1::NodeJobReport& r = n.report();
    const bool worker = n.role() == v1::ROLE_WORKER;
    std::string state = n.alive() ? "yes" : "no";
    if (!r.error().empty()) state = "error";
    rows.push_back({n.node_id(), worker ? "worker" : "server", absl::StrCat(n.rank()), state,
                    absl::StrCat(r.iteration()), worker ? absl::StrFormat("%.4f", r.loss()) : "-",
                    worker ? absl::StrFormat("%.0f", r.samples_per_second()) : "-",
                    worker ? absl::StrFormat("%.1f", r.compute_seconds()) : "-",
                    worker ? absl::StrFormat("%.1f", r.push_seconds()) : "-",
                    worker ? absl::StrFormat("%.1f", r.pull_wait_seconds()) : "-",
                    worker ? "-"
                           : absl::StrCat(r.rounds_complete(), "/", r.rounds_by_deadline(), "/",
                                          r.rounds_by_membership()),
                    n.last_report_unix_ms() == 0 ? "-" : Age(n.last_report_unix_ms(), now)});
  }
  out += Table(rows);
  for (const v1::NodeJobStatus& n : j.nodes()) {
    if (!n.report().error().empty()) {
      absl::StrAppend(&out, EscapeUntrusted(n.node_id()), ": ", EscapeUntrusted(n.report().error()),
                      "\n");
    }
  }
  return out;
}

std::string JobStatusJson(const v1::JobStatus& j, absl::Time now) {
  JsonWriter w;
  w.BeginObject()
      .Key("job_id")
      .String(j.job_id())
      .Key("name")
      .String(j.name())
      .Key("model")
      .String(j.model())
      .Key("state")
      .String(JobStateName(j.state()))
      .Key("message")
      .String(j.message())
      .Key("iteration")
      .Int(j.iteration())
      .Key("total_iterations")
      .Int(j.total_iterations())
      .Key("loss")
      .Double(j.loss())
      .Key("test_accuracy")
      .Double(j.test_accuracy())
      .Key("samples_per_second")
      .Double(j.samples_per_second())
      .Key("rounds_by_deadline")
      .Uint(j.rounds_by_deadline())
      .Key("rounds_by_membership")
      .Uint(j.rounds_by_membership())
      .Key("recoveries")
      .Uint(j.recoveries())
      .Key("resume_round")
      .Int(j.resume_round())
      .Key("submitted_unix_ms")
      .Int(j.submitted_unix_ms())
      .Key("started_unix_ms")
      .Int(j.started_unix_ms())
      .Key("finished_unix_ms")
      .Int(j.finished_unix_ms())
      .Key("elapsed_s")
      .Double(ElapsedSeconds(j, now))
      .Key("nodes")
      .BeginArray();
  for (const v1::NodeJobStatus& n : j.nodes()) {
    const v1::NodeJobReport& r = n.report();
    w.BeginObject()
        .Key("node_id")
        .String(n.node_id())
        .Key("role")
        .String(RoleName(n.role()))
        .Key("rank")
        .Uint(n.rank())
        .Key("alive")
        .Bool(n.alive())
        .Key("ready")
        .Bool(r.ready())
        .Key("done")
        .Bool(r.done())
        .Key("error")
        .String(r.error())
        .Key("iteration")
        .Int(r.iteration())
        .Key("loss")
        .Double(r.loss())
        .Key("test_accuracy")
        .Double(r.test_accuracy())
        .Key("samples_per_second")
        .Double(r.samples_per_second())
        .Key("compute_seconds")
        .Double(r.compute_seconds())
        .Key("push_seconds")
        .Double(r.push_seconds())
        .Key("pull_wait_seconds")
        .Double(r.pull_wait_seconds())
        .Key("start_wait_seconds")
        .Double(r.start_wait_seconds())
        .Key("rounds_complete")
        .Uint(r.rounds_complete())
        .Key("rounds_by_deadline")
        .Uint(r.rounds_by_deadline())
        .Key("rounds_by_membership")
        .Uint(r.rounds_by_membership())
        .Key("last_report_unix_ms")
        .Int(n.last_report_unix_ms())
        .EndObject();
  }
  w.EndArray().EndObject();
  return w.str() + "\n";
}

namespace {

// A job spec file: a regular file of at most 64 KiB of UTF-8 text.
absl::StatusOr<std::string> ReadJobSpec(const std::string& path) {
  constexpr size_t kSpecBytesMax = 64 << 10;  // schedd's bound too
  absl::StatusOr<std::string> s = ReadBoundedFile(path, kSpecBytesMax);
  if (!s.ok()) {
    return absl::Status(s.status().code(), absl::StrCat("job spec: ", s.status().message(),
                                                        " (a YAML file is expected)"));
  }
  if (const size_t bad = FirstNonText(*s); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("job spec ", path, " is not UTF-8 text (byte ",
                                                   bad, "): a YAML file is expected"));
  }
  if (s->find_first_not_of(" \t\r\n") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("job spec ", path, " is empty"));
  }
  return s;
}

}  // namespace

int RpcFailure(const grpc::Status& s, const std::string& endpoint, std::ostream& err) {
  bool unavailable = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                     s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED && s.error_message().empty()) {
    err << "psctl: error from " << endpoint
        << ": it does not serve this call (nodes and job go to schedd; status, config and "
           "drain to any daemon)\n";
    return kError;
  }
  err << "psctl: " << (unavailable ? "endpoint unavailable: " : "error from ") << endpoint << ": "
      << EscapeUntrusted(s.error_message()) << "\n";
  return unavailable ? kUnavailable : kError;
}

int JobCommand(const std::vector<std::string>& pos, int64_t servers, int64_t workers, bool json,
               const std::string& endpoint, std::shared_ptr<grpc::Channel> channel,
               int64_t timeout_ms, std::ostream& out, std::ostream& err) {
  const std::string sub = pos.size() > 1 ? pos[1] : "";
  const std::string arg = pos.size() > 2 ? pos[2] : "";
  auto stub = v1::Scheduler::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(timeout_ms));
  ctx.set_wait_for_ready(false);
  auto show = [&](const v1::JobStatus& j) {
    out << (json ? JobStatusJson(j, absl::Now()) : JobStatusTable(j, absl::Now()));
  };
  if (sub == "submit") {
    if (arg.empty()) {
      err << "psctl: job submit needs a job spec file (e.g. deploy/jobs/mlp.yaml)\n";
      return kUsage;
    }
    absl::StatusOr<std::string> text = ReadJobSpec(arg);
    if (!text.ok()) {
      err << "psctl: " << EscapeUntrusted(text.status().message()) << "\n";
      return kUsage;
    }
    v1::SubmitJobRequest req;
    req.set_spec_yaml(*text);
    req.set_origin(arg);
    req.set_servers(static_cast<uint32_t>(servers));
    req.set_workers(static_cast<uint32_t>(workers));
    v1::SubmitJobResponse resp;
    grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
    if (!s.ok()) return RpcFailure(s, endpoint, err);
    if (json) {
      show(resp.job());
    } else {
      out << "submitted " << EscapeUntrusted(resp.job().job_id()) << " (" << resp.job().nodes_size()
          << " nodes); follow it with: psctl job status\n";
    }
    return kOk;
  }
  if (sub == "status" || sub == "cancel") {
    v1::JobStatus job;
    grpc::Status s;
    if (sub == "status") {
      v1::GetJobRequest req;
      req.set_job_id(arg);
      v1::GetJobResponse resp;
      s = stub->GetJob(&ctx, req, &resp);
      job = resp.job();
    } else {
      v1::CancelJobRequest req;
      req.set_job_id(arg);
      v1::CancelJobResponse resp;
      s = stub->CancelJob(&ctx, req, &resp);
      job = resp.job();
    }
    if (!s.ok()) return RpcFailure(s, endpoint, err);
    show(job);
    if (sub == "status" &&
        (job.state() == v1::JOB_STATE_FAILED || job.state() == v1::JOB_STATE_CANCELLED)) {
      return kError;
    }
    return kOk;
  }
  err << "psctl: job needs submit FILE, status [JOB_ID], cancel [JOB_ID] or export [JOB_ID] -o "
         "FILE\n";
  return kUsage;
}

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string endpoint = "127.0.0.1:7070";
  if (const char* env = std::getenv("HETPS_ENDPOINT"); env != nullptr && *env) endpoint = env;
  // Connection settings: the config file's, then flags over them.
  std::string config_file;
  TlsConfig tls;
  std::string token_file;
  std::vector<std::pair<std::string, std::string>> conn_flags;  // key, value
  std::string output = "table";
  int64_t timeout_ms = 3000;
  bool all = false;
  bool force = false;
  int64_t servers = 0, workers = 0;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const std::string& name, std::string* v) -> bool {
      if (a.rfind(name + "=", 0) == 0) {
        *v = a.substr(name.size() + 1);
        return true;
      }
      if (a == name) {
        if (i + 1 >= args.size()) return false;
        *v = args[++i];
        return true;
      }
      return false;
    };
    std::string v;
    if (a == "--endpoint" || a.rfind("--endpoint=", 0) == 0) {
      if (!value("--endpoint", &endpoint)) {
        err << "psctl: --endpoint needs HOST:PORT\n";
        return kUsage;
      }
    } else if (a == "-o" || a == "--output" || a.rfind("--output=", 0) == 0 ||
               a.rfind("-o=", 0) == 0) {
      if (!value(a.rfind("-o", 0) == 0 ? "-o" : "--output", &output)) {
        err << "psctl: -o needs table or json\n";
        return kUsage;
      }
    } else if (a == "--timeout_ms" || a.rfind("--timeout_ms=", 0) == 0) {
      if (!value("--timeout_ms", &v) || !absl::SimpleAtoi(v, &timeout_ms) || timeout_ms <= 0) {
        err << "psctl: --timeout_ms needs a positive integer\n";
        return kUsage;
      }
    } else if (a == "--config" || a.rfind("--config=", 0) == 0) {
      if (!value("--config", &config_file)) {
        err << "psctl: --config needs a FILE\n";
        return kUsage;
      }
    } else if (a == "--insecure") {
      conn_flags.push_back({"insecure", "true"});
    } else if (a.rfind("--tls-", 0) == 0 || a.rfind("--token-file", 0) == 0) {
      const std::string name = a.substr(0, a.find('='));
      static const char* kKeys[][2] = {{"--tls-ca", "tls_ca"},
                                       {"--tls-cert", "tls_cert"},
                                       {"--tls-key", "tls_key"},
                                       {"--token-file", "token_file"}};
      const char* key = nullptr;
      for (const auto& k : kKeys) {
        if (name == k[0]) key = k[1];
      }
      if (key == nullptr) {
        err << "psctl: unknown flag " << a << "\n" << kUsageText;
        return kUsage;
      }
      if (!value(name, &v) || v.empty()) {
        err << "psctl: " << name << " needs a FILE\n";
        return kUsage;
      }
      conn_flags.push_back({key, v});
    } else if (a == "--all") {
      all = true;
    } else if (a == "--force") {
      force = true;
    } else if (a == "--servers" || a.rfind("--servers=", 0) == 0 || a == "--workers" ||
               a.rfind("--workers=", 0) == 0) {
      const bool is_servers = a.rfind("--servers", 0) == 0;
      const std::string name = is_servers ? "--servers" : "--workers";
      int64_t* n = is_servers ? &servers : &workers;
      if (!value(name, &v) || !absl::SimpleAtoi(v, n) || *n < 0 || *n > 100000) {
        err << "psctl: " << name << " needs a count (0 = every live node)\n";
        return kUsage;
      }
    } else if (a == "-h" || a == "--help") {
      positional.insert(positional.begin(), "help");
    } else if (!a.empty() && a[0] == '-') {
      err << "psctl: unknown flag " << a << "\n" << kUsageText;
      return kUsage;
    } else {
      positional.push_back(a);
    }
  }
  if (positional.empty()) {
    err << kUsageText;
    return kUsage;
  }
  const size_t max_args = positional[0] == "job"          ? 3
                          : positional[0] == "checkpoint" ? 4
                          : positional[0] == "policy"     ? 2
                                                          : 1;
  // job export's -o names the file to write.
  const bool exporting =
      positional[0] == "job" && positional.size() > 1 && positional[1] == "export";
  if (positional.size() > max_args) {
    err << "psctl: unexpected argument '" << EscapeUntrusted(positional[max_args]) << "'\n";
    return kUsage;
  }
  const std::string& cmd = positional[0];
  if (cmd == "help") {
    out << kUsageText;
    return kOk;
  }
  if (!exporting && output != "table" && output != "json") {
    err << "psctl: -o must be table or json, not '" << output << "'\n";
    return kUsage;
  }
  {
    ConfigSchema schema("psctl");
    schema.Address("endpoint", &endpoint, "the daemon to talk to");
    schema.String("tls_ca", &tls.tls_ca, "CA certificate");
    schema.String("tls_cert", &tls.tls_cert, "client certificate");
    schema.String("tls_key", &tls.tls_key, "its key");
    schema.String("token_file", &token_file, "bearer token file");
    schema.Bool("insecure", &tls.insecure, "no TLS");
    if (!config_file.empty()) {
      if (absl::Status s = schema.LoadYamlFile(config_file); !s.ok()) {
        err << "psctl: " << EscapeUntrusted(s.message()) << "\n";
        return kUsage;
      }
    }
    for (const auto& [key, val] : conn_flags) {
      if (absl::Status s = schema.Set(key, val, ConfigSource::kFlag, "--" + key); !s.ok()) {
        err << "psctl: " << EscapeUntrusted(s.message()) << "\n";
        return kUsage;
      }
    }
  }
  if (absl::StatusOr<HostPort> hp = ParseHostPort(endpoint); !hp.ok()) {
    err << "psctl: bad --endpoint: " << EscapeUntrusted(hp.status().message()) << "\n";
    return kUsage;
  }
  absl::StatusOr<TlsMaterial> material = LoadClientTls(tls);
  if (!material.ok()) {
    err << "psctl: " << EscapeUntrusted(material.status().message()) << "\n";
    return kUsage;
  }
  std::string token;
  if (!token_file.empty()) {
    if (material->insecure) {
      err << "psctl: --token-file needs TLS (a token sent without it is readable on the path)\n";
      return kUsage;
    }
    absl::StatusOr<std::string> t = ReadTokenFile(token_file);
    if (!t.ok()) {
      err << "psctl: " << EscapeUntrusted(t.status().message()) << "\n";
      return kUsage;
    }
    token = *t;
  }
  bool json = output == "json";
  auto channel = MakeSecureChannel(endpoint, *material, token);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(timeout_ms));
  // Fail fast when nothing listens, instead of waiting out the deadline.
  ctx.set_wait_for_ready(false);
  if (cmd == "nodes") {
    auto stub = v1::Scheduler::NewStub(channel);
    v1::ListNodesRequest req;
    req.set_include_departed(all);
    v1::ListNodesResponse resp;
    grpc::Status s = stub->ListNodes(&ctx, req, &resp);
    if (!s.ok()) return RpcFailure(s, endpoint, err);
    out << (json ? NodesJson(resp, absl::Now()) : NodesTable(resp, absl::Now()));
    return kOk;
  }
  Connection conn{endpoint, channel, *material, token, timeout_ms, json};
  if (exporting) {
    conn.json = false;
    return ExportCommand(positional.size() > 2 ? positional[2] : "", output, conn, out, err);
  }
  if (cmd == "checkpoint") return CheckpointCommand(positional, conn, out, err);
  if (cmd == "links") return LinksCommand(conn, out, err);
  if (cmd == "policy") return PolicyCommand(positional, conn, out, err);
  if (cmd == "job")
    return JobCommand(positional, servers, workers, json, endpoint, channel, timeout_ms, out, err);
  auto admin = v1::Admin::NewStub(channel);
  if (cmd == "status") {
    v1::GetStatusResponse resp;
    grpc::Status s = admin->GetStatus(&ctx, v1::GetStatusRequest(), &resp);
    if (!s.ok()) return RpcFailure(s, endpoint, err);
    out << (json ? StatusJson(resp, absl::Now()) : StatusTable(resp, absl::Now()));
    return kOk;
  }
  if (cmd == "config") {
    v1::GetConfigResponse resp;
    grpc::Status s = admin->GetConfig(&ctx, v1::GetConfigRequest(), &resp);
    if (!s.ok()) return RpcFailure(s, endpoint, err);
    out << (json ? ConfigJson(resp) : ConfigTable(resp));
    return kOk;
  }
  if (cmd == "drain") {
    v1::DrainRequest req;
    req.set_force(force);
    v1::DrainResponse resp;
    grpc::Status s = admin->Drain(&ctx, req, &resp);
    if (!s.ok()) return RpcFailure(s, endpoint, err);
    out << (json ? std::string("{\"accepted\":") + (resp.accepted() ? "true" : "false") + "}\n"
                 : std::string("drain ") + (resp.accepted() ? "accepted" : "refused") + "\n");
    return kOk;
  }
  err << "psctl: unknown command '" << cmd << "'\n" << kUsageText;
  return kUsage;
}

}  // namespace psctl
}  // namespace hetps
