#include "lib/ps/chunk_map.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace hetps {
namespace ps {

absl::StatusOr<ChunkLayout> ChunkLayout::Create(uint64_t num_params, uint32_t chunk_floats) {
  if (num_params == 0) return absl::InvalidArgumentError("chunk layout: model has no parameters");
  if (chunk_floats < kChunkFloatsMin || chunk_floats > kChunkFloatsMax) {
    return absl::InvalidArgumentError(absl::StrCat("chunk layout: chunk_size ", chunk_floats,
                                                   " floats is outside [", kChunkFloatsMin, ", ",
                                                   kChunkFloatsMax, "]"));
  }
  const uint64_t chunks = (num_params + chunk_floats - 1) / chunk_floats;
  if (chunks > kChunksMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk layout: ", num_params, " parameters in chunks of ", chunk_floats,
                     " make ", chunks, " chunks, more than ", kChunksMax, "; raise chunk_size"));
  }
  return ChunkLayout(num_params, chunk_floats, static_cast<uint32_t>(chunks));
}

Chunk ChunkLayout::chunk(uint32_t id) const {
  Chunk c;
  c.id = id;
  c.offset = static_cast<uint64_t>(id) * chunk_floats_;
  c.floats = static_cast<uint32_t>(std::min<uint64_t>(chunk_floats_, num_params_ - c.offset));
  return c;
}

absl::StatusOr<ChunkMap> ChunkMap::EvenSplit(const ChunkLayout& layout, uint32_t num_servers,
                                             uint64_t version) {
  if (num_servers == 0) return absl::InvalidArgumentError("chunk map: no parameter servers");
  const uint32_t n = layout.num_chunks();
  std::vector<uint32_t> owners(n);
  // Server s owns [s*n/S, (s+1)*n/S): run lengths differ by at most one.
  for (uint32_t s = 0; s < num_servers; ++s) {
    const uint64_t begin = uint64_t(s) * n / num_servers, end = uint64_t(s + 1) * n / num_servers;
    for (uint64_t c = begin; c < end; ++c) owners[c] = s;
  }
  return ChunkMap(version, num_servers, std::move(owners));
}

absl::StatusOr<ChunkMap> ChunkMap::FromOwners(const ChunkLayout& layout, uint32_t num_servers,
                                              std::vector<uint32_t> owners, uint64_t version) {
  if (num_servers == 0) return absl::InvalidArgumentError("chunk map: no parameter servers");
  if (owners.size() != layout.num_chunks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk map: ", owners.size(), " owners for ", layout.num_chunks(), " chunks"));
  }
  for (size_t c = 0; c < owners.size(); ++c) {
    if (owners[c] >= num_servers) {
      return absl::InvalidArgumentError(absl::StrCat("chunk map: chunk ", c, " owned by server ",
                                                     owners[c], " of ", num_servers));
    }
  }
  return ChunkMap(version, num_servers, std::move(owners));
}

std::vector<uint32_t> ChunkMap::ChunksOf(uint32_t server) const {
  std::vector<uint32_t> out;
  for (uint32_t c = 0; c < owners_.size(); ++c) {
    if (owners_[c] == server) out.push_back(c);
  }
  return out;
}

std::vector<uint64_t> ChunkMap::FloatsPerServer(const ChunkLayout& layout) const {
  std::vector<uint64_t> out(num_servers_, 0);
  for (uint32_t c = 0; c < owners_.size(); ++c) out[owners_[c]] += layout.chunk(c).floats;
  return out;
}

std::vector<uint32_t> ChunkMap::Moved(const ChunkMap& other) const {
  std::vector<uint32_t> out;
  const size_t n = std::min(owners_.size(), other.owners_.size());
  for (uint32_t c = 0; c < n; ++c) {
    if (owners_[c] != other.owners_[c]) out.push_back(c);
  }
  for (size_t c = n; c < std::max(owners_.size(), other.owners_.size()); ++c) {
    out.push_back(static_cast<uint32_t>(c));
  }
  return out;
}

uint64_t PacketsForChunks(const ChunkLayout& layout, const std::vector<uint32_t>& chunks,
                          uint32_t payload_floats) {
  uint64_t n = 0;
  for (uint32_t c : chunks)
    n += (uint64_t(layout.chunk(c).floats) + payload_floats - 1) / payload_floats;
  return n;
}

}  // namespace ps
}  // namespace hetps
