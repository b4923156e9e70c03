#include "lib/ps/plan.h"

#include <catch2/catch.hpp>

namespace hetps {
namespace ps {
namespace {

ChunkMap Owners(const ChunkLayout& layout, std::vector<uint32_t> owners, uint64_t version) {
  auto m = ChunkMap::FromOwners(layout, 2, std::move(owners), version);
  REQUIRE(m.ok());
  return *m;
}

// 2 servers, 3 workers of batch 32 (a global batch of 96).
PlanShape Shape() {
  PlanShape s;
  s.num_servers = 2;
  s.num_workers = 3;
  s.batch_size = 32;
  s.batch_max = 64;
  return s;
}

const std::vector<uint32_t> kEven = {32, 32, 32};

TEST_CASE("a plan book starts at the even split and finds the plan for an iteration", "[plan]") {
  const ChunkLayout layout = *ChunkLayout::Create(1000, 256);  // 4 chunks
  auto book = PlanBook::Create(layout, Shape(), 100);
  REQUIRE(book.ok());
  CHECK(book->For(0).map.version() == 1);
  CHECK(book->For(0).map.owners() == std::vector<uint32_t>{0, 0, 1, 1});
  CHECK(book->For(0).batch == kEven);
  CHECK(book->For(0).packets ==
        std::vector<uint64_t>{6, 6});  // 3 packets a chunk (the last: 232 floats)

  REQUIRE(book->Add(5, Owners(layout, {0, 1, 1, 1}, 2), {50, 30, 16}).ok());
  CHECK(book->For(4).map.version() == 1);
  CHECK(book->For(5).map.version() == 2);
  CHECK(book->For(99).map.version() == 2);
  CHECK(book->For(5).batch == std::vector<uint32_t>{50, 30, 16});
  CHECK(book->Get(2)->packets == std::vector<uint64_t>{3, 9});
  CHECK(book->Get(3) == nullptr);

  // Only forward: a known or older version, or one starting no later.
  CHECK(!book->Add(9, Owners(layout, {1, 1, 1, 1}, 2), kEven).ok());
  CHECK(!book->Add(5, Owners(layout, {1, 1, 1, 1}, 3), kEven).ok());
  auto three = ChunkMap::FromOwners(layout, 3, {0, 1, 2, 2}, 3);
  CHECK(!book->Add(9, *three, kEven).ok());  // another server count
  // Batches that change the global batch, leave a worker none, or miss a
  // worker.
  CHECK(!book->Add(9, Owners(layout, {1, 1, 1, 1}, 3), {32, 32, 33}).ok());
  CHECK(!book->Add(9, Owners(layout, {1, 1, 1, 1}, 3), {0, 64, 32}).ok());
  CHECK(!book->Add(9, Owners(layout, {1, 1, 1, 1}, 3), {65, 30, 1}).ok());  // over batch_max
  CHECK(!book->Add(9, Owners(layout, {1, 1, 1, 1}, 3), {48, 48}).ok());

  // Bounded: the oldest versions are forgotten.
  for (uint32_t v = 3; v < 3 + PlanBook::kKept; ++v) {
    REQUIRE(book->Add(10 * v, Owners(layout, {v % 2, 0, 1, 0}, v), kEven).ok());
  }
  CHECK(book->Get(1) == nullptr);
  CHECK(book->Get(2) == nullptr);
  CHECK(book->newest().map.version() == 2 + PlanBook::kKept);
}

TEST_CASE("a worker's batch stays within the spread its model is sized for", "[plan]") {
  PlanShape six;
  six.num_workers = 6;
  six.batch_size = 4;  // global 24
  six.batch_max = 16;
  CHECK(six.CheckBatches({1, 1, 1, 1, 4, 16}).ok());
  CHECK(!six.CheckBatches({1, 1, 1, 1, 3, 17}).ok());
  CHECK(six.CheckBatches(six.EvenBatches()).ok());
}

TEST_CASE("an announcement decodes to what was encoded, and nothing malformed does", "[plan]") {
  const ChunkLayout layout = *ChunkLayout::Create(1000, 256);
  const ChunkMap map = Owners(layout, {1, 0, 1, 0}, 7);
  const std::vector<uint32_t> words = EncodePlan(42, map, {20, 40, 36});
  CHECK(words.size() == PlanWords(4, 3));
  auto back = DecodePlan(words, layout, Shape());
  REQUIRE(back.ok());
  CHECK(back->from == 42);
  CHECK(back->map.version() == 7);
  CHECK(back->map.owners() == map.owners());
  CHECK(back->batch == std::vector<uint32_t>{20, 40, 36});

  auto bad = [&](size_t at, uint32_t value) {
    std::vector<uint32_t> w = words;
    w[at] = value;
    return DecodePlan(w, layout, Shape()).ok();
  };
  CHECK(!bad(0, 1));   // version 1 is never announced
  CHECK(!bad(2, 3));   // another server count
  CHECK(!bad(3, 5));   // another chunk count
  CHECK(!bad(4, 2));   // another worker count
  CHECK(!bad(7, 2));   // an owner out of range
  CHECK(!bad(9, 21));  // batches that do not sum to the global batch
  std::vector<uint32_t> shorter(words.begin(), words.end() - 1);
  CHECK(!DecodePlan(shorter, layout, Shape()).ok());
  CHECK(!DecodePlan({}, layout, Shape()).ok());
}

TEST_CASE("a plan receiver takes one announcement at a time, whole or not at all", "[plan]") {
  const ChunkLayout layout = *ChunkLayout::Create(1000, 256);
  const std::vector<uint32_t> words = EncodePlan(9, Owners(layout, {1, 1, 0, 0}, 3), kEven);
  const uint32_t pf = 4;  // 12 words: 3 packets
  PlanReceiver r(layout.num_chunks(), 3, pf);
  auto bytes = [&](size_t word) { return reinterpret_cast<const uint8_t*>(words.data() + word); };
  CHECK(!r.Open(1, 3, 3, 3));  // not newer than what is known
  CHECK(!r.Open(1, 4, 3, 2));  // another size
  REQUIRE(r.Open(1, 3, 3, 2));
  CHECK(!r.Write(2, 0, bytes(0), 16));   // another flow
  CHECK(!r.Write(1, 10, bytes(0), 16));  // past the end
  for (uint32_t w = 0; w < 12; w += pf) REQUIRE(r.Write(1, w, bytes(w), 16));
  absl::StatusOr<Plan> plan;
  CHECK(!r.Close(2, true, 3, layout, Shape(), &plan));  // not the open one
  REQUIRE(r.Close(1, true, 3, layout, Shape(), &plan));
  REQUIRE(plan.ok());
  CHECK(plan->from == 9);
  CHECK(plan->map.owners() == std::vector<uint32_t>{1, 1, 0, 0});

  // Incomplete, or another version than its packets said: refused whole.
  REQUIRE(r.Open(5, 3, 3, 2));
  REQUIRE(r.Close(5, false, 3, layout, Shape(), &plan));
  CHECK(!plan.ok());
  REQUIRE(r.Open(6, 3, 4, 2));
  for (uint32_t w = 0; w < 12; w += pf) REQUIRE(r.Write(6, w, bytes(w), 16));
  REQUIRE(r.Close(6, true, 4, layout, Shape(), &plan));
  CHECK(!plan.ok());
  CHECK(!r.Write(6, 0, bytes(0), 16));  // closed
}

}  // namespace
}  // namespace ps
}  // namespace hetps
