// CheckpointWriter: writes checkpoints to a CheckpointStore on its own
// thread, so that a round thread never waits for a disk. It holds at most
// one checkpoint: Offer hands it over when the writer is idle and refuses
// (counted as skipped) while the previous one is still being written, so
// the checkpoint period stretches to what the disk sustains instead of
// rounds queueing behind it. A failed write is counted, logged by the
// caller from stats(), and training goes on.
//
// Thread-safe. The store must outlive the writer.
#ifndef HETPS_LIB_STORAGE_CHECKPOINT_WRITER_H_
#define HETPS_LIB_STORAGE_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "lib/storage/checkpoint_store.h"

namespace hetps {
namespace storage {

struct CheckpointWriterStats {
  uint64_t written = 0;
  uint64_t failed = 0;
  uint64_t skipped_busy = 0;  // offers refused while a write was in progress
  uint64_t last_round = 0;    // of the newest checkpoint written
  uint64_t last_unix_ms = 0;  // when it was written (0: none yet)
  uint64_t last_bytes = 0;    // its parameters and slots
  double last_write_ms = 0;   // how long it took
  std::string last_error;     // of the newest failure (empty: none)
};

class CheckpointWriter {
 public:
  explicit CheckpointWriter(CheckpointStore* store);
  // Finishes the write in progress, then stops.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Whether an Offer now would be taken (a round thread asks before it
  // copies a snapshot).
  bool Idle() const;
  // Takes `c` to write when idle (true); otherwise false, counted.
  bool Offer(Checkpoint&& c);
  // Blocks until nothing is being written (tests, shutdown).
  void Drain();
  // The last checkpoint the writer finished with (written or not), to be
  // overwritten: a snapshot that assigns into its vectors reuses their
  // memory instead of allocating (and faulting in) a model's worth of
  // pages every time. Empty when none finished since the last call.
  Checkpoint TakeSpare();

  CheckpointWriterStats stats() const;

 private:
  void Run();

  CheckpointStore* const store_;
  mutable absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Checkpoint pending_ ABSL_GUARDED_BY(mu_);
  Checkpoint spare_ ABSL_GUARDED_BY(mu_);
  CheckpointWriterStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace storage
}  // namespace hetps

#endif  // HETPS_LIB_STORAGE_CHECKPOINT_WRITER_H_
