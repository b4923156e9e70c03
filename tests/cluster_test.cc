// Real binaries on 127.0.0.1 with ephemeral ports: a 5-node cluster
// (1 schedd, 2 psd, 2 workerd), failure detection, restart, drain.
#include "tests/testing/cluster.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <mutex>
#include <thread>

#include "lib/rpc/grpc_util.h"

namespace hetps {
namespace testing {
namespace {

// Collects WatchMembership events with their arrival times on a thread.
class Watcher {
 public:
  explicit Watcher(const LocalCluster& c) : stub_(c.SchedulerStub()) {
    reader_ = stub_->WatchMembership(&ctx_, v1::WatchMembershipRequest());
    thread_ = std::thread([this] {
      v1::MembershipEvent e;
      while (reader_->Read(&e)) {
        std::lock_guard<std::mutex> l(mu_);
        events_.push_back({e, absl::Now()});
      }
    });
  }
  ~Watcher() {
    ctx_.TryCancel();
    thread_.join();
  }
  // First event of `kind` for `node_id` after index `from`; returns its time.
  bool Find(v1::MembershipEvent::Kind kind, const std::string& node_id, absl::Time* at,
            v1::MembershipEvent* out = nullptr) {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [e, t] : events_) {
      if (e.kind() == kind && e.node().node_id() == node_id) {
        *at = t;
        if (out) *out = e;
        return true;
      }
    }
    return false;
  }
  bool GotSnapshot() {
    std::lock_guard<std::mutex> l(mu_);
    return !events_.empty() && events_[0].first.kind() == v1::MembershipEvent::KIND_SNAPSHOT;
  }

 private:
  std::unique_ptr<v1::Scheduler::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::MembershipEvent>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::pair<v1::MembershipEvent, absl::Time>> events_;
};

void StartFiveNodes(LocalCluster& c) {
  REQUIRE(c.StartSchedd().ok());
  for (const char* id : {"psd-0", "psd-1"}) {
    absl::Status s = c.StartNode("psd", id);
    INFO(s.message());
    REQUIRE(s.ok());
  }
  for (const char* id : {"worker-0", "worker-1"}) {
    absl::Status s = c.StartNode("workerd", id);
    INFO(s.message());
    REQUIRE(s.ok());
  }
  REQUIRE(WaitFor([&] { return c.AliveCount() == 5; }, absl::Seconds(15)));
}

TEST_CASE("psctl nodes -o json lists 5 live nodes with roles and capabilities") {
  LocalCluster c("five");
  StartFiveNodes(c);
  ProcessResult r = c.Psctl({"nodes", "-o", "json"});
  INFO(r.stderr_text);
  REQUIRE(r.exit_code == 0);
  google::protobuf::Struct parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(r.stdout_text, &parsed).ok());
  const auto& nodes = parsed.fields().at("nodes").list_value();
  REQUIRE(nodes.values_size() == 5);
  std::map<std::string, int> roles;
  for (const auto& v : nodes.values()) {
    const auto& f = v.struct_value().fields();
    CHECK(f.at("state").string_value() == "alive");
    ++roles[f.at("role").string_value()];
    const auto& caps = f.at("capabilities").struct_value().fields();
    CHECK(caps.at("cpu_cores").number_value() >= 1);
    CHECK(caps.at("memory_bytes").number_value() > 0);
    CHECK(caps.at("gpus").has_list_value());
    CHECK_FALSE(f.at("control_address").string_value().empty());
    CHECK_FALSE(f.at("metrics_address").string_value().empty());
  }
  CHECK(roles["scheduler"] == 1);
  CHECK(roles["server"] == 2);
  CHECK(roles["worker"] == 2);

  ProcessResult table = c.Psctl({"nodes"});
  CHECK(table.exit_code == 0);
  CHECK(table.stdout_text.find("5 alive of 5 listed") != std::string::npos);
  ProcessResult status = c.Psctl({"status", "-o", "json"});
  CHECK(status.exit_code == 0);
  CHECK(status.stdout_text.find("\"server\":2") != std::string::npos);
  CHECK(status.stdout_text.find("\"worker\":2") != std::string::npos);

