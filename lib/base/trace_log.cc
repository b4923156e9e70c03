#include "lib/base/trace_log.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace hetps {

absl::StatusOr<std::unique_ptr<TraceLog>> TraceLog::Open(const std::string& path,
                                                         uint64_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "we");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("trace file ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<TraceLog>(new TraceLog(path, f, max_bytes));
}

TraceLog::~TraceLog() {
  absl::MutexLock lock(&mu_);
  std::fclose(file_);
}

void TraceLog::Write(absl::string_view line) {
  absl::MutexLock lock(&mu_);
  if (written_ + line.size() + 1 > max_bytes_ ||
      std::fwrite(line.data(), 1, line.size(), file_) != line.size() ||
      std::fputc('\n', file_) == EOF) {
    ++dropped_;
    return;
  }
  written_ += line.size() + 1;
}

uint64_t TraceLog::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

uint64_t TraceLog::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

}  // namespace hetps
