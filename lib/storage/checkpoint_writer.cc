#include "lib/storage/checkpoint_writer.h"

#include <chrono>
#include <utility>

namespace hetps {
namespace storage {

CheckpointWriter::CheckpointWriter(CheckpointStore* store) : store_(store) {
  thread_ = std::thread([this] { Run(); });
}

CheckpointWriter::~CheckpointWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

bool CheckpointWriter::Idle() const {
  absl::MutexLock lock(&mu_);
  return !busy_;
}

bool CheckpointWriter::Offer(Checkpoint&& c) {
  absl::MutexLock lock(&mu_);
  if (busy_ || stop_) {
    ++stats_.skipped_busy;
    return false;
  }
  pending_ = std::move(c);
  busy_ = true;
  return true;
}

void CheckpointWriter::Drain() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* busy) { return !*busy; }, &busy_));
}

CheckpointWriterStats CheckpointWriter::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void CheckpointWriter::Run() {
  for (;;) {
    Checkpoint c;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return busy_ || stop_; };
      mu_.Await(absl::Condition(&ready));
      if (!busy_) return;  // stopped, nothing pending
      c = std::move(pending_);
    }
    uint64_t bytes = 0;
    for (const ChunkState& ch : c.chunks) bytes += ch.params.size() * 4 * (1 + ch.slots.size());
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status s = store_->Write(c);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    absl::MutexLock lock(&mu_);
    if (s.ok()) {
      ++stats_.written;
      stats_.last_round = c.round;
      stats_.last_unix_ms =
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count());
      stats_.last_bytes = bytes;
      stats_.last_write_ms = ms;
    } else {
      ++stats_.failed;
      stats_.last_error = std::string(s.message());
    }
    spare_ = std::move(c);  // its buffers, for the next snapshot to reuse
    busy_ = false;
  }
}

Checkpoint CheckpointWriter::TakeSpare() {
  absl::MutexLock lock(&mu_);
  return std::move(spare_);
}

}  // namespace storage
}  // namespace hetps
