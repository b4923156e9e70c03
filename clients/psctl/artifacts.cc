// psctl job export and psctl checkpoint: commands that ask schedd which
// nodes hold what, then fetch it from those nodes (hetps.v1.Artifacts on
// their control addresses) with psctl's own credentials.
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/psctl/internal.h"
#include "clients/psctl/psctl.h"
#include "lib/base/escape.h"
#include "lib/base/json_writer.h"
#include "lib/rpc/grpc_util.h"
#include "proto/hetps/v1/admin.grpc.pb.h"
#include "proto/hetps/v1/scheduler.grpc.pb.h"

namespace hetps {
namespace psctl {
namespace {

// A model file is streamed in 1 MiB messages; one bigger than this is
// refused before anything is written.
constexpr uint64_t kModelBytesMax = 16ull << 30;

// The job (newest when `job_id` is empty) and the control address of each
// of its nodes that schedd lists as alive.
struct JobNodes {
  v1::JobStatus job;
  std::map<std::string, std::string> control;  // node id -> address
};

int FetchJobNodes(const std::string& job_id, const Connection& c, JobNodes* out,
                  std::ostream& err) {
  auto stub = v1::Scheduler::NewStub(c.channel);
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Milliseconds(c.timeout_ms));
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::GetJobResponse resp;
    grpc::Status s = stub->GetJob(&ctx, req, &resp);
    if (!s.ok()) return RpcFailure(s, c.endpoint, err);
    out->job = resp.job();
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(c.timeout_ms));
  v1::ListNodesResponse nodes;
  grpc::Status s = stub->ListNodes(&ctx, v1::ListNodesRequest(), &nodes);
  if (!s.ok()) return RpcFailure(s, c.endpoint, err);
  for (const v1::NodeInfo& n : nodes.nodes()) out->control[n.node_id()] = n.control_address();
  return kOk;
}

std::unique_ptr<v1::Artifacts::Stub> NodeStub(const Connection& c, const std::string& address) {
  return v1::Artifacts::NewStub(MakeSecureChannel(address, c.material, c.token));
}

}  // namespace

int ExportCommand(const std::string& job_id, const std::string& file, const Connection& c,
                  std::ostream& out, std::ostream& err) {
  if (file.empty() || file == "table" || file == "json") {
    err << "psctl: job export needs -o FILE (the safetensors file to write)\n";
    return kUsage;
  }
  JobNodes jn;
  if (int rc = FetchJobNodes(job_id, c, &jn, err); rc != kOk) return rc;
  const v1::JobStatus& j = jn.job;
  if (j.state() != v1::JOB_STATE_SUCCEEDED) {
    err << "psctl: job " << EscapeUntrusted(j.job_id()) << " is " << JobStateName(j.state())
        << ": a job's model is saved when it succeeds\n";
    return kError;
  }
  std::string worker;  // rank 0 keeps the model
  for (const v1::NodeJobStatus& n : j.nodes()) {
    if (n.role() == v1::ROLE_WORKER && n.rank() == 0) worker = n.node_id();
  }
  const auto addr = jn.control.find(worker);
  if (worker.empty() || addr == jn.control.end()) {
    err << "psctl: " << EscapeUntrusted(worker.empty() ? "the job's rank 0 worker" : worker)
        << " (rank 0, which keeps the model) is not in the cluster now\n";
    return kUnavailable;
  }
  auto stub = NodeStub(c, addr->second);
  grpc::ClientContext ctx;
  // A large model takes a while: the deadline covers the transfer.
  SetDeadline(&ctx, std::max(absl::Milliseconds(c.timeout_ms), absl::Minutes(10)));
  v1::GetModelRequest req;
  req.set_job_id(j.job_id());
  auto reader = stub->GetModel(&ctx, req);
  const std::string tmp = file + ".part";
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) {
    err << "psctl: cannot write " << EscapeUntrusted(tmp) << "\n";
    return kError;
  }
  uint64_t total = 0, got = 0;
  bool bad = false;
  v1::ModelChunk chunk;
  while (reader->Read(&chunk)) {
    if (got == 0) total = chunk.total_bytes();
    // The node is trusted no more than anything else from the network.
    if (chunk.total_bytes() != total || total > kModelBytesMax ||
        got + chunk.data().size() > total) {
      bad = true;
      ctx.TryCancel();
      break;
    }
    f.write(chunk.data().data(), std::streamsize(chunk.data().size()));
    got += chunk.data().size();
  }
  grpc::Status s = reader->Finish();
  f.close();
  if (!s.ok() && !bad) {
    std::remove(tmp.c_str());
    return RpcFailure(s, addr->second, err);
  }
  if (bad || got != total || total == 0 || !f) {
    std::remove(tmp.c_str());
    err << "psctl: the model from " << EscapeUntrusted(worker) << " came " << got << " of " << total
        << " bytes: not written\n";
    return kError;
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    std::remove(tmp.c_str());
    err << "psctl: cannot write " << EscapeUntrusted(file) << "\n";
    return kError;
  }
  if (c.json) {
    JsonWriter w;
    w.BeginObject()
        .Key("job_id")
        .String(j.job_id())
        .Key("model")
        .String(j.model())
        .Key("file")
        .String(file)
        .Key("bytes")
        .Uint(total)
        .Key("test_accuracy")
        .Double(j.test_accuracy())
        .EndObject();
    out << w.str() << "\n";
  } else {
    out << "wrote " << EscapeUntrusted(file) << ": " << Bytes(total) << ", job "
        << EscapeUntrusted(j.job_id()) << " (model " << EscapeUntrusted(j.model())
        << ", test accuracy " << absl::StrFormat("%.4f", j.test_accuracy()) << ")\n";
  }
  return kOk;
}

