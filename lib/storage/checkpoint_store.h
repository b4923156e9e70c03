// CheckpointStore: a psd's part of a job, saved in RocksDB (Debian's
// librocksdb) so that it survives the process: per chunk its parameters and
// optimizer slots, with the round, the optimizer's step count, the job id
// and the job spec it was trained under. Format: docs/storage-format.md.
//
// - Atomic: a checkpoint is one table file, written and fsynced beside the
//   database and linked into it by RocksDB's external-file ingestion: after
//   a crash it is all there or not at all, and its bytes are written once.
// - Checked twice: RocksDB's block checksums and a CRC per record
//   (record.h). A checkpoint with any record missing, unreadable or failing
//   its CRC is skipped on read, counted, and the next older one is used.
// - Disk faults (full disk, unwritable directory) fail Write with the
//   error; the store stays usable and retries (RocksDB's Resume) next time.
//
// Thread-safe: Write from a writer thread while others List or Read.
#ifndef HETPS_LIB_STORAGE_CHECKPOINT_STORE_H_
#define HETPS_LIB_STORAGE_CHECKPOINT_STORE_H_

#include <rocksdb/options.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace rocksdb {
class DB;
class Env;
class WriteBatch;
}  // namespace rocksdb

namespace hetps {
namespace storage {

// Bounds on what is read back (a record claiming more is refused).
constexpr size_t kJobIdBytesMax = 128;
constexpr size_t kSpecBytesMax = 1 << 20;
constexpr uint32_t kChunksMax = 1 << 20;
constexpr uint32_t kSlotsMax = 2;  // SGD momentum: 1; Adam: 2
constexpr uint32_t kPlanServersMax = 1 << 16;
constexpr uint32_t kPlanWorkersMax = 1 << 16;

// The plan the chunks were trained under at the checkpoint's round
// (docs/plan.md), so that a recovery resumes every node under it: which
// server owns each chunk of the model, and by worker rank the batch and
// the samples drawn from the worker's stream before the round. Empty
// (num_servers 0): the even split, equal batches (checkpoints written
// before plans were recorded).
struct CheckpointPlan {
  uint32_t num_servers = 0;
  std::vector<uint32_t> chunk_server;  // every chunk's owner, < num_servers
  std::vector<uint32_t> worker_batch;
  std::vector<uint64_t> worker_samples;  // as long as worker_batch
  bool empty() const { return num_servers == 0; }
  bool operator==(const CheckpointPlan& o) const {
    return num_servers == o.num_servers && chunk_server == o.chunk_server &&
           worker_batch == o.worker_batch && worker_samples == o.worker_samples;
  }
};

struct ChunkState {
  uint32_t chunk_id = 0;
  uint64_t offset = 0;                    // first element in the model's flat vector
  std::vector<float> params;              // the chunk's parameters
  std::vector<std::vector<float>> slots;  // optimizer state, each params.size() long
};

struct Checkpoint {
  std::string job_id;  // [A-Za-z0-9._-], 1 to kJobIdBytesMax
  uint32_t server_index = 0;
  uint64_t round = 0;            // rounds applied: training resumes at this round
  uint64_t optimizer_steps = 0;  // OptimizerState::steps()
  std::string spec;              // the job spec's text
  uint64_t written_unix_ms = 0;  // set by Write
  CheckpointPlan plan;
  std::vector<ChunkState> chunks;
};

// What List says of a stored checkpoint (read from its meta record only).
struct CheckpointInfo {
  std::string job_id;
  uint32_t server_index = 0;
  uint64_t round = 0;
  uint64_t written_unix_ms = 0;
  uint32_t chunks = 0;
  uint64_t bytes = 0;  // the values' sizes
};

struct CheckpointStoreConfig {
  std::string dir;         // created if missing
  uint32_t keep_last = 3;  // per (job, server); at least 1
  // Another psd's store, read to adopt its part: never written, and
  // opened without taking RocksDB's lock (its owner is gone).
  bool read_only = false;
  // Tests: a RocksDB Env over a fault-injecting file system. Not owned.
  rocksdb::Env* env = nullptr;
};

struct ReadStats {
  uint32_t skipped = 0;          // newer checkpoints that failed their checks
  std::vector<std::string> why;  // one line each
};

class CheckpointStore {
 public:
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> Open(const CheckpointStoreConfig& config);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  // Saves `c` (replacing one of the same job, server and round) and removes
  // that job and server's checkpoints beyond the keep_last newest, in one
  // atomic write. InvalidArgument for a malformed checkpoint; the disk's
  // error otherwise.
  absl::Status Write(const Checkpoint& c);

