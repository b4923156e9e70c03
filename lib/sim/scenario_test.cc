// Scenarios: parsing rejects bad files with the key named; the scenario
// files shipped in bench/scenarios run and give the results docs/simulator.md
// reports (deterministic: the same seed gives the same rates and decisions).
#include "lib/sim/scenario.h"

#include <catch2/catch.hpp>
#include <map>

namespace hetps {
namespace sim {
namespace {

std::map<std::string, PolicyResult> Run(const std::string& file) {
  auto s = LoadScenario("bench/scenarios/" + file);
  REQUIRE(s.ok());
  auto r = RunScenario(*s, nullptr);
  REQUIRE(r.ok());
  std::map<std::string, PolicyResult> out;
  for (auto& p : *r) out[p.policy] = p;
  return out;
}

constexpr char kMinimal[] = R"(
name: t
horizon_s: 10
model_bytes: 1e6
network:
  kind: overlay
  nodes: 3
  links: [[0, 1], [1, 2]]
  rate_mbit_s: [8, 8]
policy:
  run: [star, fapt]
)";

}  // namespace

TEST_CASE("scenario files parse; bad ones are rejected naming the key", "[sim]") {
  auto ok = ParseScenario(kMinimal);
  REQUIRE(ok.ok());
  CHECK(ok->baseline == "star");
  CHECK(ok->rate_min_Bps == 1e6);
  auto expect_error = [](const std::string& from, const std::string& to, const std::string& key) {
    std::string text = kMinimal;
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    auto s = ParseScenario(text);
    CAPTURE(to);
    REQUIRE_FALSE(s.ok());
    CHECK(std::string(s.status().message()).find(key) != std::string::npos);
  };
  expect_error("horizon_s: 10", "horizon_s: -1", "horizon_s");
  expect_error("horizon_s: 10", "horizon_s: soon", "horizon_s");
  expect_error("model_bytes: 1e6", "", "model_bytes");
  expect_error("kind: overlay", "kind: mesh", "network.kind");
  expect_error("nodes: 3", "nodes: 1", "network.nodes");
  expect_error("[8, 8]", "[8]", "rate_mbit_s");
  expect_error("rate_mbit_s: [8, 8]", "rates_mbit_s: [8, 8, 8]", "kind: access");
  expect_error("run: [star, fapt]", "run: [star, teleport]", "unknown policy 'teleport'");
  expect_error("run: [star, fapt]", "run: [star, adlb-exact]", "needs network.kind access");
  expect_error("run: [star, fapt]", "run: []", "policy.run");
  CHECK(!ParseScenario("[1, 2").ok());
  CHECK(!ParseScenario("- a list").ok());
  CHECK(LoadScenario("/nonexistent.yaml").status().code() == absl::StatusCode::kNotFound);
  // Link errors surface when the network is built.
  for (const char* links : {"[[0, 1], [1, 0]]", "[[0, 1], [1, 5]]"}) {
    std::string text = kMinimal;
    text.replace(text.find("[[0, 1], [1, 2]]"), 16, links);
    auto s = ParseScenario(text);
    REQUIRE(s.ok());
    auto r = RunScenario(*s, nullptr);
    REQUIRE_FALSE(r.ok());
    CHECK(std::string(r.status().message()).find("network.links") != std::string::npos);
  }
}

TEST_CASE("given host rates: the testbed scenario, and its checks", "[sim]") {
  auto s = LoadScenario("bench/scenarios/adaptive-4host.yaml");
  REQUIRE(s.ok());
  CHECK(s->fixed_rates_Bps == std::vector<double>{12.5e6, 6.25e6, 3.125e6, 1.25e6});
  std::string text =
      "name: t\nhorizon_s: 10\nmodel_bytes: 1e6\nnetwork:\n  kind: access\n  nodes: 3\n"
      "  rates_mbit_s: [8, 4]\npolicy:\n  run: [average]\n";
  auto bad = ParseScenario(text);
  REQUIRE_FALSE(bad.ok());
  INFO(bad.status().message());
  CHECK(std::string(bad.status().message()).find("one rate per node") != std::string::npos);
  // ADLB's exact optimum beats Average on it, as bench/adaptive.sh expects.
  auto r = Run("adaptive-4host.yaml");
  CHECK(r["adlb-exact"].speedup >= 1.3);
}

TEST_CASE("WLBS: within 10% of the ideal split; an equal split is at least 1.6x slower", "[sim]") {
  auto r = Run("wlbs-straggler.yaml");
  const double ideal = r["wlbs-ideal"].mean_iteration_s;
  CHECK(r["wlbs"].mean_iteration_s <= 1.10 * ideal);
  CHECK(r["wlbs-equal"].mean_iteration_s >= 1.6 * ideal);
  // Deterministic: a second run gives the same rounds.
  auto again = Run("wlbs-straggler.yaml");
  CHECK(again["wlbs"].rounds.size() == r["wlbs"].rounds.size());
  CHECK(again["wlbs"].mean_iteration_s == r["wlbs"].mean_iteration_s);
}

TEST_CASE("ADLB: the exact solver at least 1.3x Average on the 12-node scenario", "[sim]") {
  auto r = Run("adlb-12node.yaml");
  CHECK(r["adlb-exact"].speedup >= 1.3);
  CHECK(r["elastic"].speedup > 1.0);
  CHECK(r["average"].speedup == 1.0);
}

TEST_CASE("9-DC WAN: STAR < BKT < MST < FAPT; packed multi-root with auxiliary paths >= 5x STAR",
          "[sim]") {
  auto r = Run("wan-9dc.yaml");
  // The issue's order, with our pipelined FAPT (Theorem 1's FAPT is shown
  // too and, with chunks pipelined, loses to MST: docs/simulator.md).
  CHECK(r["bkt"].speedup > r["star"].speedup);
  CHECK(r["mst"].speedup > r["bkt"].speedup);
  CHECK(r["fapt-pipelined"].speedup > r["mst"].speedup);
  CHECK(r["mr-packed-aux"].speedup >= 5.0);
  CHECK(r["mr-packed"].speedup >= 5.0);
  CHECK(r["mr-packed"].speedup > r["mr-fapt"].speedup);
  for (const char* p : {"fapt", "mr-fapt", "mr-fapt-aux", "mr-shared"}) {
    CAPTURE(p);
    CHECK(r[p].speedup > 2.0);
  }
  CHECK(r["mr-fapt"].speedup > r["fapt"].speedup);
  CHECK(r["mr-fapt-aux"].auxiliary_fraction > 0.05);
  CHECK(r["star"].auxiliary_fraction == 0);
}

TEST_CASE("the table and the plot name every policy", "[sim]") {
  auto s = ParseScenario(kMinimal);
  REQUIRE(s.ok());
  auto r = RunScenario(*s, nullptr);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  CHECK((*r)[0].rounds.size() > 1);
  const std::string table = FormatTable(*s, *r);
  const std::string svg = PlotSvg(*s, *r);
  for (const char* p : {"star", "fapt"}) {
    CHECK(table.find(std::string("| ") + p + " |") != std::string::npos);
    CHECK(svg.find(std::string(">") + p + " (") != std::string::npos);
  }
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
}

}  // namespace sim
}  // namespace hetps
