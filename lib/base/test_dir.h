// Test only: a fresh, empty directory under the test's $TEST_TMPDIR (Bazel
// sets it; /tmp elsewhere), named from `prefix`. Aborts if none can be
// made: a test cannot go on without it.
#ifndef HETPS_LIB_BASE_TEST_DIR_H_
#define HETPS_LIB_BASE_TEST_DIR_H_

#include <stdlib.h>

#include <cstdio>
#include <string>

namespace hetps {

inline std::string MakeTestDir(const std::string& prefix) {
  const char* base = getenv("TEST_TMPDIR");
  std::string path = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + ".XXXXXX";
  if (mkdtemp(path.data()) == nullptr) {
    std::perror(("mkdtemp " + path).c_str());
    std::abort();
  }
  return path;
}

}  // namespace hetps

#endif  // HETPS_LIB_BASE_TEST_DIR_H_