  // The newest checkpoint of (job, server) that passes every check; newer
  // ones that fail are counted and described in *stats. NotFound when none.
  absl::StatusOr<Checkpoint> ReadNewest(const std::string& job_id, uint32_t server_index,
                                        ReadStats* stats = nullptr);
  // One checkpoint; NotFound, or why it fails its checks (DataLoss).
  absl::StatusOr<Checkpoint> Read(const std::string& job_id, uint32_t server_index, uint64_t round);
  // The rounds of (job, server) whose checkpoints pass every check (each
  // is read whole), newest first; the others are counted and described in
  // *stats.
  absl::StatusOr<std::vector<uint64_t>> ValidRounds(const std::string& job_id,
                                                    uint32_t server_index,
                                                    ReadStats* stats = nullptr);
  // Removes (job, server)'s checkpoints of rounds after `round`: once
  // training resumes from `round` they belong to a history that is gone.
  absl::Status DeleteAfter(const std::string& job_id, uint32_t server_index, uint64_t round);
  // A job's checkpoints, every server, newest round first.
  absl::StatusOr<std::vector<CheckpointInfo>> List(const std::string& job_id);
  // The jobs with checkpoints here, the most recently written first.
  absl::StatusOr<std::vector<std::string>> Jobs();
  // Removes every checkpoint of a job (and their files).
  absl::Status DeleteJob(const std::string& job_id);
  // Removes the checkpoints of all jobs but the `keep` most recently
  // written and `current`; returns the jobs removed.
  absl::StatusOr<std::vector<std::string>> KeepJobs(size_t keep, const std::string& current);

  const std::string& dir() const { return config_.dir; }

 private:
  CheckpointStore(const CheckpointStoreConfig& config, const rocksdb::Options& options,
                  rocksdb::DB* db);
  static rocksdb::Options MakeOptions(const CheckpointStoreConfig& config);
  static absl::StatusOr<rocksdb::DB*> OpenDb(const rocksdb::Options& options,
                                             const std::string& dir);
  absl::Status ReadOnly() const;
  static void DeleteRound(rocksdb::WriteBatch* b, const std::string& job, uint32_t srv,
                          uint64_t round);
  absl::StatusOr<std::vector<uint64_t>> Rounds(const std::string& job_id, uint32_t server_index)
      ABSL_LOCKS_EXCLUDED(db_mu_);
  // After a failed write: RocksDB's Resume, or else the database closed and
  // opened again (RocksDB cannot resume from every background error).
  absl::Status Recover() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) ABSL_LOCKS_EXCLUDED(db_mu_);

  const CheckpointStoreConfig config_;
  const rocksdb::Options options_;
  absl::Mutex write_mu_;  // one Write at a time
  bool failed_ ABSL_GUARDED_BY(write_mu_) = false;
  // Readers share it; only Recover's reopen takes it exclusively.
  mutable absl::Mutex db_mu_ ABSL_ACQUIRED_AFTER(write_mu_);
  std::unique_ptr<rocksdb::DB> db_ ABSL_GUARDED_BY(db_mu_);
};

// The key prefix of (job, server[, round]) (docs/storage-format.md).
std::string CheckpointPrefix(const std::string& job_id, uint32_t server_index);
std::string CheckpointPrefix(const std::string& job_id, uint32_t server_index, uint64_t round);
absl::Status ValidateJobId(const std::string& job_id);

}  // namespace storage
}  // namespace hetps

#endif  // HETPS_LIB_STORAGE_CHECKPOINT_STORE_H_
