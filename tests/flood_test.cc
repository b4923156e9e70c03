// The default job under a flood, with the real binaries: while it trains,
// every psd and workerd gets over a million hostile datagrams (random
// bytes; valid headers with random fields; datagrams sealed under another
// key; flows of impossible sizes; captured datagrams replayed from their
// own and from another address). The job must end as a clean run of the
// same spec does (same seed: the same final accuracy, bit for bit), every
// flooded datagram must be counted under a drop reason, and no daemon may
// grow by 16 MiB or more.
#include "tests/testing/flood.h"

#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/rpc/grpc_util.h"
#include "tests/testing/cluster.h"

namespace hetps {
namespace testing {
namespace {

const char* const kNodes[][2] = {
    {"psd", "psd-0"}, {"psd", "psd-1"}, {"workerd", "worker-0"}, {"workerd", "worker-1"}};

v1::JobStatus RunDefaultJob(const LocalCluster& c) {
  ProcessResult sub = c.Psctl({"job", "submit", Runfile("deploy/jobs/mlp.yaml")});
  INFO(sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  v1::JobStatus j;
  REQUIRE(WaitFor(
      [&] {
        j = c.Job();
        return j.state() == v1::JOB_STATE_RUNNING || JobEnded(j);
      },
      absl::Seconds(60)));
  return j;
}

// <d>_data_drops_total by reason, from a daemon's /metrics.
std::map<std::string, uint64_t> Drops(const std::string& daemon, const std::string& metrics_addr) {
  std::map<std::string, uint64_t> out;
  absl::StatusOr<std::string> m = HttpGet(metrics_addr, "/metrics");
  if (!m.ok()) return out;
  std::istringstream in(*m);
  std::string line;
  const std::string prefix = daemon + "_data_drops_total{reason=\"";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t q = line.find('"', prefix.size());
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) {
      out[line.substr(prefix.size(), q - prefix.size())] = uint64_t(v);
    }
  }
  return out;
}

TEST_CASE("the default job trains through a flood of hostile datagrams", "[flood]") {
  LocalCluster c("flood");
  REQUIRE(c.StartSchedd().ok());
  for (const auto& [daemon, id] : kNodes) {
    // The job's datagrams by UDP, not through local rings: the flood
    // learns the job's key id from them and replays them, and the UDP
    // path is what a flood from elsewhere reaches.
    std::vector<std::string> flags = {"--data_local_rings=false"};
    if (std::string(daemon) == "workerd") flags.push_back("--cpu_threads=1");
    absl::Status s = c.StartNode(daemon, id, flags);
    INFO(s.message());
    REQUIRE(s.ok());
  }
  REQUIRE(WaitFor([&] { return c.AliveCount() == 5; }, absl::Seconds(15)));
  std::map<std::string, transport::Peer> data;  // node id -> data address
  {
    auto stub = c.SchedulerStub();
    grpc::ClientContext ctx;
    v1::ListNodesResponse resp;
    REQUIRE(stub->ListNodes(&ctx, v1::ListNodesRequest(), &resp).ok());
    for (const auto& n : resp.nodes()) {
      if (n.data_address().empty()) continue;
      auto hp = ParseHostPort(n.data_address());
      REQUIRE(hp.ok());
      data[n.node_id()] = *transport::ResolvePeer(*hp);
    }
  }
  REQUIRE(data.size() == 4);

  // A clean run of the default job: the reference.
  RunDefaultJob(c);
  v1::JobStatus clean;
  REQUIRE(c.WaitJobEnded(absl::Seconds(400), &clean));
  INFO("clean: " << clean.message());
  REQUIRE(clean.state() == v1::JOB_STATE_SUCCEEDED);

  // The same job again, flooded.
  std::vector<uint16_t> ports;
  for (const auto& [id, p] : data) ports.push_back(p.port);
  absl::StatusOr<std::unique_ptr<Capture>> capture = Capture::Start(ports, 4000);
  const bool can_capture = capture.ok();
  if (!can_capture) WARN("no capture (" << capture.status().message() << "): no replays");
  RunDefaultJob(c);
  // Learn from the live job's traffic: its key id and datagrams to replay.
  std::vector<Captured> captured;
  if (can_capture) {
    WaitFor([&] { return c.Job().iteration() >= 50; }, absl::Seconds(60));
    captured = (*capture)->Stop();
  }
  uint8_t key_id = 0;
  if (!captured.empty()) key_id = captured.front().bytes[5];
  std::map<std::string, uint64_t> rss_before, kernel_before;
  std::map<std::string, std::map<std::string, uint64_t>> drops_before;
  for (const auto& [daemon, id] : kNodes) {
    rss_before[id] = RssBytes(c.node(id).process.pid());
    kernel_before[id] = KernelUdpDrops(data[id].port);
    drops_before[id] = Drops(daemon, c.node(id).metrics_address);
  }
  std::map<std::string, FloodCounts> sent;
  {
    std::vector<std::thread> floods;
    absl::Mutex mu;
    uint64_t seed = 100;
    for (const auto& [daemon, id] : kNodes) {
      FloodSpec spec;
      spec.to = data[id];
      spec.per_kind = 170'000;  // x 6 kinds: over a million each
      spec.rate_per_s = 120'000;
      spec.key_id = key_id;
      spec.seed = ++seed;
      for (const Captured& cap : captured) {
        if (cap.to == spec.to) spec.replays.push_back(cap);
      }
      floods.emplace_back([&, spec, node = std::string(id)] {
        absl::StatusOr<FloodCounts> r = Flood(spec);
        absl::MutexLock lock(&mu);
        sent[node] = r.ok() ? *r : FloodCounts();
      });
    }
    for (auto& t : floods) t.join();
  }
  CHECK(!JobEnded(c.Job()));  // the flood hit a training job, start to end
  v1::JobStatus flooded;
  REQUIRE(c.WaitJobEnded(absl::Seconds(400), &flooded));

  WARN("clean accuracy " << clean.test_accuracy() << ", flooded " << flooded.test_accuracy()
                         << ", iterations " << flooded.iteration());
  INFO("flooded: " << flooded.message());
  REQUIRE(flooded.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(clean.rounds_by_deadline() == 0);
  CHECK(flooded.rounds_by_deadline() == 0);
  CHECK(flooded.iteration() == clean.iteration());
  // Same seed, every round complete: the same parameters, so the same
  // accuracy exactly.
  CHECK(flooded.test_accuracy() == clean.test_accuracy());
  CHECK(flooded.test_accuracy() > 0.8);

  for (const auto& [daemon, id] : kNodes) {
    const FloodCounts& s = sent[id];
    const uint64_t kernel = KernelUdpDrops(data[id].port) - kernel_before[id];
    std::map<std::string, uint64_t> after = Drops(daemon, c.node(id).metrics_address);
    uint64_t counted = 0;
    std::string by_reason;
    for (const auto& [reason, n] : after) {
      const uint64_t d = n - drops_before[id][reason];
      counted += d;
      if (d > 0) absl::StrAppend(&by_reason, reason, "=", d, " ");
    }
    const uint64_t rss_growth =
        std::max<int64_t>(0, int64_t(RssBytes(c.node(id).process.pid())) - int64_t(rss_before[id]));
    const std::string summary = absl::StrCat(
        id, ": sent ", s.total(), " (replays ", s.replay_same_source, " from their source, ",
        s.replay_other_source, " from elsewhere), kernel drops ", kernel, ", counted ", counted,
        ": ", by_reason, "; RSS +", rss_growth / 1024, " KiB");
    WARN(summary);  // the figures, in every run's log
    INFO(summary);
    CHECK(s.total() >= 1'000'000);
    // Every flooded datagram that reached the daemon was dropped under a
    // reason (the kernel's own overflow drops are the kernel's).
    CHECK(counted + kernel >= s.total());
    CHECK(kernel < s.total() / 20);
    CHECK(after["truncated"] + after["bad_magic"] + after["oversized"] >
          drops_before[id]["truncated"] + drops_before[id]["bad_magic"] +
              drops_before[id]["oversized"]);
    CHECK(after["bad_sequence"] - drops_before[id]["bad_sequence"] >= s.impossible_size - kernel);
    CHECK(after["forged"] - drops_before[id]["forged"] > 0);
    CHECK(after["stale_key"] - drops_before[id]["stale_key"] > 0);
    if (s.replay_same_source > 0) CHECK(after["replayed"] - drops_before[id]["replayed"] > 0);
    CHECK(rss_growth < (16u << 20));
  }
  if (can_capture) {
    uint64_t same = 0;
    for (const auto& [id, s] : sent) same += s.replay_same_source;
    CHECK(same > 0);  // raw sockets allowed wherever capture is
  }
}

}  // namespace
}  // namespace testing
}  // namespace hetps
