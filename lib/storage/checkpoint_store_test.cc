// CheckpointStore over a real RocksDB in the test's temporary directory:
// round trip, keep_last, reopening, and the faults it must survive: a
// record changed behind RocksDB's back (our CRC), bytes flipped in the
// newest table file (RocksDB's checksums), a full disk (a file system that
// refuses new files), a directory that cannot be one.
#include "lib/storage/checkpoint_store.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <sys/stat.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "lib/base/test_dir.h"
#include "lib/storage/record.h"
#include "lib/storage/test_fs.h"

namespace hetps {
namespace storage {
namespace {

namespace fs = std::filesystem;

// A checkpoint whose values depend on (round, chunk, element).
Checkpoint Make(uint64_t round, uint32_t chunks = 3, uint32_t slots = 1, size_t floats = 1000) {
  Checkpoint c;
  c.job_id = "job-20261124-1";
  c.server_index = 1;
  c.round = round;
  c.optimizer_steps = round;
  c.spec = "name: t\nmodel: mlp\n";
  for (uint32_t k = 0; k < chunks; ++k) {
    ChunkState ch;
    ch.chunk_id = 10 + k;
    ch.offset = uint64_t(k) * floats;
    ch.params.resize(floats);
    for (size_t i = 0; i < floats; ++i)
      ch.params[i] = float(round) + float(k) / 8 + float(i) / 4096;
    for (uint32_t s = 0; s < slots; ++s) {
      ch.slots.push_back(std::vector<float>(floats, float(s + 1) * 0.5f + float(round)));
    }
    c.chunks.push_back(std::move(ch));
  }
  return c;
}

// A meta record of job-x's server 0, round 4, claiming `chunks` chunks
// (their entries not written), then whatever `tail` writes.
std::string MetaRecord(uint32_t chunks, const std::function<void(ByteWriter*)>& tail) {
  ByteWriter w;
  w.String("job-x");
  w.U32(0);
  w.U64(4);
  w.U64(4);
  w.U64(0);
  w.String("");
  w.U32(chunks);
  tail(&w);
  return EncodeRecord(RecordKind::kMeta, w.bytes());
}

void CheckSame(const Checkpoint& a, const Checkpoint& b) {
  CHECK(a.job_id == b.job_id);
  CHECK(a.server_index == b.server_index);
  CHECK(a.round == b.round);
  CHECK(a.optimizer_steps == b.optimizer_steps);
  CHECK(a.spec == b.spec);
  REQUIRE(a.chunks.size() == b.chunks.size());
  for (size_t k = 0; k < a.chunks.size(); ++k) {
    CHECK(a.chunks[k].chunk_id == b.chunks[k].chunk_id);
    CHECK(a.chunks[k].offset == b.chunks[k].offset);
    CHECK(a.chunks[k].params == b.chunks[k].params);
    CHECK(a.chunks[k].slots == b.chunks[k].slots);
  }
}

std::unique_ptr<CheckpointStore> OpenAt(const std::string& dir, uint32_t keep = 3,
                                        rocksdb::Env* env = nullptr) {
  CheckpointStoreConfig cfg;
  cfg.dir = dir;
  cfg.keep_last = keep;
  cfg.env = env;
  auto s = CheckpointStore::Open(cfg);
  REQUIRE(s.ok());
  return std::move(*s);
}

TEST_CASE("a checkpoint reads back bit for bit, SGD and Adam", "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  auto store = OpenAt(dir);
  for (uint32_t slots : {0u, 1u, 2u}) {
    Checkpoint c = Make(5 + slots, 4, slots);
    c.server_index = slots;
    REQUIRE(store->Write(c).ok());
    auto back = store->ReadNewest(c.job_id, slots);
    REQUIRE(back.ok());
    CheckSame(*back, c);
    CHECK(back->written_unix_ms > 0);
  }
  auto list = store->List("job-20261124-1");
  REQUIRE(list.ok());
  REQUIRE(list->size() == 3);
  CHECK((*list)[0].round == 7);  // newest first
  CHECK((*list)[0].chunks == 4);
  CHECK((*list)[0].bytes > 4 * 1000 * 4 * 3);
  {
    // The size List reports is what the checkpoint's records take.
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir, &raw).ok());
    const std::string prefix = "c/job-20261124-1/00000002/";
    uint64_t stored = 0;
    std::unique_ptr<rocksdb::Iterator> it(raw->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      stored += it->value().size();
    }
    it.reset();
    delete raw;
    CHECK((*list)[0].bytes == stored);
  }
  CHECK(store->ReadNewest("another-job", 0).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("only the keep_last newest stay; a rewritten round replaces all its chunks",
          "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  {
    auto store = OpenAt(dir, 2);
    for (uint64_t r = 1; r <= 5; ++r) REQUIRE(store->Write(Make(r)).ok());
    auto list = store->List("job-20261124-1");
    REQUIRE(list.ok());
    REQUIRE(list->size() == 2);
    CHECK((*list)[0].round == 5);
    CHECK((*list)[1].round == 4);
    CHECK(store->Read("job-20261124-1", 1, 3).status().code() == absl::StatusCode::kNotFound);
    // The pruned checkpoints' table files are gone from the disk too.
    size_t tables = 0;
    for (const auto& e : fs::directory_iterator(dir)) tables += e.path().extension() == ".sst";
    CHECK(tables == 2);
    // Round 5 again, with one chunk instead of three.
    REQUIRE(store->Write(Make(5, 1)).ok());
    auto five = store->Read("job-20261124-1", 1, 5);
    REQUIRE(five.ok());
    CHECK(five->chunks.size() == 1);
  }
  // Reopened: still there.
  auto store = OpenAt(dir, 2);
  auto back = store->ReadNewest("job-20261124-1", 1);
  REQUIRE(back.ok());
  CheckSame(*back, Make(5, 1));
}

TEST_CASE("jobs are listed most recent first; KeepJobs removes the older ones' files",
          "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  auto store = OpenAt(dir, 2);
  for (const char* job : {"job-a", "job-b", "job-c"}) {
    for (uint64_t r = 1; r <= 2; ++r) {
      Checkpoint c = Make(r);
      c.job_id = job;
      REQUIRE(store->Write(c).ok());
    }
  }
  auto jobs = store->Jobs();
  REQUIRE(jobs.ok());
  // Written one after another: c is the newest (ties broken by name, also c).
  REQUIRE(jobs->size() == 3);
  CHECK((*jobs)[0] == "job-c");
  auto removed = store->KeepJobs(1, "job-a");
  REQUIRE(removed.ok());
  CHECK(*removed == std::vector<std::string>{"job-b"});
  CHECK(store->ReadNewest("job-b", 1).status().code() == absl::StatusCode::kNotFound);
  CHECK(store->ReadNewest("job-a", 1).ok());
  CHECK(store->ReadNewest("job-c", 1).ok());
  size_t tables = 0;
  for (const auto& e : fs::directory_iterator(dir)) tables += e.path().extension() == ".sst";
  CHECK(tables == 4);  // two checkpoints each of job-a and job-c
}

TEST_CASE("a record changed behind RocksDB's back fails its CRC; the previous one is used",
          "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  {
    auto store = OpenAt(dir);
    REQUIRE(store->Write(Make(1)).ok());
    REQUIRE(store->Write(Make(2)).ok());
  }
  {
    // Rewrite round 2's middle chunk with one payload bit flipped: RocksDB
    // stores it faithfully, only our CRC can tell.
    rocksdb::DB* raw = nullptr;
    rocksdb::Options o;
    REQUIRE(rocksdb::DB::Open(o, dir, &raw).ok());
    const std::string key = "c/job-20261124-1/00000001/0000000000000002/c0000000b";
    std::string v;
    REQUIRE(raw->Get(rocksdb::ReadOptions(), key, &v).ok());
    v[v.size() / 2] ^= 0x04;
    REQUIRE(raw->Put(rocksdb::WriteOptions(), key, v).ok());
    delete raw;
  }
  auto store = OpenAt(dir);
  ReadStats stats;
  auto back = store->ReadNewest("job-20261124-1", 1, &stats);
  REQUIRE(back.ok());
  CHECK(back->round == 1);
  CHECK(stats.skipped == 1);
  REQUIRE(stats.why.size() == 1);
  CHECK(stats.why[0].find("CRC") != std::string::npos);
  CHECK(store->Read("job-20261124-1", 1, 2).status().code() == absl::StatusCode::kDataLoss);
  // What a recovering psd offers schedd: round 1 only.
  ReadStats vstats;
  auto valid = store->ValidRounds("job-20261124-1", 1, &vstats);
  REQUIRE(valid.ok());
  CHECK(*valid == std::vector<uint64_t>{1});
  CHECK(vstats.skipped == 1);
}

TEST_CASE("another psd's store opens read only: read, never written", "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  {
    auto store = OpenAt(dir);
    REQUIRE(store->Write(Make(10)).ok());
    REQUIRE(store->Write(Make(20)).ok());
  }
  CheckpointStoreConfig cfg;
  cfg.dir = dir;
  cfg.read_only = true;
  auto ro = CheckpointStore::Open(cfg);
  REQUIRE(ro.ok());
  auto rounds = (*ro)->ValidRounds("job-20261124-1", 1);
  REQUIRE(rounds.ok());
  CHECK(*rounds == std::vector<uint64_t>{20, 10});
  CheckSame(*(*ro)->Read("job-20261124-1", 1, 10), Make(10));
  CHECK((*ro)->Write(Make(30)).code() == absl::StatusCode::kFailedPrecondition);
  CHECK((*ro)->DeleteAfter("job-20261124-1", 1, 10).code() ==
        absl::StatusCode::kFailedPrecondition);
  // A directory with no store is not created.
  cfg.dir = dir + "-none";
  CHECK_FALSE(CheckpointStore::Open(cfg).ok());
  CHECK_FALSE(fs::exists(cfg.dir));
}