  // A node's own Admin endpoint answers too.
  ProcessResult node_status = c.Psctl({"status", "-o", "json"}, c.node("psd-0").control_address);
  CHECK(node_status.exit_code == 0);
  CHECK(node_status.stdout_text.find("\"scheduler_connected\":true") != std::string::npos);
  ProcessResult cfg = c.Psctl({"config"}, c.node("psd-0").control_address);
  CHECK(cfg.exit_code == 0);
  CHECK(cfg.stdout_text.find("node_id") != std::string::npos);
  CHECK(cfg.stdout_text.find("flag") != std::string::npos);
}

TEST_CASE("SIGKILLed workerd is dead within 3 heartbeat intervals; restart brings it back") {
  LocalCluster c("kill", /*heartbeat_interval_ms=*/300);
  StartFiveNodes(c);
  Watcher watch(c);
  REQUIRE(WaitFor([&] { return watch.GotSnapshot(); }, absl::Seconds(5)));

  absl::Time killed = absl::Now();
  c.Kill("worker-1", SIGKILL);
  absl::Time died;
  REQUIRE(WaitFor([&] { return watch.Find(v1::MembershipEvent::KIND_DIED, "worker-1", &died); },
                  absl::Seconds(10)));
  absl::Duration detect = died - killed;
  absl::Duration interval = absl::Milliseconds(c.heartbeat_interval_ms());
  INFO("detected after " << absl::FormatDuration(detect));
  // Recorded in the test log for the acceptance note.
  std::printf("death detection: %.0f ms after SIGKILL (heartbeat interval %d ms)\n",
              absl::ToDoubleMilliseconds(detect), c.heartbeat_interval_ms());
  // Declared dead 3 intervals after its last heartbeat, which came at most one
  // interval before the kill; the reaper ticks every interval/50 and the
  // event still has to cross gRPC, hence the small allowance.
  CHECK(detect <= 3 * interval + interval / 50 + absl::Milliseconds(100));
  CHECK(detect >= 2 * interval - absl::Milliseconds(50));
  CHECK(c.AliveCount() == 4);

  // The other nodes were not disturbed.
  absl::Time unused;
  CHECK_FALSE(watch.Find(v1::MembershipEvent::KIND_DIED, "worker-0", &unused));
  CHECK_FALSE(watch.Find(v1::MembershipEvent::KIND_DIED, "psd-0", &unused));

  REQUIRE(c.StartNode("workerd", "worker-1").ok());
  v1::MembershipEvent joined;
  REQUIRE(WaitFor(
      [&] {
        v1::MembershipEvent e;
        if (!watch.Find(v1::MembershipEvent::KIND_JOINED, "worker-1", &unused, &e)) return false;
        joined = e;
        return true;
      },
      absl::Seconds(10)));
  CHECK(joined.node().state() == v1::NODE_STATE_ALIVE);
  REQUIRE(WaitFor([&] { return c.AliveCount() == 5; }, absl::Seconds(5)));

  ProcessResult all = c.Psctl({"nodes", "--all", "-o", "json"});
  CHECK(all.exit_code == 0);
  CHECK(all.stdout_text.find("\"dead\"") == std::string::npos);  // worker-1 alive again
}

TEST_CASE("SIGTERM and Admin.Drain leave the cluster cleanly with exit 0") {
  LocalCluster c("drain");
  StartFiveNodes(c);
  Watcher watch(c);
  REQUIRE(WaitFor([&] { return watch.GotSnapshot(); }, absl::Seconds(5)));

  c.Kill("psd-1", SIGTERM);
  CHECK(c.WaitExit("psd-1", absl::Seconds(10)) == 0);
  absl::Time at;
  CHECK(WaitFor([&] { return watch.Find(v1::MembershipEvent::KIND_LEFT, "psd-1", &at); },
                absl::Seconds(5)));

  ProcessResult drain = c.Psctl({"drain"}, c.node("worker-0").control_address);
  CHECK(drain.exit_code == 0);
  CHECK(c.WaitExit("worker-0", absl::Seconds(10)) == 0);
  CHECK(WaitFor([&] { return watch.Find(v1::MembershipEvent::KIND_LEFT, "worker-0", &at); },
                absl::Seconds(5)));
  CHECK_FALSE(watch.Find(v1::MembershipEvent::KIND_DIED, "psd-1", &at));
  CHECK(c.AliveCount() == 3);

  // schedd itself: SIGTERM -> exit 0; psctl then reports unavailable (4).
  c.Kill("schedd", SIGTERM);
  CHECK(c.WaitExit("schedd", absl::Seconds(10)) == 0);
  ProcessResult gone = c.Psctl({"nodes"});
  CHECK(gone.exit_code == 4);
  CHECK(gone.stdout_text.empty());
  CHECK(gone.stderr_text.find("unavailable") != std::string::npos);
}

TEST_CASE("nodes re-register after schedd restarts") {
  LocalCluster c("restart");
  StartFiveNodes(c);
  std::string addr = c.schedd_address();
  c.Kill("schedd", SIGKILL);
  c.WaitExit("schedd", absl::Seconds(5));
  // Restart on the same port so the nodes' configured address stays valid.
  std::string port = addr.substr(addr.rfind(':') + 1);
  std::vector<std::string> argv = {Runfile("daemons/schedd/schedd"), "--listen=" + addr,
                                   "--metrics_listen=127.0.0.1:0", "--heartbeat_interval_ms=300"};
  for (const std::string& f : c.TlsFlags("schedd")) argv.push_back(f);
  absl::StatusOr<Process> p = Process::Start(argv, c.dir(), "schedd2");
  REQUIRE(p.ok());
  CHECK(WaitFor([&] { return c.AliveCount() == 5; }, absl::Seconds(20)));
}

TEST_CASE("a second daemon with a live node's id exits 2; the first is unharmed") {
  LocalCluster c("dupid");
  REQUIRE(c.StartSchedd().ok());
  REQUIRE(c.StartNode("psd", "psd-0").ok());
  REQUIRE(WaitFor([&] { return c.AliveCount() == 2; }, absl::Seconds(10)));
  auto incarnation = [&] {
    auto stub = c.SchedulerStub();
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(2));
    v1::ListNodesResponse resp;
    stub->ListNodes(&ctx, v1::ListNodesRequest(), &resp);
    for (const auto& n : resp.nodes()) {
      if (n.node_id() == "psd-0" && n.state() == v1::NODE_STATE_ALIVE) return n.incarnation();
    }
    return uint64_t{0};
  };
  const uint64_t before = incarnation();
  REQUIRE(before != 0);
  std::vector<std::string> argv = {Runfile("daemons/psd/psd"),
                                   "--node_id=psd-0",
                                   "--listen=127.0.0.1:0",
                                   "--metrics_listen=127.0.0.1:0",
                                   "--scheduler=" + c.schedd_address(),
                                   "--register_conflict_timeout_ms=1500"};
  for (const std::string& f : c.TlsFlags("psd-0")) argv.push_back(f);
  absl::StatusOr<Process> twin = Process::Start(argv, c.dir(), "psd-0-twin");
  REQUIRE(twin.ok());
  CHECK(twin->Wait(absl::Seconds(20)) == 2);
  const std::string why = twin->Stderr();
  INFO(why);
  CHECK(why.find("psd: node id 'psd-0' is alive at " + c.node("psd-0").control_address) !=
        std::string::npos);
  CHECK(why.find("give this daemon another node_id") != std::string::npos);
  // The original kept its incarnation (no re-registration storm) and lives.
  CHECK(incarnation() == before);
  CHECK(c.AliveCount() == 2);
  // schedd's log names both addresses.
  const std::string log = c.node("schedd").process.Stderr();
  CHECK(log.find("register rejected") != std::string::npos);
  CHECK(log.find("alive at " + c.node("psd-0").control_address) != std::string::npos);
}

