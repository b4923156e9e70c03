// Test helpers for suites that run the real hetps binaries: locating them in
// Bazel runfiles, spawning and signalling them, waiting for their ready
// files, and scraping HTTP. Waits poll for a condition with a deadline; they
// never sleep for correctness. Not thread-safe; one test thread.
#ifndef HETPS_TESTS_TESTING_PROCESS_H_
#define HETPS_TESTS_TESTING_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace hetps {
namespace testing {

// Absolute path of a workspace-relative runfile, e.g. "daemons/psd/psd".
std::string Runfile(const std::string& path);
// A fresh directory under $TEST_TMPDIR.
std::string TempDir(const std::string& name);
std::string ReadFile(const std::string& path);

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string stdout_text;
  std::string stderr_text;
};

// Runs a command to completion (bounded by `timeout`; killed after it).
ProcessResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout = absl::Seconds(30),
                         const std::string& stdin_text = "");

// A background process with stdout/stderr in files under `dir`.
class Process {
 public:
  Process() = default;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  Process(Process&& o) noexcept;
  Process& operator=(Process&& o) noexcept;
  ~Process();  // SIGKILLs a still-running process

  static absl::StatusOr<Process> Start(const std::vector<std::string>& argv, const std::string& dir,
                                       const std::string& name);

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  void Signal(int sig);
  // Waits for exit; returns the exit code (-1 on signal or timeout).
  int Wait(absl::Duration timeout);
  std::string Stderr() const;

 private:
  pid_t pid_ = -1;
  std::string stdout_path_;
  std::string stderr_path_;
  int exit_code_ = -1;
};

// Polls `cond` every 10 ms until true or `timeout`; returns whether it held.
bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout);

// The value of a top-level string field in a one-line JSON object file, as
// written by the daemons' ready_file (no nesting needed).
std::string JsonField(const std::string& json, const std::string& key);

// GET http://<host:port><path>; returns the body or an error.
absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path);

}  // namespace testing
}  // namespace hetps

#endif  // HETPS_TESTS_TESTING_PROCESS_H_