TEST_CASE("DeleteAfter removes the rounds of a history that resumed earlier", "[storage]") {
  auto store = OpenAt(MakeTestDir("ckpt"), 5);
  for (uint64_t r : {10, 20, 30, 40}) REQUIRE(store->Write(Make(r)).ok());
  Checkpoint other = Make(40);
  other.server_index = 2;
  REQUIRE(store->Write(other).ok());
  REQUIRE(store->DeleteAfter("job-20261124-1", 1, 20).ok());
  auto valid = store->ValidRounds("job-20261124-1", 1);
  REQUIRE(valid.ok());
  CHECK(*valid == std::vector<uint64_t>{20, 10});
  // Another server's checkpoints stay; a later round written again reads back.
  CHECK(store->Read("job-20261124-1", 2, 40).ok());
  REQUIRE(store->Write(Make(30)).ok());
  CHECK(store->ReadNewest("job-20261124-1", 1)->round == 30);
  CHECK(store->DeleteAfter("job-20261124-1", 1, 1000).ok());  // nothing after: a no-op
}

TEST_CASE("bytes flipped in the newest table file: detected, the previous checkpoint used",
          "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  {
    auto store = OpenAt(dir);
    REQUIRE(store->Write(Make(1, 3, 1, 20000)).ok());
    REQUIRE(store->Write(Make(2, 3, 1, 20000)).ok());
  }
  // Each Write ingests its own table file: the highest-numbered one holds
  // round 2. Its data blocks come first; flip a byte a third of the way in.
  fs::path newest;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".sst" && (newest.empty() || e.path() > newest)) newest = e.path();
  }
  REQUIRE(!newest.empty());
  FlipByte(newest.string());
  auto store = OpenAt(dir);
  ReadStats stats;
  auto back = store->ReadNewest("job-20261124-1", 1, &stats);
  REQUIRE(back.ok());
  CHECK(back->round == 1);
  CheckSame(*back, Make(1, 3, 1, 20000));
  CHECK(stats.skipped == 1);
}

