// simulate SCENARIO.yaml [--svg FILE] [--table FILE]: runs every policy of a
// scenario in the flow-level simulator and prints the comparison table
// (the same as `psctl simulate`). Exit 0 ok, 1 the run failed, 2 usage.
#include <fstream>
#include <iostream>
#include <string>

#include "lib/sim/scenario.h"

int main(int argc, char** argv) {
  std::string path, svg, table;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--svg" || a == "--table") && i + 1 < argc) {
      (a == "--svg" ? svg : table) = argv[++i];
    } else if (!a.empty() && a[0] != '-' && path.empty()) {
      path = a;
    } else {
      std::cerr << "usage: simulate SCENARIO.yaml [--svg FILE] [--table FILE]\n";
      return 2;
    }
  }
  if (path.empty()) {
    std::cerr << "usage: simulate SCENARIO.yaml [--svg FILE] [--table FILE]\n";
    return 2;
  }
  auto s = hetps::sim::LoadScenario(path);
  if (!s.ok()) {
    std::cerr << "simulate: " << s.status().message() << "\n";
    return 1;
  }
  std::cerr << "simulate: " << s->name << ": " << s->policies.size() << " policies, "
            << s->horizon_s << " s simulated each\n";
  auto r = hetps::sim::RunScenario(
      *s, [](const std::string& line) { std::cerr << "  " << line << "\n"; });
  if (!r.ok()) {
    std::cerr << "simulate: " << r.status().message() << "\n";
    return 1;
  }
  const std::string t = hetps::sim::FormatTable(*s, *r);
  std::cout << t;
  if (!table.empty()) std::ofstream(table) << t;
  if (!svg.empty()) {
    std::ofstream out(svg);
    out << hetps::sim::PlotSvg(*s, *r);
    if (!out) {
      std::cerr << "simulate: cannot write " << svg << "\n";
      return 1;
    }
  }
  return 0;
}
