#include "lib/base/file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace hetps {

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  std::string data(max_bytes + 1, '\0');
  in.read(data.data(), std::streamsize(data.size()));
  data.resize(size_t(in.gcount()));
  if (data.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is larger than ", max_bytes, " bytes"));
  }
  return data;
}

}  // namespace hetps
