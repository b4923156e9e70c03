// Parameter layout for the data plane: the model's flat float32 parameter
// vector cut into fixed-size chunks (ChunkLayout), and which parameter
// server owns each chunk (ChunkMap).
//
// A ChunkMap is an immutable, versioned value: the scheduler issues a new
// version (today an even split; later a network-aware policy) and every node
// switches between iterations. Pure: no I/O, no threads. Values are
// thread-compatible (const methods may be called concurrently).
#ifndef HETPS_LIB_PS_CHUNK_MAP_H_
#define HETPS_LIB_PS_CHUNK_MAP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace hetps {
namespace ps {

struct Chunk {
  uint32_t id = 0;
  uint64_t offset = 0;  // into the flat parameter vector, in floats
  uint32_t floats = 0;  // length; every chunk but the last has chunk_floats
};

class ChunkLayout {
 public:
  // Bounds: chunk_floats in [kChunkFloatsMin, kChunkFloatsMax]; at most
  // kChunksMax chunks (so chunk ids fit the wire header comfortably).
  static constexpr uint32_t kChunkFloatsMin = 64;
  static constexpr uint32_t kChunkFloatsMax = 64u << 20;
  static constexpr uint32_t kChunksMax = 1u << 20;

  static absl::StatusOr<ChunkLayout> Create(uint64_t num_params, uint32_t chunk_floats);

  uint64_t num_params() const { return num_params_; }
  uint32_t chunk_floats() const { return chunk_floats_; }
  uint32_t num_chunks() const { return num_chunks_; }
  Chunk chunk(uint32_t id) const;  // id < num_chunks()

 private:
  ChunkLayout(uint64_t n, uint32_t c, uint32_t k)
      : num_params_(n), chunk_floats_(c), num_chunks_(k) {}
  uint64_t num_params_;
  uint32_t chunk_floats_;
  uint32_t num_chunks_;
};

class ChunkMap {
 public:
  // The "Average" baseline: servers own contiguous runs of chunks whose
  // counts differ by at most one (server s gets the s-th run).
  static absl::StatusOr<ChunkMap> EvenSplit(const ChunkLayout& layout, uint32_t num_servers,
                                            uint64_t version);
  // Any assignment (e.g. from a policy): owners[chunk] = server index.
  static absl::StatusOr<ChunkMap> FromOwners(const ChunkLayout& layout, uint32_t num_servers,
                                             std::vector<uint32_t> owners, uint64_t version);

  uint64_t version() const { return version_; }
  uint32_t num_servers() const { return num_servers_; }
  uint32_t num_chunks() const { return static_cast<uint32_t>(owners_.size()); }
  uint32_t owner(uint32_t chunk) const { return owners_[chunk]; }
  const std::vector<uint32_t>& owners() const { return owners_; }
  // The chunk ids server s owns, ascending. O(chunks).
  std::vector<uint32_t> ChunksOf(uint32_t server) const;
  // Parameters (floats) per server. O(chunks).
  std::vector<uint64_t> FloatsPerServer(const ChunkLayout& layout) const;
  // Chunks whose owner differs from `other`'s (same layout required).
  std::vector<uint32_t> Moved(const ChunkMap& other) const;

 private:
  ChunkMap(uint64_t v, uint32_t s, std::vector<uint32_t> o)
      : version_(v), num_servers_(s), owners_(std::move(o)) {}
  uint64_t version_;
  uint32_t num_servers_;
  std::vector<uint32_t> owners_;
};

// Packets a flow of these chunks has when each chunk is cut into packets of
// at most payload_floats (transport::AppendPackets): what a receiver
// expects a push or pull of them to declare in total_packets.
uint64_t PacketsForChunks(const ChunkLayout& layout, const std::vector<uint32_t>& chunks,
                          uint32_t payload_floats);

}  // namespace ps
}  // namespace hetps

#endif  // HETPS_LIB_PS_CHUNK_MAP_H_
