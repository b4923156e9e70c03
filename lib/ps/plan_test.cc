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

TEST_CASE("a plan book starts at the even split and finds the plan for an iteration", "[plan]") {
  const ChunkLayout layout = *ChunkLayout::Create(1000, 256);  // 4 chunks
  auto book = PlanBook::Create(layout, 2, 100);
  REQUIRE(book.ok());
  CHECK(book->For(0).map.version() == 1);
  CHECK(book->For(0).map.owners() == std::vector<uint32_t>{0, 0, 1, 1});
  CHECK(book->For(0).packets ==
        std::vector<uint64_t>{6, 6});  // 3 packets a chunk (the last: 232 floats)

  REQUIRE(book->Add(5, Owners(layout, {0, 1, 1, 1}, 2)).ok());
  CHECK(book->For(4).map.version() == 1);
  CHECK(book->For(5).map.version() == 2);
  CHECK(book->For(99).map.version() == 2);
  CHECK(book->Get(2)->packets == std::vector<uint64_t>{3, 9});
  CHECK(book->Get(3) == nullptr);

  // Only forward: a known or older version, or one starting no later.
  CHECK(!book->Add(9, Owners(layout, {1, 1, 1, 1}, 2)).ok());
  CHECK(!book->Add(5, Owners(layout, {1, 1, 1, 1}, 3)).ok());
  auto three = ChunkMap::FromOwners(layout, 3, {0, 1, 2, 2}, 3);
  CHECK(!book->Add(9, *three).ok());  // another server count

  // Bounded: the oldest versions are forgotten.
  for (uint32_t v = 3; v < 3 + PlanBook::kKept; ++v) {
    REQUIRE(book->Add(10 * v, Owners(layout, {v % 2, 0, 1, 0}, v)).ok());
  }
  CHECK(book->Get(1) == nullptr);
  CHECK(book->Get(2) == nullptr);
  CHECK(book->newest().map.version() == 2 + PlanBook::kKept);
}

TEST_CASE("an announcement decodes to what was encoded, and nothing malformed does", "[plan]") {
  const ChunkLayout layout = *ChunkLayout::Create(1000, 256);
  const ChunkMap map = Owners(layout, {1, 0, 1, 0}, 7);
  const std::vector<uint32_t> words = EncodePlan(42, map);
  CHECK(words.size() == PlanWords(4));
  auto back = DecodePlan(words, layout, 2);
  REQUIRE(back.ok());
  CHECK(back->from == 42);
  CHECK(back->map.version() == 7);
  CHECK(back->map.owners() == map.owners());

  auto bad = [&](size_t at, uint32_t value) {
    std::vector<uint32_t> w = words;
    w[at] = value;
    return DecodePlan(w, layout, 2).ok();
  };
  CHECK(!bad(0, 1));  // version 1 is never announced
  CHECK(!bad(2, 3));  // another server count
  CHECK(!bad(3, 5));  // another chunk count
  CHECK(!bad(6, 2));  // an owner out of range
  std::vector<uint32_t> shorter(words.begin(), words.end() - 1);
  CHECK(!DecodePlan(shorter, layout, 2).ok());
  CHECK(!DecodePlan({}, layout, 2).ok());
}

}  // namespace
}  // namespace ps
}  // namespace hetps
