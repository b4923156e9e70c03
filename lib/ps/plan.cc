#include "lib/ps/plan.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace hetps {
namespace ps {
namespace {

// Fills the plan's packet counts: per server, per segment, per chunk.
void CutPlan(const ChunkLayout& layout, uint32_t payload_floats, uint32_t segment_chunks,
             Plan* plan) {
  const ChunkMap& map = plan->map;
  plan->packets.assign(map.num_servers(), 1);
  plan->segment_packets.assign(map.num_servers(), {});
  plan->chunk_segment.assign(map.num_chunks(), 0);
  for (uint32_t s = 0; s < map.num_servers(); ++s) {
    const std::vector<uint32_t> chunks = map.ChunksOf(s);
    std::vector<uint64_t>& segs = plan->segment_packets[s];
    if (chunks.empty()) {
      segs.push_back(1);
      continue;
    }
    const size_t per = segment_chunks == 0 ? chunks.size() : segment_chunks;
    plan->packets[s] = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (i % per == 0) segs.push_back(0);
      const uint64_t n =
          (uint64_t(layout.chunk(chunks[i]).floats) + payload_floats - 1) / payload_floats;
      segs.back() += n;
      plan->packets[s] += n;
      plan->chunk_segment[chunks[i]] = static_cast<uint32_t>(segs.size() - 1);
    }
  }
}

}  // namespace

absl::Status PlanShape::CheckBatches(const std::vector<uint32_t>& batch) const {
  if (batch.size() != num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: ", batch.size(), " batches, the job has ", num_workers, " workers"));
  }
  uint64_t sum = 0;
  for (uint32_t b : batch) {
    if (b == 0 || b > batch_max) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: a batch of ", b, " samples; 1 to ", batch_max, " here"));
    }
    sum += b;
  }
  if (sum != uint64_t(num_workers) * batch_size) {
    return absl::InvalidArgumentError(absl::StrCat("plan: batches sum to ", sum,
                                                   ", the job's global batch is ",
                                                   uint64_t(num_workers) * batch_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlanBook> PlanBook::Create(const ChunkLayout& layout, const PlanShape& shape,
                                          uint32_t payload_floats, const Start* start) {
  if (shape.num_workers == 0 || shape.batch_size == 0 || shape.batch_max < shape.batch_size) {
    return absl::InvalidArgumentError("plan: a job needs workers and a batch");
  }
  absl::StatusOr<ChunkMap> map =
      start == nullptr
          ? ChunkMap::EvenSplit(layout, shape.num_servers, kFirstPlanVersion)
          : ChunkMap::FromOwners(layout, shape.num_servers, start->chunk_server, kFirstPlanVersion);
  if (!map.ok()) return map.status();
  std::vector<uint32_t> batch = start == nullptr ? shape.EvenBatches() : start->batch;
  if (absl::Status s = shape.CheckBatches(batch); !s.ok()) return s;
  PlanBook book(layout, shape, payload_floats);
  Plan first{0, std::move(*map), std::move(batch), {}, {}, {}};
  CutPlan(layout, payload_floats, shape.segment_chunks, &first);
  book.plans_.emplace(kFirstPlanVersion, std::move(first));
  return book;
}

absl::Status PlanBook::Add(uint32_t from, ChunkMap map, std::vector<uint32_t> batch) {
  const Plan& last = newest();
  if (map.version() <= last.map.version() || map.version() > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: version ", map.version(), " is not after ", last.map.version()));
  }
  if (from <= last.from) {
    return absl::InvalidArgumentError(absl::StrCat("plan ", map.version(), ": starts at iteration ",
                                                   from, ", not after ", last.from));
  }
  if (map.num_servers() != shape_.num_servers || map.num_chunks() != layout_.num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan ", map.version(), ": ", map.num_chunks(), " chunks on ", map.num_servers(),
        " servers, the job has ", layout_.num_chunks(), " on ", shape_.num_servers));
  }
  if (absl::Status s = shape_.CheckBatches(batch); !s.ok()) return s;
  const uint32_t v = static_cast<uint32_t>(map.version());
  Plan plan{from, std::move(map), std::move(batch), {}, {}, {}};
  CutPlan(layout_, payload_floats_, shape_.segment_chunks, &plan);
  plans_.emplace(v, std::move(plan));
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

std::vector<uint32_t> EncodePlan(uint32_t from, const ChunkMap& map,
                                 const std::vector<uint32_t>& batch) {
  std::vector<uint32_t> words;
  words.reserve(PlanWords(map.num_chunks(), uint32_t(batch.size())));
  words.push_back(static_cast<uint32_t>(map.version()));
  words.push_back(from);
  words.push_back(map.num_servers());
  words.push_back(map.num_chunks());
  words.push_back(static_cast<uint32_t>(batch.size()));
  words.insert(words.end(), map.owners().begin(), map.owners().end());
  words.insert(words.end(), batch.begin(), batch.end());
  return words;
}

absl::StatusOr<Plan> DecodePlan(const std::vector<uint32_t>& words, const ChunkLayout& layout,
                                const PlanShape& shape) {
  const uint64_t want = PlanWords(layout.num_chunks(), shape.num_workers);
  if (words.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan announcement: ", words.size(), " words, this job's have ", want));
  }
  if (words[0] < 2) return absl::InvalidArgumentError("plan announcement: version below 2");
  if (words[2] != shape.num_servers || words[3] != layout.num_chunks() ||
      words[4] != shape.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan announcement: ", words[3], " chunks on ", words[2], " servers for ",
                     words[4], " workers, this job has ", layout.num_chunks(), " on ",
                     shape.num_servers, " for ", shape.num_workers));
  }
  const auto owners = words.begin() + 5;
  const auto batches = owners + layout.num_chunks();
  absl::StatusOr<ChunkMap> map = ChunkMap::FromOwners(
      layout, shape.num_servers, std::vector<uint32_t>(owners, batches), words[0]);
  if (!map.ok()) return map.status();
  std::vector<uint32_t> batch(batches, words.end());
  if (absl::Status s = shape.CheckBatches(batch); !s.ok()) return s;
  return Plan{words[1], std::move(*map), std::move(batch), {}, {}, {}};
}

