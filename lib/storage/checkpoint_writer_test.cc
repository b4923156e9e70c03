// CheckpointWriter: a checkpoint offered while idle is written on the
// writer's thread; one offered while a write is in progress is refused and
// counted (the round thread never waits); a failed write is counted with
// its reason and the writer goes on.
#include "lib/storage/checkpoint_writer.h"

#include <rocksdb/env.h>

#include <catch2/catch.hpp>

#include "lib/base/test_dir.h"
#include "lib/storage/test_fs.h"

namespace hetps {
namespace storage {
namespace {

Checkpoint Make(uint64_t round) {
  Checkpoint c;
  c.job_id = "job-w";
  c.round = round;
  ChunkState ch;
  ch.params.assign(1000, float(round));
  ch.slots.push_back(std::vector<float>(1000, 0.5f));
  c.chunks.push_back(std::move(ch));
  return c;
}

TEST_CASE("offers while a write is in progress are refused and counted", "[storage]") {
  FaultyEnv faulty;
  FaultyDisk* disk = faulty.disk.get();
  CheckpointStoreConfig cfg;
  cfg.dir = MakeTestDir("ckptw");
  cfg.env = faulty.env.get();
  auto store = CheckpointStore::Open(cfg);
  REQUIRE(store.ok());
  CheckpointWriter w(store->get());
  CHECK(w.Idle());
  disk->fault = FaultyDisk::kHold;
  REQUIRE(w.Offer(Make(1)));
  disk->held.WaitForNotification();  // the write is at the disk now
  CHECK_FALSE(w.Idle());
  CHECK_FALSE(w.Offer(Make(2)));
  CHECK_FALSE(w.Offer(Make(3)));
  disk->fault = FaultyDisk::kNone;
  disk->release.Notify();
  w.Drain();
  const CheckpointWriterStats s = w.stats();
  CHECK(s.written == 1);
  CHECK(s.skipped_busy == 2);
  CHECK(s.last_round == 1);
  CHECK(s.last_bytes == 8000);
  CHECK(s.last_unix_ms > 0);
  auto back = (*store)->ReadNewest("job-w", 0);
  REQUIRE(back.ok());
  CHECK(back->round == 1);
  REQUIRE(w.Offer(Make(4)));
  w.Drain();
  CHECK(w.stats().written == 2);
  CHECK((*store)->ReadNewest("job-w", 0)->round == 4);
  // The written checkpoint comes back once, for its buffers to be reused.
  Checkpoint spare = w.TakeSpare();
  REQUIRE(spare.chunks.size() == 1);
  CHECK(spare.chunks[0].params.capacity() >= 1000);
  CHECK(w.TakeSpare().chunks.empty());
}

TEST_CASE("a failed write is counted with its reason; the next one succeeds", "[storage]") {
  FaultyEnv faulty;
  FaultyDisk* disk = faulty.disk.get();
  CheckpointStoreConfig cfg;
  cfg.dir = MakeTestDir("ckptw");
  cfg.env = faulty.env.get();
  auto store = CheckpointStore::Open(cfg);
  REQUIRE(store.ok());
  CheckpointWriter w(store->get());
  disk->fault = FaultyDisk::kIoError;
  REQUIRE(w.Offer(Make(1)));
  w.Drain();
  CHECK(w.stats().failed == 1);
  CHECK(w.stats().written == 0);
  CHECK(w.stats().last_error.find("read-only") != std::string::npos);
  disk->fault = FaultyDisk::kNone;
  REQUIRE(w.Offer(Make(2)));
  w.Drain();
  CHECK(w.stats().written == 1);
  CHECK((*store)->ReadNewest("job-w", 0)->round == 2);
}

TEST_CASE("destroying the writer finishes the write it took", "[storage]") {
  CheckpointStoreConfig cfg;
  cfg.dir = MakeTestDir("ckptw");
  auto store = CheckpointStore::Open(cfg);
  REQUIRE(store.ok());
  {
    CheckpointWriter w(store->get());
    REQUIRE(w.Offer(Make(7)));
  }
  auto back = (*store)->ReadNewest("job-w", 0);
  REQUIRE(back.ok());
  CHECK(back->round == 7);
}

}  // namespace
}  // namespace storage
}  // namespace hetps
