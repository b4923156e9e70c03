#include "clients/psctl/psctl.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <catch2/catch.hpp>
#include <sstream>

namespace hetps {
namespace psctl {
namespace {

v1::ListNodesResponse TwoNodes() {
  v1::ListNodesResponse r;
  r.set_membership_version(7);
  r.set_heartbeat_interval_ms(500);
  auto* a = r.add_nodes();
  a->set_node_id("schedd");
  a->set_role(v1::ROLE_SCHEDULER);
  a->set_state(v1::NODE_STATE_ALIVE);
  a->set_control_address("127.0.0.1:7070");
  a->mutable_capabilities()->set_cpu_cores(2);
  a->mutable_capabilities()->set_memory_bytes(24ull << 30);
  auto* b = r.add_nodes();
  b->set_node_id("worker-\"0\"");
  b->set_role(v1::ROLE_WORKER);
  b->set_state(v1::NODE_STATE_DEAD);
  b->set_control_address("127.0.0.1:4000");
  b->set_last_heartbeat_unix_ms(1'700'000'000'000);
  auto* g = b->mutable_capabilities()->add_gpus();
  g->set_name("H100");
  g->set_memory_bytes(80ull << 30);
  g->set_compute_capability(90);
  return r;
}

TEST_CASE("nodes JSON is valid and carries the documented fields") {
  absl::Time now = absl::FromUnixMillis(1'700'000'001'500);
  std::string json = NodesJson(TwoNodes(), now);
  google::protobuf::Struct parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok());
  CHECK(parsed.fields().at("membership_version").number_value() == 7);
  const auto& nodes = parsed.fields().at("nodes").list_value();
  REQUIRE(nodes.values_size() == 2);
  const auto& w = nodes.values(1).struct_value().fields();
  CHECK(w.at("node_id").string_value() == "worker-\"0\"");
  CHECK(w.at("role").string_value() == "worker");
  CHECK(w.at("state").string_value() == "dead");
  CHECK(w.at("heartbeat_age_ms").number_value() == 1500);
  const auto& caps = w.at("capabilities").struct_value().fields();
  CHECK(caps.at("gpus").list_value().values(0).struct_value().fields().at("name").string_value() ==
        "H100");
  const auto& s = nodes.values(0).struct_value().fields();
  CHECK(s.at("capabilities").struct_value().fields().at("cpu_cores").number_value() == 2);
}

TEST_CASE("nodes table has a header, one row per node and a summary") {
  std::string t = NodesTable(TwoNodes(), absl::FromUnixMillis(1'700'000'001'500));
  CHECK(t.rfind("NODE_ID", 0) == 0);
  CHECK(t.find("24.0 GiB") != std::string::npos);
  CHECK(t.find("1 (H100)") != std::string::npos);
  CHECK(t.find("1.5s") != std::string::npos);
  CHECK(t.find("1 alive of 2 listed; membership version 7") != std::string::npos);
}

TEST_CASE("status JSON for a server node parses") {
  v1::GetStatusResponse r;
  r.set_node_id("psd-0");
  r.set_role(v1::ROLE_SERVER);
  r.set_serving_state(v1::SERVING_STATE_SERVING);
  r.set_scheduler_connected(true);
  r.set_start_unix_ms(1000);
  google::protobuf::Struct parsed;
  REQUIRE(google::protobuf::util::JsonStringToMessage(StatusJson(r, absl::FromUnixMillis(3000)),
                                                      &parsed)
              .ok());
  CHECK(parsed.fields().at("serving_state").string_value() == "serving");
  CHECK(parsed.fields().at("uptime_seconds").number_value() == 2);
  CHECK(parsed.fields().at("scheduler_connected").bool_value());
  CHECK(StatusTable(r, absl::FromUnixMillis(3000)).find("(connected)") != std::string::npos);
}

TEST_CASE("usage errors exit 2 with the message on stderr") {
  std::ostringstream out, err;
  CHECK(Run({}, out, err) == kUsage);
  CHECK(Run({"frobnicate"}, out, err) == kUsage);
  CHECK(Run({"nodes", "-o", "yaml"}, out, err) == kUsage);
  CHECK(Run({"nodes", "--bogus"}, out, err) == kUsage);
  CHECK(Run({"--endpoint", "nocolon", "nodes"}, out, err) == kUsage);
  CHECK(Run({"status", "extra"}, out, err) == kUsage);
  CHECK(out.str().empty());
  CHECK(err.str().find("usage: psctl") != std::string::npos);
}

TEST_CASE("help goes to stdout and exits 0") {
  std::ostringstream out, err;
  CHECK(Run({"help"}, out, err) == kOk);
  CHECK(out.str().find("exit codes") != std::string::npos);
}

TEST_CASE("an endpoint nobody listens on exits 4") {
  std::ostringstream out, err;
  // Port 1 on loopback: reserved, nothing listens there.
  CHECK(Run({"--endpoint=127.0.0.1:1", "--timeout_ms=2000", "--insecure", "nodes"}, out, err) ==
        kUnavailable);
  // Without TLS settings (or --insecure) psctl says how to give them.
  CHECK(Run({"--endpoint=127.0.0.1:1", "nodes"}, out, err) == kUsage);
  CHECK(err.str().find("endpoint unavailable") != std::string::npos);
  CHECK(out.str().empty());
}

}  // namespace
}  // namespace psctl
}  // namespace hetps
