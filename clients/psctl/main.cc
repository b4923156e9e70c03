// psctl: the hetps admin CLI. See clients/psctl/psctl.h.
#include <iostream>

#include "clients/psctl/psctl.h"

int main(int argc, char** argv) {
  return hetps::psctl::Run(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