int CheckpointCommand(const std::vector<std::string>& pos, const Connection& c, std::ostream& out,
                      std::ostream& err) {
  const std::string sub = pos.size() > 1 ? pos[1] : "";
  if (sub != "list" && sub != "show") {
    err << "psctl: checkpoint needs list [JOB_ID] or show [JOB_ID] [ROUND]\n";
    return kUsage;
  }
  int64_t want_round = -1;  // show: the newest round every server holds
  if (sub == "show" && pos.size() > 3 &&
      (!absl::SimpleAtoi(pos[3], &want_round) || want_round < 0)) {
    err << "psctl: checkpoint show: ROUND must be a round number\n";
    return kUsage;
  }
  JobNodes jn;
  if (int rc = FetchJobNodes(pos.size() > 2 ? pos[2] : "", c, &jn, err); rc != kOk) return rc;
  const v1::JobStatus& j = jn.job;
  struct Server {
    std::string node_id;
    uint32_t index = 0;
    std::string dir, error;
    std::vector<v1::CheckpointDescription> checkpoints;
  };
  std::vector<Server> servers;
  for (const v1::NodeJobStatus& n : j.nodes()) {
    if (n.role() != v1::ROLE_SERVER) continue;
    Server s;
    s.node_id = n.node_id();
    s.index = n.rank();
    const auto addr = jn.control.find(n.node_id());
    if (addr == jn.control.end()) {
      s.error = "not in the cluster now";
    } else {
      grpc::ClientContext ctx;
      SetDeadline(&ctx, absl::Milliseconds(c.timeout_ms));
      v1::ListCheckpointsRequest req;
      req.set_job_id(j.job_id());
      v1::ListCheckpointsResponse resp;
      grpc::Status st = NodeStub(c, addr->second)->ListCheckpoints(&ctx, req, &resp);
      if (!st.ok()) {
        s.error = st.error_message();
      } else {
        s.dir = resp.dir();
        for (const auto& d : resp.checkpoints()) {
          if (d.server_index() == s.index) s.checkpoints.push_back(d);
        }
      }
    }
    servers.push_back(std::move(s));
  }
  // The newest round every server holds: where a recovery would resume.
  std::set<uint64_t> common;
  for (size_t i = 0; i < servers.size(); ++i) {
    std::set<uint64_t> mine;
    for (const auto& d : servers[i].checkpoints) mine.insert(d.round());
    if (i == 0) {
      common = mine;
    } else {
      std::set<uint64_t> both;
      for (uint64_t r : common) {
        if (mine.count(r)) both.insert(r);
      }
      common = both;
    }
  }
  const int64_t newest_common = common.empty() ? -1 : int64_t(*common.rbegin());
  if (sub == "show" && want_round < 0) want_round = newest_common;
  const absl::Time now = absl::Now();
  if (c.json) {
    JsonWriter w;
    w.BeginObject().Key("job_id").String(j.job_id()).Key("newest_common_round").Int(newest_common);
    if (sub == "show") w.Key("round").Int(want_round);
    w.Key("servers").BeginArray();
    for (const Server& s : servers) {
      w.BeginObject()
          .Key("node_id")
          .String(s.node_id)
          .Key("server_index")
          .Uint(s.index)
          .Key("dir")
          .String(s.dir)
          .Key("error")
          .String(s.error);
      w.Key("checkpoints").BeginArray();
      for (const auto& d : s.checkpoints) {
        if (sub == "show" && int64_t(d.round()) != want_round) continue;
        w.BeginObject()
            .Key("round")
            .Uint(d.round())
            .Key("written_unix_ms")
            .Int(d.written_unix_ms())
            .Key("chunks")
            .Uint(d.chunks())
            .Key("bytes")
            .Uint(d.bytes())
            .EndObject();
      }
      w.EndArray().EndObject();
    }
    w.EndArray().EndObject();
    out << w.str() << "\n";
    return kOk;
  }
  out << "job " << EscapeUntrusted(j.job_id()) << " (" << JobStateName(j.state()) << ")\n";
  std::vector<std::vector<std::string>> rows = {
      {"NODE", "SERVER", "ROUND", "AGE", "CHUNKS", "SIZE"}};
  for (const Server& s : servers) {
    bool any = false;
    for (const auto& d : s.checkpoints) {
      if (sub == "show" && int64_t(d.round()) != want_round) continue;
      any = true;
      rows.push_back({s.node_id, absl::StrCat(s.index), absl::StrCat(d.round()),
                      Age(d.written_unix_ms(), now), absl::StrCat(d.chunks()), Bytes(d.bytes())});
    }
    if (!any) {
      const std::string why = !s.error.empty() ? "error: " + s.error
                              : s.dir.empty()  ? "(no checkpoint_dir)"
                                               : "(none)";
      rows.push_back({s.node_id, absl::StrCat(s.index), "-", "-", "-", why});
    }
  }
  out << Table(rows);
  if (sub == "show") {
    const bool complete = want_round >= 0 && common.count(uint64_t(want_round)) > 0;
    out << (complete         ? absl::StrCat("round ", want_round,
                                            ": every server holds it; a recovery can resume there\n")
            : want_round < 0 ? std::string("no round is held by every server: a recovery "
                                           "would start from round 0\n")
                             : absl::StrCat("round ", want_round, ": not every server holds it\n"));
  } else {
    out << (newest_common >= 0
                ? absl::StrCat("newest round every server holds: ", newest_common, "\n")
                : std::string("no round is held by every server\n"));
  }
  return kOk;
}

}  // namespace psctl
}  // namespace hetps
