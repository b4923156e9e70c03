// ShardSampler: which samples worker `worker` of `workers` trains on at each
// iteration. The worker's shard (ShardIndices) is read as an endless stream,
// reshuffled at every epoch boundary from (seed, worker, epoch), so every
// batch is full and any process can reproduce any worker's batches; that is
// what makes single-process reference training comparable to a cluster.
//
// Not thread-safe (caches the current epoch's order).
#ifndef HETPS_LIB_DATA_SAMPLER_H_
#define HETPS_LIB_DATA_SAMPLER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hetps {

class ShardSampler {
 public:
  // n: training samples; batch: samples per iteration (> 0).
  ShardSampler(size_t n, uint32_t worker, uint32_t workers, uint64_t seed, uint32_t batch);

  // Dataset indices of iteration `iteration`'s batch (batch() of them).
  std::vector<uint32_t> Batch(uint64_t iteration);
  // The `count` samples from position `first` of this worker's stream (its
  // shard in a fresh order each epoch, one epoch after another): batches of
  // varying size (docs/plan.md). Batch(t) is Samples(t * batch(), batch()).
  std::vector<uint32_t> Samples(uint64_t first, uint32_t count);
  size_t shard_size() const { return shard_.size(); }
  uint32_t batch() const { return batch_; }
  // Epoch (pass over the shard) that `iteration` starts in.
  uint64_t EpochOf(uint64_t iteration) const;

 private:
  const std::vector<uint32_t>& Order(uint64_t epoch);

  std::vector<uint32_t> shard_;
  uint32_t worker_;
  uint64_t seed_;
  uint32_t batch_;
  uint64_t cached_epoch_ = UINT64_MAX;
  std::vector<uint32_t> order_;
};

}  // namespace hetps

#endif  // HETPS_LIB_DATA_SAMPLER_H_
