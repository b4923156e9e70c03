// psctl links and psctl policy show: what schedd measured of the network
// (ListLinks) and the plans it made from it (GetPolicy); docs/plan.md.
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/psctl/internal.h"
#include "clients/psctl/psctl.h"
#include "lib/base/json_writer.h"
#include "lib/rpc/grpc_util.h"
#include "proto/hetps/v1/scheduler.grpc.pb.h"

namespace hetps {
namespace psctl {
namespace {

std::string Rate(double bytes_per_s) {
  return absl::StrFormat("%.1f Mbit/s", bytes_per_s * 8 / 1e6);
}

void PolicyJson(const v1::Policy& p, JsonWriter* w) {
  w->BeginObject();
  w->Key("version").Uint(p.version());
  w->Key("job_id").String(p.job_id());
  w->Key("recovery_epoch").Uint(p.recovery_epoch());
  w->Key("load_policy").String(p.load_policy());
  w->Key("issued_unix_ms").Int(p.issued_unix_ms());
  w->Key("changed_fraction").Double(p.changed_fraction());
  w->Key("server_throughput_bytes_per_second").BeginArray();
  for (double r : p.server_throughput_bytes_per_second()) w->Double(r);
  w->EndArray();
  w->Key("server_chunks").BeginArray();
  for (int64_t c : p.server_chunks()) w->Int(c);
  w->EndArray();
  w->Key("chunk_server").BeginArray();
  for (uint32_t s : p.chunk_server()) w->Uint(s);
  w->EndArray();
  w->Key("worker_batches").BeginArray();
  for (const v1::WorkerBatch& b : p.worker_batches()) {
    w->BeginObject().Key("worker").String(b.worker_node_id());
    w->Key("batch_size").Uint(b.batch_size()).EndObject();
  }
  w->EndArray();
  w->EndObject();
}

std::vector<std::string> PolicyRow(const v1::Policy& p, absl::Time now) {
  std::string chunks, rates, batches;
  for (int64_t c : p.server_chunks()) absl::StrAppend(&chunks, chunks.empty() ? "" : "/", c);
  for (const v1::WorkerBatch& b : p.worker_batches()) {
    absl::StrAppend(&batches, batches.empty() ? "" : "/", b.batch_size());
  }
  for (double r : p.server_throughput_bytes_per_second()) {
    absl::StrAppend(&rates, rates.empty() ? "" : " ", absl::StrFormat("%.1f", r * 8 / 1e6));
  }
  return {absl::StrCat(p.version()),
          p.load_policy(),
          p.issued_unix_ms() > 0 ? Age(p.issued_unix_ms(), now) : "-",
          absl::StrFormat("%.0f%%", 100 * p.changed_fraction()),
          chunks,
          rates.empty() ? "-" : rates,
          batches.empty() ? "-" : batches};
}

}  // namespace

int LinksCommand(const Connection& c, std::ostream& out, std::ostream& err) {
  auto stub = v1::Scheduler::NewStub(c.channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(c.timeout_ms));
  v1::ListLinksResponse resp;
  grpc::Status s = stub->ListLinks(&ctx, v1::ListLinksRequest(), &resp);
  if (!s.ok()) return RpcFailure(s, c.endpoint, err);
  const absl::Time now = absl::FromUnixMillis(resp.now_unix_ms());
  if (c.json) {
    JsonWriter w;
    w.BeginObject().Key("now_unix_ms").Int(resp.now_unix_ms()).Key("links").BeginArray();
    for (const v1::LinkReport& l : resp.links()) {
      w.BeginObject();
      w.Key("from").String(l.from_node_id());
      w.Key("to").String(l.to_node_id());
      w.Key("throughput_bytes_per_second").Double(l.throughput_bytes_per_second());
      w.Key("rtt_ms").Double(l.rtt_ms());
      w.Key("bytes_observed").Uint(l.bytes_observed());
      w.Key("flow_bytes").Uint(l.flow_bytes());
      w.Key("age_ms").Int(resp.now_unix_ms() - l.measured_unix_ms());
      w.Key("probed_ms_ago")
          .Int(resp.now_unix_ms() - l.measured_unix_ms() + int64_t(l.sample_age_ms()));
      w.Key("probes").BeginArray();
      for (const v1::LinkProbe& p : l.probes()) {
        w.BeginObject().Key("bytes_per_second").Double(p.bytes_per_second());
        w.Key("probed_ms_ago").Int(resp.now_unix_ms() - l.measured_unix_ms() + int64_t(p.age_ms()));
        w.EndObject();
      }
      w.EndArray();
      w.EndObject();
    }
    w.EndArray().EndObject();
    out << w.str() << "\n";
    return kOk;
  }
  if (resp.links_size() == 0) {
    out << "no links measured yet (jobs with an adaptive load_policy report them)\n";
    return kOk;
  }
  std::vector<std::vector<std::string>> rows = {{"FROM", "TO", "RATE", "RTT", "AGE", "PROBED"}};
  for (const v1::LinkReport& l : resp.links()) {
    rows.push_back({l.from_node_id(), l.to_node_id(), Rate(l.throughput_bytes_per_second()),
                    l.rtt_ms() > 0 ? absl::StrFormat("%.2f ms", l.rtt_ms()) : "-",
                    Age(l.measured_unix_ms(), now),
                    Age(l.measured_unix_ms() - int64_t(l.sample_age_ms()), now)});
  }
  out << Table(rows);
  return kOk;
}

int PolicyCommand(const std::vector<std::string>& pos, const Connection& c, std::ostream& out,
                  std::ostream& err) {
  if (pos.size() < 2 || pos[1] != "show") {
    err << "psctl: policy takes 'show'\n";
    return kUsage;
  }
  auto stub = v1::Scheduler::NewStub(c.channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Milliseconds(c.timeout_ms));
  v1::GetPolicyResponse resp;
  grpc::Status s = stub->GetPolicy(&ctx, v1::GetPolicyRequest(), &resp);
  if (!s.ok()) return RpcFailure(s, c.endpoint, err);
  if (c.json) {
    JsonWriter w;
    w.BeginObject().Key("policy");
    PolicyJson(resp.policy(), &w);
    w.Key("history").BeginArray();
    for (const v1::Policy& p : resp.history()) PolicyJson(p, &w);
    w.EndArray();
    w.Key("last_decision").String(resp.last_decision());
    w.Key("settled_unix_ms").Int(resp.settled_unix_ms());
    w.Key("decisions").BeginArray();
    for (const v1::PolicyDecision& d : resp.decisions()) {
      w.BeginObject().Key("unix_ms").Int(d.unix_ms()).Key("why").String(d.why());
      w.Key("server_throughput_bytes_per_second").BeginArray();
      for (double r : d.server_throughput_bytes_per_second()) w.Double(r);
      w.EndArray();
      w.Key("server_throughput_source").BeginArray();
      for (const std::string& from : d.server_throughput_source()) w.String(from);
      w.EndArray().EndObject();
    }
    w.EndArray();
    w.EndObject();
    out << w.str() << "\n";
    return kOk;
  }
  const absl::Time now = absl::Now();
  out << "job " << resp.policy().job_id() << ": plan version " << resp.policy().version()
      << " in force at schedd";
  if (resp.policy().version() > 1) {
    out << (resp.settled_unix_ms() > 0
                ? absl::StrFormat(", settled %.1f s after it was issued",
                                  (resp.settled_unix_ms() - resp.policy().issued_unix_ms()) / 1e3)
                : std::string(", switching (a psd has not closed its first round)"));
  }
  out << "\nlast decision: " << resp.last_decision() << "\n";
  // The latest few decisions, with the host readings each was made from.
  const int shown = std::min(resp.decisions_size(), 5);
  if (shown > 1) out << "decisions before it (newest last):\n";
  for (int i = resp.decisions_size() - shown; i + 1 < resp.decisions_size(); ++i) {
    const v1::PolicyDecision& d = resp.decisions(i);
    std::vector<std::string> mbit;
    for (double r : d.server_throughput_bytes_per_second()) {
      mbit.push_back(absl::StrFormat("%.0f", r * 8 / 1e6));
    }
    out << "  " << Age(d.unix_ms(), now) << " ago: " << d.why();
    if (!mbit.empty()) out << " (psd Mbit/s " << absl::StrJoin(mbit, "/") << ")";
    out << "\n";
  }
  out << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"VERSION", "POLICY", "ISSUED", "CHANGED", "CHUNKS/PSD", "PSD MBIT/S", "BATCH/WORKER"}};
  for (const v1::Policy& p : resp.history()) rows.push_back(PolicyRow(p, now));
  rows.push_back(PolicyRow(resp.policy(), now));
  out << Table(rows);
  return kOk;
}

}  // namespace psctl
}  // namespace hetps