bool PlanReceiver::Open(uint32_t flow_id, uint32_t total_packets, uint32_t version,
                        uint32_t newest) {
  if (version <= newest) return false;
  if (total_packets != (words_max_ + payload_floats_ - 1) / payload_floats_) return false;
  open_ = true;
  flow_id_ = flow_id;
  words_.assign(words_max_, 0);
  return true;
}

bool PlanReceiver::Write(uint32_t flow_id, uint32_t word_offset, const uint8_t* payload,
                         uint32_t bytes) {
  if (!open_ || flow_id != flow_id_ || bytes % sizeof(uint32_t) != 0 ||
      uint64_t(word_offset) + bytes / sizeof(uint32_t) > words_.size()) {
    return false;
  }
  std::memcpy(words_.data() + word_offset, payload, bytes);
  return true;
}

bool PlanReceiver::Close(uint32_t flow_id, bool complete, uint32_t version,
                         const ChunkLayout& layout, const PlanShape& shape,
                         absl::StatusOr<Plan>* plan) {
  if (!open_ || flow_id != flow_id_) return false;
  open_ = false;
  if (!complete) {
    *plan = absl::DataLossError("plan announcement: incomplete");
    return true;
  }
  *plan = DecodePlan(words_, layout, shape);
  if (plan->ok() && (*plan)->map.version() != version) {
    *plan = absl::InvalidArgumentError(absl::StrCat(
        "plan announcement: version ", (*plan)->map.version(), " in packets of ", version));
  }
  return true;
}

}  // namespace ps
}  // namespace hetps
