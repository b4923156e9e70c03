// permute_sim: bench/adaptive.sh --part permute's scenario for schedd's
// policy loop in simulated time (daemons/schedd/closed_loop.h), so a run
// takes a fraction of a second: ideal max-min readings, optionally with
// seeded noise. Per change: when the rounds came within 10% of ADLB's map
// for the true rates (3 in a row), against the live goal of 2 update
// periods + 1 round, and the plans that took effect.
//
//   bazel run --config=opt //bench:permute_sim -- [--rates "100 50 25 10"]
//       [--period_s 60] [--changes 4] [--update_time_s 5] [--noise 0]
//       [--seed 1] [--verbose]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "daemons/schedd/closed_loop.h"

namespace hetps {
namespace {

std::string Join(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += (s.empty() ? "" : " ") + std::to_string(int(std::lround(x)));
  return s;
}

int Main(int argc, char** argv) {
  PermutationOptions o;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (!std::strcmp(argv[i], "--rates")) {
      o.rates_mbit.clear();
      std::istringstream in(next());
      for (double r; in >> r;) o.rates_mbit.push_back(r);
    } else if (!std::strcmp(argv[i], "--period_s")) {
      o.period_s = std::atof(next());
    } else if (!std::strcmp(argv[i], "--changes")) {
      o.changes = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--update_time_s")) {
      o.update_time_s = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--noise")) {
      o.noise = std::atof(next());
    } else if (!std::strcmp(argv[i], "--seed")) {
      o.seed = uint32_t(std::atoi(next()));
    } else if (!std::strcmp(argv[i], "--verbose")) {
      o.verbose = true;
    } else {
      std::fprintf(stderr,
                   "usage: permute_sim [--rates \"100 50 25 10\"] [--period_s 60] [--changes 4] "
                   "[--update_time_s 5] [--noise F] [--seed N] [--verbose]\n");
      return 2;
    }
  }
  std::string error;
  std::printf(
      "permute_sim: %zu hosts at %s Mbit/s, one moving along every %.0f s, %d changes, "
      "update_time_s %lld, noise %.2f\n",
      o.rates_mbit.size(), Join(o.rates_mbit).c_str(), o.period_s, o.changes,
      (long long)o.update_time_s, o.noise);
  const std::vector<ChangeResult> results = RunPermutation(o, &error);
  if (results.empty()) {
    std::fprintf(stderr, "permute_sim: %s\n", error.c_str());
    return 2;
  }
  std::printf("%-18s %8s %8s %8s %8s %6s %-4s %s\n", "change", "best s", "settled", "vs best",
              "in s", "goal", "met", "plan versions after");
  int met = 0;
  for (const ChangeResult& r : results) {
    met += r.met;
    std::string versions;
    for (uint64_t v : r.versions) versions += (versions.empty() ? "" : ",") + std::to_string(v);
    char in[32];
    if (r.recovered_s < 0) {
      std::snprintf(in, sizeof(in), "never");
    } else {
      std::snprintf(in, sizeof(in), "%.1f", r.recovered_s);
    }
    std::printf("%-18s %8.3f %8.3f %7.2fx %8s %6.1f %-4s %s\n", Join(r.rates_mbit).c_str(),
                r.best_s, r.settled_s, r.best_s > 0 ? r.settled_s / r.best_s : 0, in, r.goal_s,
                r.met ? "yes" : "no", versions.empty() ? "-" : versions.c_str());
  }
  std::printf(
      "permute_sim: recovered within 2 update periods + 1 round (3 rounds in a row "
      "within 10%% of ADLB's map for the true rates): %d of %zu changes\n",
      met, results.size());
  return 0;
}

}  // namespace
}  // namespace hetps

int main(int argc, char** argv) { return hetps::Main(argc, argv); }
