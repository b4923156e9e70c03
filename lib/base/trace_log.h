// TraceLog: one JSON object per line appended to a file, from any thread,
// bounded: once max_bytes are written further lines are dropped and
// counted, so a forgotten trace cannot fill the disk. Round traces
// (docs/tracing.md) write through it.
#ifndef HETPS_LIB_BASE_TRACE_LOG_H_
#define HETPS_LIB_BASE_TRACE_LOG_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace hetps {

class TraceLog {
 public:
  // Creates (truncates) `path`; its directory must exist.
  static absl::StatusOr<std::unique_ptr<TraceLog>> Open(const std::string& path,
                                                        uint64_t max_bytes);
  ~TraceLog();
  TraceLog(const TraceLog&) = delete;
  TraceLog& operator=(const TraceLog&) = delete;

  // Appends `line` and a newline (the caller makes it one JSON object).
  void Write(absl::string_view line);
  uint64_t written() const;
  uint64_t dropped() const;  // lines refused past max_bytes or by a write error
  const std::string& path() const { return path_; }

 private:
  TraceLog(std::string path, std::FILE* f, uint64_t max_bytes)
      : path_(std::move(path)), max_bytes_(max_bytes), file_(f) {}
  const std::string path_;
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace hetps

#endif  // HETPS_LIB_BASE_TRACE_LOG_H_
