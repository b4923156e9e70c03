#include "lib/data/sampler.h"

#include <utility>

#include "lib/base/splitmix.h"
#include "lib/data/idx.h"

namespace hetps {

ShardSampler::ShardSampler(size_t n, uint32_t worker, uint32_t workers, uint64_t seed,
                           uint32_t batch)
    : shard_(ShardIndices(n, worker, workers, seed)),
      worker_(worker),
      seed_(seed),
      batch_(batch == 0 ? 1 : batch) {}

uint64_t ShardSampler::EpochOf(uint64_t iteration) const {
  return shard_.empty() ? 0 : iteration * batch_ / shard_.size();
}

const std::vector<uint32_t>& ShardSampler::Order(uint64_t epoch) {
  if (epoch == cached_epoch_) return order_;
  order_ = shard_;
  // Fisher-Yates from a counter-based stream: platform-independent.
  uint64_t state =
      Mix64(seed_ ^ Mix64(0x5EED0000ull + worker_) ^ Mix64(epoch * SplitMix64::kGamma));
  for (size_t i = order_.size(); i > 1; --i) {
    state = Mix64(state + SplitMix64::kGamma);
    std::swap(order_[i - 1], order_[state % i]);
  }
  cached_epoch_ = epoch;
  return order_;
}

std::vector<uint32_t> ShardSampler::Batch(uint64_t iteration) {
  return Samples(iteration * batch_, batch_);
}

std::vector<uint32_t> ShardSampler::Samples(uint64_t first, uint32_t count) {
  std::vector<uint32_t> out;
  if (shard_.empty()) return out;
  out.reserve(count);
  for (uint64_t pos = first; pos < first + count; ++pos) {
    out.push_back(Order(pos / shard_.size())[pos % shard_.size()]);
  }
  return out;
}

}  // namespace hetps