TEST_CASE("a full disk fails the write with its reason; what was written stays", "[storage]") {
  FaultyEnv faulty;
  FaultyDisk* disk = faulty.disk.get();
  rocksdb::Env* env = faulty.env.get();
  const std::string dir = MakeTestDir("ckpt");
  {
    auto store = OpenAt(dir, 3, env);
    REQUIRE(store->Write(Make(1)).ok());
    disk->fault = FaultyDisk::kNoSpace;
    const absl::Status s = store->Write(Make(2));
    CHECK(s.code() == absl::StatusCode::kUnavailable);
    CHECK(s.message().find("no space") != std::string::npos);
    CHECK(store->Read("job-20261124-1", 1, 1).ok());
    disk->fault = FaultyDisk::kNone;
  }
  // What a restart finds: round 1 whole, round 2 not at all.
  auto store = OpenAt(dir);
  auto back = store->ReadNewest("job-20261124-1", 1);
  REQUIRE(back.ok());
  CheckSame(*back, Make(1));
  CHECK(store->Read("job-20261124-1", 1, 2).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("after a failed write the next one resumes the store", "[storage]") {
  FaultyEnv faulty;
  FaultyDisk* disk = faulty.disk.get();
  rocksdb::Env* env = faulty.env.get();
  const std::string dir = MakeTestDir("ckpt");
  {
    auto store = OpenAt(dir, 3, env);
    REQUIRE(store->Write(Make(1)).ok());
    disk->fault = FaultyDisk::kIoError;
    const absl::Status s = store->Write(Make(2));
    CHECK(s.code() == absl::StatusCode::kUnavailable);
    CHECK(s.message().find("read-only") != std::string::npos);
    disk->fault = FaultyDisk::kNone;
    const absl::Status again = store->Write(Make(3));
    INFO(again.ToString());
    REQUIRE(again.ok());
  }
  auto store = OpenAt(dir);
  auto back = store->ReadNewest("job-20261124-1", 1);
  REQUIRE(back.ok());
  CHECK(back->round == 3);
}

TEST_CASE("the plan a checkpoint was trained under reads back; none is the even split",
          "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  auto store = OpenAt(dir);
  Checkpoint c = Make(10);
  c.plan.num_servers = 3;
  c.plan.chunk_server = {2, 2, 0, 1, 2};
  c.plan.worker_batch = {48, 16};
  c.plan.worker_samples = {400, 240};
  REQUIRE(store->Write(c).ok());
  auto back = store->Read(c.job_id, c.server_index, 10);
  REQUIRE(back.ok());
  CheckSame(*back, c);
  CHECK(back->plan == c.plan);
  // Written without one (as before plans were kept): read as empty.
  Checkpoint old = Make(20);
  REQUIRE(store->Write(old).ok());
  back = store->Read(old.job_id, old.server_index, 20);
  REQUIRE(back.ok());
  CHECK(back->plan.empty());
  CHECK(back->plan.chunk_server.empty());
  // A plan naming a server it does not have, or batches without sample
  // counts, is not written.
  Checkpoint bad = Make(30);
  bad.plan.num_servers = 2;
  bad.plan.chunk_server = {0, 2};
  CHECK(store->Write(bad).code() == absl::StatusCode::kInvalidArgument);
  bad.plan.chunk_server = {0, 1};
  bad.plan.worker_batch = {8};
  CHECK(store->Write(bad).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a meta record whose plan is malformed is refused", "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  // The meta of a checkpoint of no chunks, then a plan tail.
  auto meta = [](const std::function<void(ByteWriter*)>& tail) { return MetaRecord(0, tail); };
  const std::string tails[] = {
      // A chunk owned by server 5 of 2.
      meta([](ByteWriter* w) {
        w->U32(2);
        w->U32(1);
        w->U32(5);
        w->U32(0);
      }),
      // A million chunks claimed in a few bytes.
      meta([](ByteWriter* w) {
        w->U32(2);
        w->U32(kChunksMax);
      }),
      // Workers claimed and missing.
      meta([](ByteWriter* w) {
        w->U32(2);
        w->U32(0);
        w->U32(1000);
      }),
      // Zero servers.
      meta([](ByteWriter* w) {
        w->U32(0);
        w->U32(0);
        w->U32(0);
      }),
  };
  for (const std::string& value : tails) {
    fs::remove_all(dir);
    {
      rocksdb::DB* raw = nullptr;
      rocksdb::Options o;
      o.create_if_missing = true;
      REQUIRE(rocksdb::DB::Open(o, dir, &raw).ok());
      REQUIRE(raw->Put(rocksdb::WriteOptions(), "c/job-x/00000000/0000000000000004/m", value).ok());
      delete raw;
    }
    auto store = OpenAt(dir);
    absl::StatusOr<Checkpoint> c = store->Read("job-x", 0, 4);
    INFO(c.status().message());
    CHECK(c.status().code() == absl::StatusCode::kDataLoss);
    CHECK(c.status().message().find("plan") != absl::string_view::npos);
  }
}

TEST_CASE("a directory that cannot be made, and malformed checkpoints, are refused", "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  { std::ofstream(dir + "/file") << "x"; }
  CheckpointStoreConfig cfg;
  cfg.dir = dir + "/file/sub";
  CHECK(!CheckpointStore::Open(cfg).ok());
  cfg.dir = "";
  CHECK(CheckpointStore::Open(cfg).status().code() == absl::StatusCode::kInvalidArgument);

  auto store = OpenAt(dir + "/db");
  Checkpoint c = Make(1);
  c.job_id = "../etc";
  CHECK(store->Write(c).code() == absl::StatusCode::kInvalidArgument);
  c = Make(1);
  c.chunks[0].slots[0].pop_back();
  CHECK(store->Write(c).code() == absl::StatusCode::kInvalidArgument);
  CHECK(store->ReadNewest("a/b", 0).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a meta record claiming a million chunks in a few bytes is refused", "[storage]") {
  const std::string dir = MakeTestDir("ckpt");
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Options o;
    o.create_if_missing = true;
    REQUIRE(rocksdb::DB::Open(o, dir, &raw).ok());
    // And no entries follow.
    REQUIRE(raw->Put(rocksdb::WriteOptions(), "c/job-x/00000000/0000000000000004/m",
                     MetaRecord(kChunksMax, [](ByteWriter*) {}))
                .ok());
    delete raw;
  }
  auto store = OpenAt(dir);
  ReadStats stats;
  CHECK(store->ReadNewest("job-x", 0, &stats).status().code() == absl::StatusCode::kNotFound);
  CHECK(stats.skipped == 1);
  CHECK(store->Read("job-x", 0, 4).status().code() == absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace storage
}  // namespace hetps
