// RocksDB's status as an absl::Status, for the stores over RocksDB: the
// codes callers act on (NotFound, DataLoss for corruption, Unavailable for
// a full or failing disk), with `what` and RocksDB's text.
#ifndef HETPS_LIB_STORAGE_ROCKS_STATUS_H_
#define HETPS_LIB_STORAGE_ROCKS_STATUS_H_

#include <rocksdb/status.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hetps {
namespace storage {

inline absl::Status RocksStatus(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsNoSpace() || s.IsIOError()) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

}  // namespace storage
}  // namespace hetps

#endif  // HETPS_LIB_STORAGE_ROCKS_STATUS_H_
