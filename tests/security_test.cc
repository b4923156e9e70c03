// The control plane's authentication and roles, against the real schedd
// and psd binaries: every RPC refused without credentials, a node's RPCs
// refused under another node's (or an admin's) certificate, admin RPCs
// refused under a node's, and each accepted with the right identity;
// bearer tokens; certificates from another CA; refusals counted.
#include "lib/rpc/security.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "lib/rpc/grpc_util.h"
#include "tests/testing/cluster.h"

namespace hetps {
namespace testing {
namespace {

bool Refused(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
}

// Every Scheduler and Admin RPC once, on `channel`, as if for node `node`.
struct Calls {
  std::shared_ptr<grpc::Channel> channel;
  std::string node;
  std::map<std::string, grpc::Status> results;

  void RunAll() {
    auto s = v1::Scheduler::NewStub(channel);
    auto a = v1::Admin::NewStub(channel);
    auto call = [&](const std::string& name, auto fn) {
      grpc::ClientContext ctx;
      SetDeadline(&ctx, absl::Seconds(5));
      results[name] = fn(&ctx);
    };
    call("Register", [&](grpc::ClientContext* ctx) {
      v1::RegisterRequest r;
      r.set_node_id(node);
      r.set_role(v1::ROLE_WORKER);
      r.set_control_address("127.0.0.1:9");
      v1::RegisterResponse resp;
      return s->Register(ctx, r, &resp);
    });
    call("Heartbeat", [&](grpc::ClientContext* ctx) {
      v1::HeartbeatRequest r;
      r.set_node_id(node);
      r.set_incarnation(424242);
      v1::HeartbeatResponse resp;
      return s->Heartbeat(ctx, r, &resp);
    });
    call("ReportLinks", [&](grpc::ClientContext* ctx) {
      v1::ReportLinksRequest r;
      r.set_node_id(node);
      v1::ReportLinksResponse resp;
      return s->ReportLinks(ctx, r, &resp);
    });
    call("Deregister", [&](grpc::ClientContext* ctx) {
      v1::DeregisterRequest r;
      r.set_node_id(node);
      r.set_incarnation(424242);
      v1::DeregisterResponse resp;
      return s->Deregister(ctx, r, &resp);
    });
    call("ListNodes", [&](grpc::ClientContext* ctx) {
      v1::ListNodesResponse resp;
      return s->ListNodes(ctx, v1::ListNodesRequest(), &resp);
    });
    call("GetPolicy", [&](grpc::ClientContext* ctx) {
      v1::GetPolicyResponse resp;
      return s->GetPolicy(ctx, v1::GetPolicyRequest(), &resp);
    });
    call("GetJob", [&](grpc::ClientContext* ctx) {
      v1::GetJobResponse resp;
      return s->GetJob(ctx, v1::GetJobRequest(), &resp);
    });
    call("WatchMembership", [&](grpc::ClientContext* ctx) {
      auto reader = s->WatchMembership(ctx, v1::WatchMembershipRequest());
      v1::MembershipEvent ev;
      if (reader->Read(&ev)) {
        ctx->TryCancel();
        reader->Finish();
        return grpc::Status::OK;
      }
      return reader->Finish();
    });
    call("SubmitJob", [&](grpc::ClientContext* ctx) {
      v1::SubmitJobRequest r;
      r.set_spec_yaml("model: no_such_model\n");  // authorised, then refused as invalid
      v1::SubmitJobResponse resp;
      return s->SubmitJob(ctx, r, &resp);
    });
    call("CancelJob", [&](grpc::ClientContext* ctx) {
      v1::CancelJobRequest r;
      r.set_job_id("job-none");
      v1::CancelJobResponse resp;
      return s->CancelJob(ctx, r, &resp);
    });
    call("Admin.GetStatus", [&](grpc::ClientContext* ctx) {
      v1::GetStatusResponse resp;
      return a->GetStatus(ctx, v1::GetStatusRequest(), &resp);
    });
    call("Admin.GetConfig", [&](grpc::ClientContext* ctx) {
      v1::GetConfigResponse resp;
      return a->GetConfig(ctx, v1::GetConfigRequest(), &resp);
    });
  }
};

const std::vector<std::string> kNodeRpcs = {"Register", "Heartbeat", "ReportLinks", "Deregister"};
const std::vector<std::string> kReadRpcs = {
    "ListNodes", "GetPolicy", "GetJob", "WatchMembership", "Admin.GetStatus", "Admin.GetConfig"};
const std::vector<std::string> kAdminRpcs = {"SubmitJob", "CancelJob"};

Calls As(const LocalCluster& c, const TlsMaterial& m, const std::string& node,
         const std::string& token = "") {
  Calls calls{MakeSecureChannel(c.schedd_address(), m, token), node, {}};
  calls.RunAll();
  return calls;
}

TEST_CASE("every RPC needs the right identity") {
  LocalCluster c("authz");
  REQUIRE(c.StartSchedd().ok());
  auto node = c.Identity("probe-node", false);
  auto other = c.Identity("other-node", false);
  auto admin = c.Identity("admin", true);
  REQUIRE(node.ok());
  REQUIRE(other.ok());
  REQUIRE(admin.ok());
  TlsMaterial ca_only;
  ca_only.ca_pem = node->ca_pem;

  SECTION("no credentials: every RPC is UNAUTHENTICATED") {
    Calls none = As(c, ca_only, "probe-node");
    for (const auto& [rpc, st] : none.results) {
      INFO(rpc << ": " << st.error_message());
      CHECK(st.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    }
    CHECK(none.results.size() == kNodeRpcs.size() + kReadRpcs.size() + kAdminRpcs.size());
  }
  SECTION("a node's certificate: its own node RPCs and reads, not admin RPCs") {
    Calls mine = As(c, *node, "probe-node");
    for (const std::string& rpc : kNodeRpcs) {
      INFO(rpc << ": " << mine.results[rpc].error_message());
      CHECK(!Refused(mine.results[rpc]));
    }
    for (const std::string& rpc : kReadRpcs) {
      INFO(rpc << ": " << mine.results[rpc].error_message());
      CHECK(!Refused(mine.results[rpc]));
    }
    for (const std::string& rpc : kAdminRpcs) {
      INFO(rpc << ": " << mine.results[rpc].error_message());
      CHECK(mine.results[rpc].error_code() == grpc::StatusCode::PERMISSION_DENIED);
    }
    CHECK(mine.results["Register"].ok());
    CHECK(mine.results["SubmitJob"].error_message().find("needs an admin identity") !=
          std::string::npos);
  }
  SECTION("another node's certificate: PERMISSION_DENIED for this node's RPCs") {
    Calls theirs = As(c, *other, "probe-node");
    for (const std::string& rpc : kNodeRpcs) {
      INFO(rpc << ": " << theirs.results[rpc].error_message());
      CHECK(theirs.results[rpc].error_code() == grpc::StatusCode::PERMISSION_DENIED);
    }
    CHECK(theirs.results["Register"].error_message().find("other-node") != std::string::npos);
  }
  SECTION("an admin: admin RPCs and reads, but it cannot act as a node") {
    Calls adm = As(c, *admin, "probe-node");
    for (const std::string& rpc : kAdminRpcs) {
      INFO(rpc << ": " << adm.results[rpc].error_message());
      CHECK(!Refused(adm.results[rpc]));
    }
    for (const std::string& rpc : kReadRpcs) CHECK(!Refused(adm.results[rpc]));
    for (const std::string& rpc : kNodeRpcs) {
      CHECK(adm.results[rpc].error_code() == grpc::StatusCode::PERMISSION_DENIED);
    }
    CHECK(adm.results["SubmitJob"].error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("bearer tokens: the right one is an admin, a wrong one nobody") {
    std::ifstream in(c.certs_dir() + "/admin.token");
    std::string token;
    in >> token;
    REQUIRE(!token.empty());
    Calls good = As(c, ca_only, "probe-node", token);
    for (const std::string& rpc : kAdminRpcs) CHECK(!Refused(good.results[rpc]));
    CHECK(good.results["Register"].error_code() == grpc::StatusCode::PERMISSION_DENIED);
    Calls bad = As(c, ca_only, "probe-node", token + "0");
    for (const auto& [rpc, st] : bad.results) {
      CHECK(st.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    }
  }
  SECTION("a certificate from another CA does not even connect; plaintext neither") {
    LocalCluster stranger("authz_stranger");
    auto foreign = stranger.Identity("admin", true);
    REQUIRE(foreign.ok());
    foreign->ca_pem = node->ca_pem;  // trusts our CA, presents theirs
    Calls f = As(c, *foreign, "probe-node");
    for (const auto& [rpc, st] : f.results) {
      INFO(rpc << ": " << st.error_message());
      CHECK(!st.ok());
      CHECK(st.error_code() != grpc::StatusCode::PERMISSION_DENIED);
    }
    TlsMaterial plain;
    plain.insecure = true;
    Calls p = As(c, plain, "probe-node");
    for (const auto& [rpc, st] : p.results) CHECK(st.error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  SECTION("refusals are counted by method and reason") {
    As(c, ca_only, "probe-node");
    As(c, *other, "probe-node");
    absl::StatusOr<std::string> m = HttpGet(c.node("schedd").metrics_address, "/metrics");
    REQUIRE(m.ok());
    CHECK(m->find("schedd_rpc_refused_total{method=\"SubmitJob\",reason=\"unauthenticated\"} 1") !=
          std::string::npos);
    CHECK(m->find("schedd_rpc_refused_total{method=\"Register\",reason=\"permission_denied\"} 1") !=
          std::string::npos);
  }
}

TEST_CASE("a node's Admin.Drain needs an admin") {
  LocalCluster c("authz_drain");
  REQUIRE(c.StartSchedd().ok());
  REQUIRE(c.StartNode("psd", "psd-0").ok());
  auto other = c.Identity("psd-9", false);
  REQUIRE(other.ok());
  auto stub = v1::Admin::NewStub(MakeSecureChannel(c.node("psd-0").control_address, *other));
  grpc::ClientContext ctx;
  v1::DrainResponse resp;
  CHECK(stub->Drain(&ctx, v1::DrainRequest(), &resp).error_code() ==
        grpc::StatusCode::PERMISSION_DENIED);
  auto admin = c.Identity("admin", true);
  auto astub = v1::Admin::NewStub(MakeSecureChannel(c.node("psd-0").control_address, *admin));
  grpc::ClientContext ctx2;
  CHECK(astub->Drain(&ctx2, v1::DrainRequest(), &resp).ok());
  CHECK(c.WaitExit("psd-0", absl::Seconds(10)) == 0);
}

// A job's model is the admins': a node identity is refused before any
// file is looked at; a job id that is not a plain name is refused as such;
// ListCheckpoints is a read any identity may make.
TEST_CASE("Artifacts: GetModel needs an admin; job ids are plain names") {
  LocalCluster c("authz_artifacts");
  REQUIRE(c.StartSchedd().ok());
  REQUIRE(c.StartNode("workerd", "worker-0", {"--model_dir=" + c.dir() + "/models"}).ok());
  REQUIRE(c.StartNode("psd", "psd-0", {"--checkpoint_dir=" + c.dir() + "/ckpt"}).ok());
  auto node = c.Identity("psd-9", false);
  auto admin = c.Identity("admin", true);
  REQUIRE(node.ok());
  REQUIRE(admin.ok());
  auto fetch = [&](const TlsMaterial& who, const std::string& job) {
    auto stub = v1::Artifacts::NewStub(MakeSecureChannel(c.node("worker-0").control_address, who));
    grpc::ClientContext ctx;
    v1::GetModelRequest req;
    req.set_job_id(job);
    auto reader = stub->GetModel(&ctx, req);
    v1::ModelChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish().error_code();
  };
  CHECK(fetch(*node, "job-1") == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(fetch(*admin, "job-1") == grpc::StatusCode::NOT_FOUND);
  CHECK(fetch(*admin, "../../etc/passwd") == grpc::StatusCode::INVALID_ARGUMENT);
  auto psd = v1::Artifacts::NewStub(MakeSecureChannel(c.node("psd-0").control_address, *node));
  grpc::ClientContext ctx;
  v1::ListCheckpointsResponse list;
  CHECK(psd->ListCheckpoints(&ctx, v1::ListCheckpointsRequest(), &list).ok());
  CHECK(list.checkpoints_size() == 0);
  CHECK(list.dir() == c.dir() + "/ckpt");
}

}  // namespace
}  // namespace testing
}  // namespace hetps
