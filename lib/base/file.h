// Reading a file a user or operator named (a config, a certificate, a job
// spec): a regular file of bounded size, read whole. Thread-safe.
#ifndef HETPS_LIB_BASE_FILE_H_
#define HETPS_LIB_BASE_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace hetps {

// The contents of `path`: NotFound "cannot read 'PATH': <reason>",
// InvalidArgument "'PATH' is not a regular file" or "'PATH' is larger than
// N bytes" otherwise. Nothing past max_bytes is read.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes);

}  // namespace hetps

#endif  // HETPS_LIB_BASE_FILE_H_
