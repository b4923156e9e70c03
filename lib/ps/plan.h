// The cluster plan as the data plane sees it (docs/plan.md): which server
// owns each chunk, from which iteration on, under which version. Version 1
// is the job's even split from iteration 0, which every node derives by
// itself; later versions enter at server 0 (the sequencer), which picks the
// iteration each one starts at and announces it in band to every other
// node (EncodePlan/DecodePlan). A PlanBook is what one node knows.
// Pure values; thread-compatible.
#ifndef HETPS_LIB_PS_PLAN_H_
#define HETPS_LIB_PS_PLAN_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/ps/chunk_map.h"

namespace hetps {
namespace ps {

// The chunk id an announcement's packets carry: never a parameter chunk
// (ChunkLayout::kChunksMax is far below it).
constexpr uint32_t kPlanChunk = 0xFFFFFFFFu;
// A server that owns no chunks under a plan still takes part in every
// round, so that workers learn which plan it follows and it keeps step
// with them: its parameter flow, and each worker's push to it, is one
// packet of one float (0) under this chunk id.
constexpr uint32_t kEmptyChunk = 0xFFFFFFFEu;

struct Plan {
  uint32_t from = 0;  // the first iteration it holds for
  ChunkMap map;       // map.version() is the plan's version
  // Packets of each server's flow of its chunks (pulls and pushes); 1 for
  // a server with none (kEmptyChunk).
  std::vector<uint64_t> packets;
};

class PlanBook {
 public:
  // How many versions a node keeps: the one in force, the next, and a few
  // older ones for flows still in flight from a node that fell behind.
  static constexpr size_t kKept = 4;

  // Holds version 1: the even split, from iteration 0.
  static absl::StatusOr<PlanBook> Create(const ChunkLayout& layout, uint32_t num_servers,
                                         uint32_t payload_floats);

  // A newer version: `from` must be after every known version's from.
  // InvalidArgument for an older or known version, an earlier start, or a
  // map of another shape.
  absl::Status Add(uint32_t from, ChunkMap map);

  const Plan* Get(uint32_t version) const;  // null: unknown (or forgotten)
  // The newest known plan whose from <= iteration (never null: version 1
  // holds from 0 until forgotten, and one is always kept).
  const Plan& For(uint32_t iteration) const;
  const Plan& newest() const { return plans_.rbegin()->second; }
  const ChunkLayout& layout() const { return layout_; }
  uint32_t num_servers() const { return num_servers_; }

 private:
  PlanBook(ChunkLayout layout, uint32_t s, uint32_t pf)
      : layout_(layout), num_servers_(s), payload_floats_(pf) {}
  ChunkLayout layout_;
  uint32_t num_servers_;
  uint32_t payload_floats_;
  std::map<uint32_t, Plan> plans_;  // by version
};

// An announcement: u32 words [version, from, num_servers, num_chunks,
// owner of each chunk], little-endian, sent as the payload of kPlanChunk
// packets (chunk_offset = word index).
std::vector<uint32_t> EncodePlan(uint32_t from, const ChunkMap& map);
// Words an announcement of `num_chunks` chunks has.
inline uint64_t PlanWords(uint32_t num_chunks) { return 4 + uint64_t(num_chunks); }
// Checks everything against this job's layout and server count.
absl::StatusOr<Plan> DecodePlan(const std::vector<uint32_t>& words, const ChunkLayout& layout,
                                uint32_t num_servers);

}  // namespace ps
}  // namespace hetps

#endif  // HETPS_LIB_PS_PLAN_H_
