#include "lib/sim/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/splitmix.h"
#include "lib/base/status_macros.h"
#include "lib/policy/adlb.h"
#include "lib/policy/netstorm.h"
#include "lib/policy/policy_value.h"
#include "lib/policy/wlbs.h"
#include "lib/sim/round_sim.h"

namespace hetps {
namespace sim {
namespace {

using policy::AggregationTree;
using policy::Route;

const std::vector<std::string>& OverlayPolicies() {
  static const auto* p = new std::vector<std::string>{
      "star",        "bkt",       "mst",           "fapt",      "fapt-pipelined", "mr-fapt",
      "mr-fapt-aux", "mr-shared", "mr-shared-aux", "mr-packed", "mr-packed-aux"};
  return *p;
}
const std::vector<std::string>& LoadPolicies() {
  static const auto* p =
      new std::vector<std::string>{"average", "elastic", "adlb-alg1", "adlb-exact"};
  return *p;
}
const std::vector<std::string>& BatchPolicies() {
  static const auto* p = new std::vector<std::string>{"wlbs-equal", "wlbs", "wlbs-ideal"};
  return *p;
}
bool In(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

uint64_t SplitMix(uint64_t x) { return Mix64(x + SplitMix64::kGamma); }
// Uniform in [0, 1) from (seed, a, b): the same for every policy.
double Uniform(uint64_t seed, uint64_t a, uint64_t b) {
  const uint64_t h = SplitMix(seed ^ SplitMix(a * 0x100000001b3ULL ^ SplitMix(b + 7)));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// --- YAML helpers: every error names the key.
template <typename T>
absl::Status Get(const YAML::Node& n, const std::string& key, T* out, bool required) {
  const YAML::Node v = n[key];
  if (!v) {
    return required ? absl::InvalidArgumentError(absl::StrCat("scenario: missing ", key))
                    : absl::OkStatus();
  }
  try {
    *out = v.as<T>();
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("scenario: ", key, ": ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> KnownPolicies() {
  std::vector<std::string> all = OverlayPolicies();
  all.insert(all.end(), LoadPolicies().begin(), LoadPolicies().end());
  all.insert(all.end(), BatchPolicies().begin(), BatchPolicies().end());
  return all;
}

absl::StatusOr<Scenario> ParseScenario(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("scenario: not YAML: ", e.what()));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError("scenario: expected a mapping");
  Scenario s;
  RETURN_IF_ERROR(Get(root, "name", &s.name, true));
  RETURN_IF_ERROR(Get(root, "description", &s.description, false));
  RETURN_IF_ERROR(Get(root, "seed", &s.seed, false));
  RETURN_IF_ERROR(Get(root, "horizon_s", &s.horizon_s, true));
  RETURN_IF_ERROR(Get(root, "max_rounds", &s.max_rounds, false));
  RETURN_IF_ERROR(Get(root, "model_bytes", &s.model_bytes, true));
  RETURN_IF_ERROR(Get(root, "chunk_bytes", &s.chunk_bytes, false));
  const YAML::Node compute = root["compute"];
  if (compute) {
    RETURN_IF_ERROR(Get(compute, "sample_s", &s.sample_s, false));
    RETURN_IF_ERROR(Get(compute, "batch", &s.batch, false));
    RETURN_IF_ERROR(Get(compute, "speeds", &s.speeds, false));
  }
  const YAML::Node net = root["network"];
  if (!net || !net.IsMap()) return absl::InvalidArgumentError("scenario: missing network");
  std::string kind;
  RETURN_IF_ERROR(Get(net, "kind", &kind, true));
  if (kind == "overlay") {
    s.kind = Scenario::Kind::kOverlay;
  } else if (kind == "access") {
    s.kind = Scenario::Kind::kAccess;
  } else if (kind == "random") {
    s.kind = Scenario::Kind::kRandom;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("scenario: network.kind '", kind, "' (overlay, access or random)"));
  }
  RETURN_IF_ERROR(Get(net, "nodes", &s.nodes, true));
  RETURN_IF_ERROR(Get(net, "names", &s.names, false));
  std::vector<std::vector<int>> links;
  RETURN_IF_ERROR(Get(net, "links", &links, s.kind == Scenario::Kind::kOverlay));
  for (const auto& l : links) {
    if (l.size() != 2) return absl::InvalidArgumentError("scenario: network.links: pairs only");
    s.links.push_back({l[0], l[1]});
  }
  RETURN_IF_ERROR(Get(net, "degree", &s.degree, false));
  std::vector<double> fixed;
  RETURN_IF_ERROR(Get(net, "rates_mbit_s", &fixed, false));
  for (double r : fixed) {
    if (!(r > 0) || !std::isfinite(r)) {
      return absl::InvalidArgumentError("scenario: network.rates_mbit_s: each rate must be > 0");
    }
    s.fixed_rates_Bps.push_back(r * 1e6 / 8);
  }
  std::vector<double> rate;
  RETURN_IF_ERROR(Get(net, "rate_mbit_s", &rate, fixed.empty()));
  if (fixed.empty() &&
      (rate.size() != 2 || !(rate[0] > 0) || !(rate[1] >= rate[0]) || !std::isfinite(rate[1]))) {
    return absl::InvalidArgumentError(
        "scenario: network.rate_mbit_s must be [min, max], 0 < min <= max");
  }
  if (!fixed.empty() && s.kind != Scenario::Kind::kAccess) {
    return absl::InvalidArgumentError("scenario: network.rates_mbit_s is for kind: access");
  }
  if (!fixed.empty() && int(fixed.size()) != s.nodes) {
    return absl::InvalidArgumentError("scenario: network.rates_mbit_s needs one rate per node");
  }
  if (fixed.empty()) {
    s.rate_min_Bps = rate[0] * 1e6 / 8;
    s.rate_max_Bps = rate[1] * 1e6 / 8;
  }
  double latency_ms = 0;
  RETURN_IF_ERROR(Get(net, "latency_ms", &latency_ms, false));
  s.latency_s = latency_ms / 1e3;
  RETURN_IF_ERROR(Get(net, "change_every_s", &s.change_every_s, false));
  const YAML::Node pol = root["policy"];
  if (!pol || !pol.IsMap()) return absl::InvalidArgumentError("scenario: missing policy");
  RETURN_IF_ERROR(Get(pol, "run", &s.policies, true));
  s.baseline = s.policies.empty() ? "" : s.policies.front();
  RETURN_IF_ERROR(Get(pol, "baseline", &s.baseline, false));
  RETURN_IF_ERROR(Get(pol, "roots", &s.roots, false));
  RETURN_IF_ERROR(Get(pol, "bkt_arity", &s.bkt_arity, false));
  RETURN_IF_ERROR(Get(pol, "primary_busy_bound", &s.primary_busy_bound, false));
  RETURN_IF_ERROR(Get(pol, "auxiliary_queue_length", &s.auxiliary_queue_length, false));
  RETURN_IF_ERROR(Get(pol, "auxiliary_paths", &s.auxiliary_paths, false));
  RETURN_IF_ERROR(Get(pol, "late_binding", &s.late_binding, false));
  RETURN_IF_ERROR(Get(pol, "progress_order", &s.progress_order, false));
  RETURN_IF_ERROR(Get(pol, "update_s", &s.update_s, false));
  RETURN_IF_ERROR(Get(pol, "update_rate", &s.update_rate, false));
  RETURN_IF_ERROR(Get(pol, "wlbs_theta", &s.wlbs_theta, false));
  RETURN_IF_ERROR(Get(pol, "adlb_threshold_s", &s.adlb_threshold_s, false));

  // Validation.
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError("scenario: " + what);
  };
  if (s.nodes < 2 || s.nodes > 100000)
    return bad(absl::StrCat("network.nodes ", s.nodes, " (2 to 100000)"));
  if (!(s.horizon_s > 0) || !std::isfinite(s.horizon_s)) return bad("horizon_s must be > 0");
  if (s.max_rounds < 1) return bad("max_rounds must be >= 1");
  if (!(s.model_bytes > 0) || !std::isfinite(s.model_bytes)) return bad("model_bytes must be > 0");
  if (!(s.chunk_bytes > 0) || s.model_bytes / s.chunk_bytes > 1e6) {
    return bad("chunk_bytes must be > 0 and give at most 1e6 chunks");
  }
  if (!(s.sample_s >= 0) || s.batch < 1) return bad("compute.sample_s >= 0 and compute.batch >= 1");
  if (!s.speeds.empty() && static_cast<int>(s.speeds.size()) != s.nodes) {
    return bad(
        absl::StrCat("compute.speeds has ", s.speeds.size(), " entries for ", s.nodes, " workers"));
  }
  for (double v : s.speeds) {
    if (!(v > 0) || !std::isfinite(v)) return bad("compute.speeds must be > 0");
  }
  if (!(s.latency_s >= 0) || !(s.change_every_s >= 0))
    return bad("latency_ms and change_every_s must be >= 0");
  if (s.kind == Scenario::Kind::kRandom && (!(s.degree >= 1) || s.degree > s.nodes - 1)) {
    return bad(absl::StrCat("network.degree ", s.degree, " (1 to nodes - 1)"));
  }
  if (s.policies.empty()) return bad("policy.run is empty");
  for (const std::string& p : s.policies) {
    if (!In(KnownPolicies(), p)) {
      std::string known;
      for (const auto& k : KnownPolicies()) absl::StrAppend(&known, known.empty() ? "" : ", ", k);
      return bad(absl::StrCat("unknown policy '", p, "' (", known, ")"));
    }
    if (In(LoadPolicies(), p) && s.kind != Scenario::Kind::kAccess) {
      return bad(absl::StrCat("policy ", p, " needs network.kind access (per-node throughput)"));
    }
    if (In(OverlayPolicies(), p) && s.kind == Scenario::Kind::kAccess) {
      return bad(absl::StrCat("policy ", p, " needs an overlay or random network"));
    }
  }
  if (!In(s.policies, s.baseline)) return bad("policy.baseline must be one of policy.run");
  if (s.roots < 0 || s.roots > s.nodes) return bad("policy.roots must be 0 to nodes");
  if (s.bkt_arity < 1 || s.primary_busy_bound < 1 || s.auxiliary_queue_length < 1 ||
      s.auxiliary_paths < 0 || s.auxiliary_paths > 16) {
    return bad(
        "bkt_arity, primary_busy_bound, auxiliary_queue_length >= 1; auxiliary_paths 0 to 16");
  }
  if (!(s.update_s >= 0) || !(s.update_rate >= 0 && s.update_rate <= 1) || !(s.wlbs_theta >= 0)) {
    return bad("update_s >= 0, update_rate in [0, 1], wlbs_theta >= 0");
  }
  return s;
}

absl::StatusOr<Scenario> LoadScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("scenario: cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto s = ParseScenario(ss.str());
  if (!s.ok())
    return absl::Status(s.status().code(), absl::StrCat(path, ": ", s.status().message()));
  return s;
}

namespace {

// The physical network of a scenario: links (a, b) among `nodes` (+1 core
// for access networks).
struct Network {
  int nodes = 0;  // including the core
  int workers = 0;
  int core = -1;
  std::vector<PhysicalLink> links;
};

absl::StatusOr<Network> BuildNetwork(const Scenario& s) {
  Network net;
  net.workers = s.nodes;
  if (s.kind == Scenario::Kind::kAccess) {
    net.nodes = s.nodes + 1;
    net.core = s.nodes;
    for (int v = 0; v < s.nodes; ++v) net.links.push_back({v, net.core, s.latency_s / 2});
    return net;
  }
  net.nodes = s.nodes;
  absl::flat_hash_set<std::pair<int, int>> seen;
  auto add = [&](int a, int b) {
    if (a == b || !seen.insert({std::min(a, b), std::max(a, b)}).second) return false;
    net.links.push_back({a, b, s.latency_s});
    return true;
  };
  if (s.kind == Scenario::Kind::kOverlay) {
    for (auto [a, b] : s.links) {
      if (a < 0 || b < 0 || a >= s.nodes || b >= s.nodes || !add(a, b)) {
        return absl::InvalidArgumentError(absl::StrCat("scenario: network.links: [", a, ", ", b,
                                                       "] is out of range or repeated"));
      }
    }
    return net;
  }
  // Random: a random tree (connected), then random links up to the degree.
  for (int v = 1; v < s.nodes; ++v) {
    add(static_cast<int>(Uniform(s.seed, 1, v) * v), v);
  }
  const int64_t want = static_cast<int64_t>(s.degree * s.nodes / 2);
  for (int64_t i = 0; static_cast<int64_t>(net.links.size()) < want && i < 50 * want; ++i) {
    add(static_cast<int>(Uniform(s.seed, 2, 2 * i) * s.nodes),
        static_cast<int>(Uniform(s.seed, 2, 2 * i + 1) * s.nodes));
  }
  return net;
}

std::vector<double> RatesOf(const Scenario& s, size_t links, int64_t period) {
  std::vector<double> r(links);
  if (!s.fixed_rates_Bps.empty()) {
    // Given rates, rotated by one host each period.
    for (size_t i = 0; i < links; ++i) {
      r[i] = s.fixed_rates_Bps[(i + size_t(period)) % s.fixed_rates_Bps.size()];
    }
    return r;
  }
  for (size_t i = 0; i < links; ++i) {
    r[i] = s.rate_min_Bps + (s.rate_max_Bps - s.rate_min_Bps) * Uniform(s.seed, 1000 + period, i);
  }
  return r;
}

std::vector<double> ChunkSizes(double bytes, double chunk_bytes) {
  std::vector<double> out;
  for (double left = bytes; left > 1e-9; left -= chunk_bytes)
    out.push_back(std::min(left, chunk_bytes));
  return out;
}

// The decisions a policy holds between updates.
struct Held {
  policy::PolicyValue value;
  std::vector<int> roots;  // kept after the first decision
  int star_root = -1;
  bool decided = false;
};

struct Context {
  const Scenario& s;
  const Network& net;
  int64_t chunks = 0;
};

// Builds the plan's trees from a policy value (one tree per root; the
// chunks each root aggregates come from the chunk map).
std::vector<TreePlan> TreesFrom(const Context& c, const policy::PolicyValue& v, bool aux) {
  std::vector<TreePlan> out;
  const std::vector<double> sizes = ChunkSizes(c.s.model_bytes, c.s.chunk_bytes);
  for (size_t i = 0; i < v.trees.size(); ++i) {
    TreePlan tp;
    tp.tree = v.trees[i];
    if (aux && i < v.auxiliary.size()) tp.auxiliary = v.auxiliary[i];
    for (size_t k = 0; k < v.chunk_server.size(); ++k) {
      if (v.chunk_server[k] == tp.tree.root) tp.chunk_bytes.push_back(sizes[k]);
    }
    if (!tp.chunk_bytes.empty()) out.push_back(std::move(tp));
  }
  return out;
}

// A STAR per server over the access network: every host sends its share to
// server i through the core.
AggregationTree AccessStar(const Network& net, int root) {
  AggregationTree t;
  t.root = root;
  t.parent.assign(net.nodes, -1);
  t.route.assign(net.nodes, {});
  for (int v = 0; v < net.workers; ++v) {
    if (v == root) continue;
    t.parent[v] = root;
    t.route[v] = {v, net.core, root};
  }
  return t;
}

// One decision: a proposal for the policy value from the rates measured now.
absl::StatusOr<policy::PolicyValue> Decide(const Context& c, const std::string& p,
                                           const std::vector<double>& rates, Held* held) {
  const Scenario& s = c.s;
  const bool plan_aux = p.size() > 4 && p.compare(p.size() - 4, 4, "-aux") == 0;
  policy::PolicyValue v;
  std::vector<int> servers;
  std::vector<int64_t> counts;
  if (In(LoadPolicies(), p) || (In(BatchPolicies(), p) && s.kind == Scenario::Kind::kAccess)) {
    std::vector<double> throughput(c.net.workers);
    for (int i = 0; i < c.net.workers; ++i) throughput[i] = rates[i];
    absl::StatusOr<policy::LoadDistribution> d;
    if (p == "elastic") {
      d = policy::LoadElastic(s.model_bytes, throughput);
    } else if (p == "adlb-alg1") {
      d = policy::SolveLoadAlgorithm1(s.model_bytes, throughput, s.adlb_threshold_s, 100000);
    } else if (p == "adlb-exact") {
      d = policy::SolveLoadExact(s.model_bytes, throughput);
    } else {
      d = policy::LoadAverage(s.model_bytes, throughput);  // average and the WLBS runs
    }
    if (!d.ok()) return d.status();
    auto split = policy::SplitProportional(c.chunks, d->share_bytes, 0);
    if (!split.ok()) return split.status();
    for (int i = 0; i < c.net.workers; ++i) {
      servers.push_back(i);
      v.trees.push_back(AccessStar(c.net, i));
    }
    counts = std::move(*split);
  } else {
    std::vector<policy::OverlayLink> links;
    for (size_t i = 0; i < c.net.links.size(); ++i) {
      links.push_back({c.net.links[i].a, c.net.links[i].b, rates[i], c.net.links[i].latency_s});
    }
    auto g = policy::Overlay::Create(c.net.nodes, std::move(links));
    if (!g.ok()) return g.status();
    if (held->star_root < 0) {
      // Single-root policies share one root: the node whose FAPT is fastest
      // at the start, kept (moving a PS migrates its parameters).
      const auto delays = policy::AllFaptDelays(*g, s.model_bytes);
      std::vector<double> scores(delays.size());
      for (size_t i = 0; i < delays.size(); ++i) scores[i] = policy::QualityScore(delays[i]);
      held->star_root = policy::TopKRoots(scores, 1)[0];
    }
    const int root = held->star_root;
    if (p.rfind("mr-", 0) == 0) {
      const int k = s.roots > 0 ? s.roots : c.net.nodes;
      absl::StatusOr<policy::MultiRootFapt> m;
      if (p.rfind("mr-shared", 0) == 0) {
        m = policy::DecideSharedLinkMultiRoot(*g, s.model_bytes, c.chunks, k, held->roots);
      } else if (p.rfind("mr-packed", 0) == 0) {
        m = policy::DecidePackedMultiRoot(*g, s.model_bytes, s.chunk_bytes, c.chunks, k,
                                          held->roots);
      } else {
        m = policy::DecideMultiRootFapt(*g, s.model_bytes, c.chunks, k, held->roots);
      }
      if (!m.ok()) return m.status();
      held->roots = m->roots;
      servers = m->roots;
      counts = m->chunks;
      if (plan_aux) {
        // The packed plans' routes avoid the links their trees keep busy.
        v.auxiliary = policy::PackedAuxiliaryPaths(*g, *m, s.chunk_bytes, s.auxiliary_paths);
      }
      v.trees = std::move(m->trees);
    } else {
      absl::StatusOr<AggregationTree> t;
      if (p == "star" || In(BatchPolicies(), p)) {
        t = policy::StarTree(*g, root, s.model_bytes);
      } else if (p == "bkt") {
        t = policy::BalancedTree(*g, root, s.bkt_arity, s.model_bytes);
      } else if (p == "mst") {
        t = policy::MaxThroughputTree(*g, root);
      } else if (p == "fapt-pipelined") {
        t = policy::PipelinedFaptTree(*g, root, s.model_bytes, s.chunk_bytes);
      } else {
        t = policy::FaptTree(*g, root, s.model_bytes);
      }
      if (!t.ok()) return t.status();
      v.trees.push_back(std::move(*t));
      servers = {root};
      counts = {c.chunks};
    }
  }
  auto map = policy::RebalanceChunks(held->value.chunk_server, servers, counts);
  if (!map.ok()) return map.status();
  v.chunk_server = std::move(*map);
  return v;
}

}  // namespace

absl::StatusOr<std::vector<PolicyResult>> RunScenario(
    const Scenario& s, const std::function<void(const std::string&)>& progress) {
  auto net = BuildNetwork(s);
  if (!net.ok()) return net.status();
  Context c{s, *net, static_cast<int64_t>(ChunkSizes(s.model_bytes, s.chunk_bytes).size())};
  std::vector<PolicyResult> results;
  for (const std::string& p : s.policies) {
    const size_t nlinks = net->links.size();
    auto sim =
        RoundSimulator::Create(net->nodes, net->links, s.change_every_s,
                               [&s, nlinks](int64_t period) { return RatesOf(s, nlinks, period); });
    if (!sim.ok()) return sim.status();
    PolicyResult r;
    r.policy = p;
    Held held;
    // Batches: equal unless a WLBS policy moves them.
    const int64_t total_batch = s.batch * net->workers;
    std::vector<double> speed(net->workers, 1.0);
    if (!s.speeds.empty()) speed = s.speeds;
    std::vector<int64_t> batch(net->workers, s.batch);
    if (p == "wlbs-ideal") {
      auto b = policy::SplitProportional(total_batch, speed, 1);
      if (!b.ok()) return b.status();
      batch = *b;
    } else if (p == "wlbs") {
      // Initial division from capability indicators: the scenario's workers
      // have equal hardware (the straggler is slowed at run time), so this
      // starts equal; partial adjustment does the rest.
      std::vector<policy::NodeCapability> caps(net->workers, policy::NodeCapability{8, 32, 0});
      auto d = policy::InitialDivision(caps, total_batch, total_batch);
      if (!d.ok()) return d.status();
      batch = d->batch;
    }
    double last_decision = -1e300;
    int64_t aux = 0, sent = 0;
    double decision_total_ms = 0;
    std::vector<double> last_compute;
    RoundPlan plan;
    plan.multipath = p.size() > 4 && p.compare(p.size() - 4, 4, "-aux") == 0;
    plan.primary_busy_bound = s.primary_busy_bound;
    plan.auxiliary_queue_length = s.auxiliary_queue_length;
    plan.late_binding = s.late_binding;
    plan.progress_order = s.progress_order;
    const bool adaptive = !(p == "star" || p == "bkt" || p == "wlbs-equal" || p == "wlbs-ideal");
    while (sim->now() < s.horizon_s && static_cast<int>(r.rounds.size()) < s.max_rounds) {
      // Decide (every update_s; static policies once).
      if (!held.decided || (adaptive && sim->now() - last_decision >= s.update_s)) {
        const auto t0 = std::chrono::steady_clock::now();
        auto proposal = Decide(c, p, sim->current_rates(), &held);
        if (!proposal.ok()) return proposal.status();
        if (p == "wlbs" && !last_compute.empty()) {
          double mean = 0;
          for (double t : last_compute) mean += t / last_compute.size();
          auto adj = policy::PartialAdjust(batch, last_compute, s.wlbs_theta * mean, 1);
          if (!adj.ok()) return adj.status();
          batch = adj->units;
        }
        proposal->batch = batch;
        auto up = policy::Update(held.value, std::move(*proposal), s.update_rate);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        if (!up.ok()) return up.status();
        decision_total_ms += ms;
        r.decision_ms_max = std::max(r.decision_ms_max, ms);
        ++r.decisions;
        if (up->issued) {
          ++r.versions;
          held.value = std::move(up->value);
          plan.trees = TreesFrom(c, held.value, plan.multipath);
        }
        held.decided = true;
        last_decision = sim->now();
      }
      plan.compute_s.assign(net->nodes, -1);
      for (int w = 0; w < net->workers; ++w) {
        plan.compute_s[w] = static_cast<double>(batch[w]) * s.sample_s / speed[w];
      }
      auto st = sim->RunRound(plan);
      if (!st.ok())
        return absl::Status(st.status().code(), absl::StrCat(p, ": ", st.status().message()));
      r.rounds.push_back({st->start_s, st->duration_s});
      aux += st->auxiliary_sent;
      sent += st->chunks_sent;
      last_compute.assign(plan.compute_s.begin(), plan.compute_s.begin() + net->workers);
    }
    double total = 0;
    for (const auto& rp : r.rounds) total += rp.duration_s;
    r.mean_iteration_s = r.rounds.empty() ? 0 : total / r.rounds.size();
    r.auxiliary_fraction = sent > 0 ? static_cast<double>(aux) / sent : 0;
    r.decision_ms_mean = r.decisions > 0 ? decision_total_ms / r.decisions : 0;
    if (progress) {
      progress(absl::StrFormat("%-12s %5d rounds  mean iteration %9.3f s  decisions %d (%.2f ms)",
                               p, r.rounds.size(), r.mean_iteration_s, r.decisions,
                               r.decision_ms_mean));
    }
    results.push_back(std::move(r));
  }
  double base = 0;
  for (const auto& r : results) {
    if (r.policy == s.baseline) base = r.mean_iteration_s;
  }
  for (auto& r : results) r.speedup = r.mean_iteration_s > 0 ? base / r.mean_iteration_s : 0;
  return results;
}

std::string FormatTable(const Scenario& s, const std::vector<PolicyResult>& results) {
  std::string out =
      absl::StrCat("| policy | rounds | mean iteration (s) | speed-up vs ", s.baseline,
                   " | auxiliary chunks | decision (ms, mean / max) | versions |\n",
                   "|---|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : results) {
    absl::StrAppendFormat(&out, "| %s | %d | %.3f | %.2fx | %.1f%% | %.3f / %.3f | %d |\n",
                          r.policy, r.rounds.size(), r.mean_iteration_s, r.speedup,
                          100 * r.auxiliary_fraction, r.decision_ms_mean, r.decision_ms_max,
                          r.versions);
  }
  return out;
}

std::string PlotSvg(const Scenario& s, const std::vector<PolicyResult>& results) {
  const double w = 900, h = 480, left = 70, right = 190, top = 40, bottom = 50;
  double tmax = 0, ymax = 0;
  for (const auto& r : results) {
    for (const auto& p : r.rounds) {
      tmax = std::max(tmax, p.start_s + p.duration_s);
      ymax = std::max(ymax, p.duration_s);
    }
  }
  if (tmax <= 0) tmax = 1;
  if (ymax <= 0) ymax = 1;
  // Nice y range.
  const double step = std::pow(10, std::floor(std::log10(ymax)));
  ymax = std::ceil(ymax / step) * step;
  const bool minutes = tmax > 300;
  const double tunit = minutes ? 60 : 1;
  auto X = [&](double t) { return left + (w - left - right) * t / tmax; };
  auto Y = [&](double y) { return top + (h - top - bottom) * (1 - y / ymax); };
  static const char* kColors[] = {"#d62728", "#ff7f0e", "#bcbd22", "#2ca02c",
                                  "#1f77b4", "#9467bd", "#8c564b", "#e377c2"};
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"22\" font-size=\"15\">%s: iteration time over simulated time</text>\n",
      w, h, left, s.name);
  for (int i = 0; i <= 5; ++i) {
    const double y = ymax * i / 5, t = tmax * i / 5;
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g</text>\n",
        left, Y(y), w - right, Y(y), left - 6, Y(y) + 4, y, X(t), h - bottom + 18, t / tunit);
  }
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">simulated time (%s)</text>\n"
      "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" "
      "text-anchor=\"middle\">iteration time (s)</text>\n"
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
      "stroke=\"black\"/>\n",
      (left + w - right) / 2, h - 10, minutes ? "min" : "s", (top + h - bottom) / 2,
      (top + h - bottom) / 2, left, top, w - left - right, h - top - bottom);
  for (size_t i = 0; i < results.size(); ++i) {
    const char* color = kColors[i % 8];
    std::string pts;
    for (const auto& p : results[i].rounds) {
      absl::StrAppendFormat(&pts, "%.1f,%.1f %.1f,%.1f ", X(p.start_s), Y(p.duration_s),
                            X(p.start_s + p.duration_s), Y(p.duration_s));
    }
    absl::StrAppendFormat(
        &svg,
        "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"%s\"/>\n"
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"3\"/>\n<text x=\"%.1f\" y=\"%.1f\">%s (%.2fx)</text>\n",
        color, pts, w - right + 12, top + 14 + 20.0 * i, w - right + 36, top + 14 + 20.0 * i, color,
        w - right + 42, top + 18 + 20.0 * i, results[i].policy, results[i].speedup);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace sim
}  // namespace hetps
