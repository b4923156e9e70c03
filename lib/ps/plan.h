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

// The version every node starts a job (or a recovery epoch) under, and
// that every data packet of it carries until a newer plan switches.
inline constexpr uint32_t kFirstPlanVersion = 1;

// The chunk id an announcement's packets carry: never a parameter chunk
// (ChunkLayout::kChunksMax is far below it).
constexpr uint32_t kPlanChunk = 0xFFFFFFFFu;
// A server that owns no chunks under a plan still takes part in every
// round, so that workers learn which plan it follows and it keeps step
// with them: its parameter flow, and each worker's push to it, is one
// packet of one float (0) under this chunk id.
constexpr uint32_t kEmptyChunk = 0xFFFFFFFEu;

// What every node of a job knows of its shape, and checks plans against.
struct PlanShape {
  uint32_t num_servers = 1;
  uint32_t num_workers = 1;
  uint32_t batch_size = 1;  // the job's, per worker: the global batch is their product
  uint32_t batch_max = 1;   // the most one worker's model is sized for
  // Chunks per broadcast segment (0: a server's chunks are one segment).
  // A server sends each segment of a round's parameters as its own flow,
  // as soon as every worker's push of those chunks arrived (pipelining:
  // docs/plan.md, "Segments"); workers take a round once every segment
  // of every server came under one plan.
  uint32_t segment_chunks = 0;
  // The even batch split (every worker batch_size).
  std::vector<uint32_t> EvenBatches() const {
    return std::vector<uint32_t>(num_workers, batch_size);
  }
  // OK when `batch` has one entry per worker, each 1 to batch_max, summing
  // to the global batch; else why not.
  absl::Status CheckBatches(const std::vector<uint32_t>& batch) const;
};

struct Plan {
  uint32_t from = 0;  // the first iteration it holds for
  ChunkMap map;       // map.version() is the plan's version
  // Each worker's samples per iteration, by rank (WLBS); the global batch
  // stays the job's.
  std::vector<uint32_t> batch;
  // Packets of each server's flow of its chunks (pulls and pushes); 1 for
  // a server with none (kEmptyChunk).
  std::vector<uint64_t> packets;
  // Each server's segments (PlanShape::segment_chunks): consecutive runs
  // of its chunks in ascending order, and the packets of each; a server
  // with no chunks has one segment of 1 packet. And each chunk's segment
  // index among its owner's.
  std::vector<std::vector<uint64_t>> segment_packets;
  std::vector<uint32_t> chunk_segment;
};

class PlanBook {
 public:
  // How many versions a node keeps: the one in force, the next, and a few
  // older ones for flows still in flight from a node that fell behind.
  static constexpr size_t kKept = 4;

  // Holds version 1 from iteration 0: the even split of chunks and
  // batches, or, when a recovery resumes under another plan (docs/plan.md,
  // "Recovery"), `start`: every chunk's owner and every worker's batch.
  // InvalidArgument for a start of another shape.
  struct Start {
    std::vector<uint32_t> chunk_server;
    std::vector<uint32_t> batch;
  };
  static absl::StatusOr<PlanBook> Create(const ChunkLayout& layout, const PlanShape& shape,
                                         uint32_t payload_floats, const Start* start = nullptr);

  // A newer version: `from` must be after every known version's from.
  // InvalidArgument for an older or known version, an earlier start, or a
  // map or batches of another shape.
  absl::Status Add(uint32_t from, ChunkMap map, std::vector<uint32_t> batch);

  const Plan* Get(uint32_t version) const;  // null: unknown (or forgotten)
  // The newest known plan whose from <= iteration (never null: version 1
  // holds from 0 until forgotten, and one is always kept).
  const Plan& For(uint32_t iteration) const;
  const Plan& newest() const { return plans_.rbegin()->second; }
  const ChunkLayout& layout() const { return layout_; }
  uint32_t num_servers() const { return shape_.num_servers; }
  const PlanShape& shape() const { return shape_; }

 private:
  PlanBook(ChunkLayout layout, PlanShape shape, uint32_t pf)
      : layout_(layout), shape_(std::move(shape)), payload_floats_(pf) {}
  ChunkLayout layout_;
  PlanShape shape_;
  uint32_t payload_floats_;
  std::map<uint32_t, Plan> plans_;  // by version
};

// An announcement: u32 words [version, from, num_servers, num_chunks,
// num_workers, owner of each chunk, batch of each worker], little-endian,
// sent as the payload of kPlanChunk packets (chunk_offset = word index).
std::vector<uint32_t> EncodePlan(uint32_t from, const ChunkMap& map,
                                 const std::vector<uint32_t>& batch);
// Words an announcement of this job's plans has.
inline uint64_t PlanWords(uint32_t num_chunks, uint32_t num_workers) {
  return 5 + uint64_t(num_chunks) + num_workers;
}
// Checks everything against this job's layout and shape.
absl::StatusOr<Plan> DecodePlan(const std::vector<uint32_t>& words, const ChunkLayout& layout,
                                const PlanShape& shape);

// Receives announcements from server 0 (servers and workers alike): one
// open at a time, written as its packets come, decoded when it ends.
class PlanReceiver {
 public:
  PlanReceiver(uint32_t num_chunks, uint32_t num_workers, uint32_t payload_floats)
      : words_max_(PlanWords(num_chunks, num_workers)), payload_floats_(payload_floats) {}
  // A flow's first packet: whether to take it (a plan newer than `newest`,
  // exactly one announcement's packets); it replaces any open one.
  bool Open(uint32_t flow_id, uint32_t total_packets, uint32_t version, uint32_t newest);
  // One packet of the open announcement; false when it is not that
  // flow's or falls outside it.
  bool Write(uint32_t flow_id, uint32_t word_offset, const uint8_t* payload, uint32_t bytes);
  // True when `flow_id` is the open announcement's: it closes, and *plan is
  // the plan it carried, or why not (incomplete, malformed, another
  // version than its packets said).
  bool Close(uint32_t flow_id, bool complete, uint32_t version, const ChunkLayout& layout,
             const PlanShape& shape, absl::StatusOr<Plan>* plan);

 private:
  const uint64_t words_max_;
  const uint32_t payload_floats_;
  bool open_ = false;
  uint32_t flow_id_ = 0;
  std::vector<uint32_t> words_;
};

}  // namespace ps
}  // namespace hetps

#endif  // HETPS_LIB_PS_PLAN_H_
