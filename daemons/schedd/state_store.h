// ScheddStore: schedd's state in RocksDB (docs/storage-format.md, "schedd
// state"), so that a restarted schedd finds the jobs it had, the running
// one included, and never hands out an incarnation, job id or data-key id
// twice. Values are records (lib/storage/record.h: header and CRC) around
// protobuf payloads (proto/hetps/v1/schedd_state.proto).
//
// A record that fails its checks is skipped on load and described, never
// fatal: the store holds history, and one bad job must not keep schedd
// down. Thread-safe (RocksDB's own locking).
#ifndef HETPS_DAEMONS_SCHEDD_STATE_STORE_H_
#define HETPS_DAEMONS_SCHEDD_STATE_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/hetps/v1/schedd_state.pb.h"

namespace rocksdb {
class DB;
}

namespace hetps {

// A stored job bigger than this is refused on write and skipped on load.
constexpr size_t kJobRecordBytesMax = 16 << 20;

class ScheddStore {
 public:
  struct Loaded {
    v1::ScheddCounters counters;
    std::vector<v1::JobRecord> jobs;   // by seq, oldest first
    std::vector<std::string> skipped;  // why each unreadable record was skipped
  };

  // Opens (creating) the store in `dir`. A store of another format is
  // refused with its name.
  static absl::StatusOr<std::unique_ptr<ScheddStore>> Open(const std::string& dir);
  ~ScheddStore();
  ScheddStore(const ScheddStore&) = delete;
  ScheddStore& operator=(const ScheddStore&) = delete;

  absl::StatusOr<Loaded> Load();
  // sync: on disk before it returns (state changes members act on);
  // otherwise in the write-ahead log, on disk within the OS's flush.
  absl::Status PutJob(const v1::JobRecord& job, bool sync);
  absl::Status DeleteJob(uint64_t seq);
  absl::Status PutCounters(const v1::ScheddCounters& counters);
  const std::string& dir() const { return dir_; }

 private:
  ScheddStore(std::string dir, rocksdb::DB* db);
  const std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace hetps

#endif  // HETPS_DAEMONS_SCHEDD_STATE_STORE_H_
