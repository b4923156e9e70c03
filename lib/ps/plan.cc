#include "lib/ps/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace hetps {
namespace ps {
namespace {

std::vector<uint64_t> PacketsPerServer(const ChunkLayout& layout, const ChunkMap& map,
                                       uint32_t payload_floats) {
  std::vector<uint64_t> out(map.num_servers());
  for (uint32_t s = 0; s < map.num_servers(); ++s) {
    out[s] = std::max<uint64_t>(1, PacketsForChunks(layout, map.ChunksOf(s), payload_floats));
  }
  return out;
}

}  // namespace

absl::StatusOr<PlanBook> PlanBook::Create(const ChunkLayout& layout, uint32_t num_servers,
                                          uint32_t payload_floats) {
  absl::StatusOr<ChunkMap> even = ChunkMap::EvenSplit(layout, num_servers, 1);
  if (!even.ok()) return even.status();
  PlanBook book(layout, num_servers, payload_floats);
  std::vector<uint64_t> packets = PacketsPerServer(layout, *even, payload_floats);
  book.plans_.emplace(1, Plan{0, std::move(*even), std::move(packets)});
  return book;
}

absl::Status PlanBook::Add(uint32_t from, ChunkMap map) {
  const Plan& last = newest();
  if (map.version() <= last.map.version() || map.version() > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: version ", map.version(), " is not after ", last.map.version()));
  }
  if (from <= last.from) {
    return absl::InvalidArgumentError(absl::StrCat("plan ", map.version(), ": starts at iteration ",
                                                   from, ", not after ", last.from));
  }
  if (map.num_servers() != num_servers_ || map.num_chunks() != layout_.num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan ", map.version(), ": ", map.num_chunks(), " chunks on ", map.num_servers(),
        " servers, the job has ", layout_.num_chunks(), " on ", num_servers_));
  }
  std::vector<uint64_t> packets = PacketsPerServer(layout_, map, payload_floats_);
  const uint32_t v = static_cast<uint32_t>(map.version());
  plans_.emplace(v, Plan{from, std::move(map), std::move(packets)});
  while (plans_.size() > kKept) plans_.erase(plans_.begin());
  return absl::OkStatus();
}

const Plan* PlanBook::Get(uint32_t version) const {
  auto it = plans_.find(version);
  return it == plans_.end() ? nullptr : &it->second;
}

const Plan& PlanBook::For(uint32_t iteration) const {
  for (auto it = plans_.rbegin(); it != plans_.rend(); ++it) {
    if (it->second.from <= iteration) return it->second;
  }
  return plans_.begin()->second;
}

std::vector<uint32_t> EncodePlan(uint32_t from, const ChunkMap& map) {
  std::vector<uint32_t> words;
  words.reserve(PlanWords(map.num_chunks()));
  words.push_back(static_cast<uint32_t>(map.version()));
  words.push_back(from);
  words.push_back(map.num_servers());
  words.push_back(map.num_chunks());
  words.insert(words.end(), map.owners().begin(), map.owners().end());
  return words;
}

absl::StatusOr<Plan> DecodePlan(const std::vector<uint32_t>& words, const ChunkLayout& layout,
                                uint32_t num_servers) {
  if (words.size() != PlanWords(layout.num_chunks())) {
    return absl::InvalidArgumentError(absl::StrCat("plan announcement: ", words.size(),
                                                   " words, this job's have ",
                                                   PlanWords(layout.num_chunks())));
  }
  if (words[0] < 2) return absl::InvalidArgumentError("plan announcement: version below 2");
  if (words[2] != num_servers || words[3] != layout.num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat("plan announcement: ", words[3], " chunks on ",
                                                   words[2], " servers, this job has ",
                                                   layout.num_chunks(), " on ", num_servers));
  }
  absl::StatusOr<ChunkMap> map = ChunkMap::FromOwners(
      layout, num_servers, std::vector<uint32_t>(words.begin() + 4, words.end()), words[0]);
  if (!map.ok()) return map.status();
  return Plan{words[1], std::move(*map), {}};
}

}  // namespace ps
}  // namespace hetps
