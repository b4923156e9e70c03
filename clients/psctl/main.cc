// psctl: the hetps admin CLI. See clients/psctl/psctl.h.
#include <cstdlib>
#include <iostream>

#include "clients/psctl/psctl.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // $HETPS_PSCTL_CONFIG: a config file used unless --config is given.
  bool has_config = false;
  for (const std::string& a : args) has_config |= a == "--config" || a.rfind("--config=", 0) == 0;
  if (const char* env = std::getenv("HETPS_PSCTL_CONFIG"); env != nullptr && *env && !has_config) {
    args.insert(args.begin(), std::string("--config=") + env);
  }
  return hetps::psctl::Run(args, std::cout, std::cerr);
}