TEST_CASE("links are reported by live nodes, checked, and listed; no policy without a job") {
  LocalCluster c("links");
  REQUIRE(c.StartSchedd().ok());
  auto stub = c.SchedulerStub();
  {
    grpc::ClientContext ctx;
    v1::GetPolicyResponse resp;
    CHECK(stub->GetPolicy(&ctx, v1::GetPolicyRequest(), &resp).error_code() ==
          grpc::StatusCode::NOT_FOUND);
  }
  auto report = [&](const std::string& from, double Bps) {
    grpc::ClientContext ctx;
    v1::ReportLinksResponse resp;
    v1::ReportLinksRequest req;
    req.set_node_id("w");
    v1::LinkReport* l = req.add_links();
    l->set_from_node_id(from);
    l->set_to_node_id("w");
    l->set_throughput_bytes_per_second(Bps);
    return c.SchedulerStubAs("w", false)->ReportLinks(&ctx, req, &resp).error_code();
  };
  CHECK(report("p", 1e6) == grpc::StatusCode::NOT_FOUND);  // not registered
  {
    grpc::ClientContext ctx;
    v1::RegisterRequest r;
    r.set_node_id("w");
    r.set_role(v1::ROLE_WORKER);
    r.set_control_address("127.0.0.1:9");
    v1::RegisterResponse resp;
    REQUIRE(c.SchedulerStubAs("w", false)->Register(&ctx, r, &resp).ok());
  }
  CHECK(report("p", 1e6) == grpc::StatusCode::OK);
  CHECK(report("q", -5) == grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext ctx;
  v1::ListLinksResponse links;
  REQUIRE(stub->ListLinks(&ctx, v1::ListLinksRequest(), &links).ok());
  REQUIRE(links.links_size() == 1);
  CHECK(links.links(0).from_node_id() == "p");
  CHECK(links.links(0).throughput_bytes_per_second() == 1e6);
  CHECK(links.links(0).measured_unix_ms() <= links.now_unix_ms());
}

TEST_CASE("bad Register requests are rejected and counted") {
  LocalCluster c("badreg");
  REQUIRE(c.StartSchedd().ok());
  auto stub = c.SchedulerStubAs("w", false);  // node "w"'s certificate
  auto reg = [&](v1::RegisterRequest req) {
    grpc::ClientContext ctx;
    v1::RegisterResponse resp;
    return stub->Register(&ctx, req, &resp).error_code();
  };
  v1::RegisterRequest ok;
  ok.set_node_id("w");
  ok.set_role(v1::ROLE_WORKER);
  ok.set_control_address("127.0.0.1:5");
  CHECK(reg(ok) == grpc::StatusCode::OK);
  v1::RegisterRequest r = ok;
  r.set_node_id("");
  CHECK(reg(r) == grpc::StatusCode::PERMISSION_DENIED);  // not the certificate's node id
  r = ok;
  r.set_role(v1::ROLE_SCHEDULER);
  CHECK(reg(r) == grpc::StatusCode::INVALID_ARGUMENT);
  r = ok;
  r.set_control_address("not an address");
  CHECK(reg(r) == grpc::StatusCode::INVALID_ARGUMENT);
  r = ok;
  r.set_role(static_cast<v1::Role>(77));
  CHECK(reg(r) == grpc::StatusCode::INVALID_ARGUMENT);
  absl::StatusOr<std::string> metrics = HttpGet(c.node("schedd").metrics_address, "/metrics");
  REQUIRE(metrics.ok());
  CHECK(
      metrics->find("schedd_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"Register\"} 3") !=
      std::string::npos);
}

}  // namespace
}  // namespace testing
}  // namespace hetps
