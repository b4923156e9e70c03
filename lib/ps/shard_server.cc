#include "lib/ps/shard_server.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/clock.h"
#include "lib/base/json_writer.h"
#include "lib/base/status_macros.h"
#include "lib/ps/aggregate.h"

namespace hetps {
namespace ps {
namespace {

// Elements per tile of the fused optimizer step: the mean, the momentum
// and the parameters of one tile stay in L1/L2 between the sum, the update
// and the snapshot copy.
constexpr size_t kApplyTileFloats = 4096;

}  // namespace

using transport::Header;
using transport::PacketSpan;
using transport::Peer;

ShardServer::ShardServer(const ShardServerConfig& config, ChunkLayout layout, ChunkMap map)
    : config_(config), layout_(layout), map_(std::move(map)) {}

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Create(
    const ShardServerConfig& config, absl::Span<const float> initial_params,
    transport::Transport* shared) {
  if (initial_params.size() != config.num_params) {
    return absl::InvalidArgumentError(absl::StrCat("shard server: ", initial_params.size(),
                                                   " initial parameters for a model of ",
                                                   config.num_params));
  }
  if (config.server_index >= config.num_servers) {
    return absl::InvalidArgumentError("shard server: server_index >= num_servers");
  }
  train::OptimizerConfig optimizer = config.optimizer;
  if (optimizer.total_steps == 0) optimizer.total_steps = config.total_iterations;
  RETURN_IF_ERROR(train::ValidateOptimizerConfig(optimizer));
  ASSIGN_OR_RETURN(ChunkLayout layout, ChunkLayout::Create(config.num_params, config.chunk_floats));
  if (layout.chunk_floats() > config.endpoint.payload_floats() * 65536ull) {
    return absl::InvalidArgumentError("shard server: chunk_size too large for the packet size");
  }
  ASSIGN_OR_RETURN(ChunkMap map, ChunkMap::EvenSplit(layout, config.num_servers, 1));
  auto s = std::unique_ptr<ShardServer>(new ShardServer(config, layout, std::move(map)));
  s->owned_ = s->map_.ChunksOf(config.server_index);
  for (uint32_t c : s->owned_) {
    s->local_[c] = s->floats_;
    const Chunk ch = layout.chunk(c);
    s->params_.insert(s->params_.end(), initial_params.begin() + ch.offset,
                      initial_params.begin() + ch.offset + ch.floats);
    s->floats_ += ch.floats;
  }
  s->push_packets_ = PacketsForChunks(layout, s->owned_, config.endpoint.payload_floats());
  s->aggregate_.resize(std::min(s->floats_, kApplyTileFloats));
  s->optimizer_ = std::make_unique<train::OptimizerState>(optimizer, s->floats_);
  if (config.resume != nullptr) RETURN_IF_ERROR(s->Restore(*config.resume));
  if (shared != nullptr) {
    s->endpoint_ = shared;
    // This job's Early Close settings for the pushes it receives.
    RETURN_IF_ERROR(shared->SetEarlyClose(config.endpoint.early_close));
  } else {
    ASSIGN_OR_RETURN(s->own_endpoint_,
                     transport::CreateTransport(config.transport, config.endpoint, s.get()));
    s->endpoint_ = s->own_endpoint_.get();
  }
  return s;
}

ShardServer::~ShardServer() {
  Stop();
  if (own_endpoint_) {
    own_endpoint_->Shutdown();
    return;
  }
  // A shared endpoint outlives us: our broadcasts must not read freed
  // snapshots. Cancelled flows finish on the endpoint thread's next turn.
  for (auto& handles : in_flight_) {
    for (auto& h : handles) endpoint_->Cancel(h);
    for (auto& h : handles) h->Wait(absl::Seconds(5));
  }
}

void ShardServer::SetWorkers(const std::vector<Peer>& workers) {
  absl::MutexLock lock(&mu_);
  workers_ = workers;
  ++membership_epoch_;
  changed_.SignalAll();
}

void ShardServer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ShardServer::Stop() {
  stop_ = true;
  {
    absl::MutexLock lock(&mu_);
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

bool ShardServer::WaitFinished(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (!stats_.finished && !stop_) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return stats_.finished;
}

ShardServerStats ShardServer::GetStats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

std::vector<float> ShardServer::OwnedParams() const { return params_; }

std::vector<PacketSpan> ShardServer::OwnedPackets(const float* base) const {
  std::vector<PacketSpan> packets;
  const uint32_t pf = config_.endpoint.payload_floats();
  for (uint32_t c : owned_) {
    const Chunk ch = layout_.chunk(c);
    transport::AppendPackets(c, base + local_.at(c), ch.floats, pf, true, &packets);
  }
  return packets;
}

void ShardServer::ReleaseSnapshot(uint32_t iteration) {
  const int b = iteration % 2;
  for (auto& h : in_flight_[b]) endpoint_->Cancel(h);
  in_flight_[b].clear();
}

void ShardServer::Broadcast(uint32_t iteration) {
  const int b = iteration % 2;
  if (snapshot_for_ != int64_t(iteration)) {
    ReleaseSnapshot(iteration);
    broadcast_[b] = params_;
  }
  std::vector<Peer> workers;
  {
    absl::MutexLock lock(&mu_);
    workers = workers_;
  }
  if (owned_.empty()) return;
  for (const Peer& w : workers) {
    in_flight_[b].push_back(endpoint_->Send(w, iteration, OwnedPackets(broadcast_[b].data())));
  }
}

transport::DropReason ShardServer::AcceptFlow(const Peer& from, const Header& first) {
  absl::MutexLock lock(&mu_);
  // A push is exactly our chunks cut at the job's packet size: anything
  // else is refused before the endpoint sizes state from it.
  if (first.total_packets != push_packets_ ||
      first.payload_bytes > config_.endpoint.payload_floats() * sizeof(float)) {
    return transport::DropReason::kBadFlowSize;
  }
  auto slot = slots_.find(from);
  const bool ok = round_open_ && first.iteration == round_ && slot != slots_.end() &&
                  !slot->second.done && slot->second.have.empty();
  if (!ok) {
    ++stats_.stale_pushes;
    return transport::DropReason::kUnexpected;
  }
  return transport::DropReason::kNone;
}

void ShardServer::OnData(const Peer& from, const Header& h, const uint8_t* payload) {
  absl::MutexLock lock(&mu_);
  if (!round_open_ || h.iteration != round_) return;  // closed while in flight
  auto slot = slots_.find(from);
  auto local = local_.find(h.chunk_id);
  const uint32_t floats = h.payload_bytes / sizeof(float);
  if (slot == slots_.end() || local == local_.end() ||
      uint64_t(h.chunk_offset) + floats > layout_.chunk(h.chunk_id).floats) {
    ++stats_.bad_chunks;
    return;
  }
  const uint64_t at = local->second + h.chunk_offset;
  std::memcpy(slot->second.grad.data() + at, payload, h.payload_bytes);
  // Only a loss-tolerant push can end with holes: only its ranges are kept.
  if (h.flags & transport::kFlagLossTolerant) slot->second.have.push_back({at, at + floats});
}

void ShardServer::OnFlowDone(const Peer& from, const transport::FlowResult& result) {
  absl::MutexLock lock(&mu_);
  if (!round_open_ || result.iteration != round_) return;
  auto slot = slots_.find(from);
  if (slot == slots_.end()) return;
  slot->second.done = true;
  slot->second.partial = !result.complete();
  slot->second.result = result;
  changed_.SignalAll();
}

uint64_t ShardServer::ApplyStep(uint32_t t, const std::vector<const float*>& inputs,
                                const std::vector<std::vector<Range>>& missing, bool bubbles,
                                uint64_t* summed_us) {
  const RealClock* mono = RealClock::Get();
  const size_t n = inputs.size();
  uint64_t partial_elements = 0;
  if (bubbles) {
    aggregate_.resize(floats_);
    partial_elements = MeanUnbiased(inputs.data(), missing.data(), n, floats_, aggregate_.data());
  }
  if (config_.trace != nullptr) *summed_us = mono->MonotonicMicros();
  // The snapshot for round t + 1 is written as each tile is updated; its
  // buffer held round t - 1's, which every worker that pushed round t has.
  ReleaseSnapshot(t + 1);
  std::vector<float>& next = broadcast_[(t + 1) % 2];
  next.resize(floats_);
  optimizer_->BeginStep();
  std::vector<const float*> at(n);
  for (size_t off = 0; off < floats_; off += kApplyTileFloats) {
    const size_t len = std::min(kApplyTileFloats, floats_ - off);
    const float* mean = aggregate_.data() + off;
    if (!bubbles) {
      for (size_t k = 0; k < n; ++k) at[k] = inputs[k] + off;
      SumScaled(at.data(), n, len, 1.0f / float(n), aggregate_.data());
      mean = aggregate_.data();
    }
    optimizer_->Update(off, absl::MakeSpan(params_.data() + off, len),
                       absl::MakeConstSpan(mean, len));
    std::copy_n(params_.data() + off, len, next.data() + off);
  }
  snapshot_for_ = int64_t(t) + 1;
  return partial_elements;
}

absl::Status ShardServer::Restore(const storage::Checkpoint& c) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard server: checkpoint of round ", c.round, " does not fit: ", why));
  };
  if (c.server_index != config_.server_index) return bad("another server's");
  if (c.round > config_.total_iterations) return bad("past the job's last round");
  if (c.chunks.size() != owned_.size()) {
    return bad(absl::StrCat(c.chunks.size(), " chunks, this server owns ", owned_.size()));
  }
  const size_t slots = optimizer_->slot_count();
  for (const storage::ChunkState& ch : c.chunks) {
    auto local = local_.find(ch.chunk_id);
    if (local == local_.end()) return bad(absl::StrCat("chunk ", ch.chunk_id, " is not ours"));
    const Chunk want = layout_.chunk(ch.chunk_id);
    if (ch.offset != want.offset || ch.params.size() != want.floats || ch.slots.size() != slots) {
      return bad(absl::StrCat("chunk ", ch.chunk_id, " has another size or optimizer"));
    }
    std::copy(ch.params.begin(), ch.params.end(), params_.begin() + local->second);
    for (size_t k = 0; k < slots; ++k) {
      std::copy(ch.slots[k].begin(), ch.slots[k].end(),
                optimizer_->mutable_slot(k).begin() + local->second);
    }
  }
  optimizer_->set_steps(c.optimizer_steps);
  start_round_ = static_cast<uint32_t>(c.round);
  absl::MutexLock lock(&mu_);
  stats_.iteration = start_round_;
  return absl::OkStatus();
}

double ShardServer::MaybeCheckpoint(uint32_t t) {
  const uint32_t every = config_.checkpoint_every_rounds;
  storage::CheckpointWriter* writer = config_.checkpoints;
  if (writer == nullptr || every == 0 || (uint64_t(t) + 1) % every != 0 || !writer->Idle()) {
    return 0;
  }
  // A copy: the round thread goes on updating both in place. Into the
  // previous checkpoint's buffers when the writer hands them back.
  const auto start = std::chrono::steady_clock::now();
  storage::Checkpoint c = writer->TakeSpare();
  c.job_id = config_.job_id;
  c.server_index = config_.server_index;
  c.round = uint64_t(t) + 1;
  c.optimizer_steps = optimizer_->steps();
  c.spec = config_.spec_text;
  c.chunks.resize(owned_.size());
  for (size_t i = 0; i < owned_.size(); ++i) {
    const uint32_t id = owned_[i];
    const Chunk ch = layout_.chunk(id);
    const size_t at = local_.at(id);
    storage::ChunkState& s = c.chunks[i];
    s.chunk_id = id;
    s.offset = ch.offset;
    s.params.assign(params_.begin() + at, params_.begin() + at + ch.floats);
    s.slots.resize(optimizer_->slot_count());
    for (size_t k = 0; k < s.slots.size(); ++k) {
      const absl::Span<const float> slot = optimizer_->slot(k).subspan(at, ch.floats);
      s.slots[k].assign(slot.begin(), slot.end());
    }
  }
  if (!writer->Offer(std::move(c))) return 0;
  return std::max(
      1e-6,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
}

void ShardServer::Run() {
  using Clock = std::chrono::steady_clock;
  const RealClock* mono = RealClock::Get();  // the endpoint's clock: traces line up
  std::vector<transport::FlowResult> pushes;
  for (uint32_t t = start_round_; t < config_.total_iterations && !stop_; ++t) {
    const auto round_start = Clock::now();
    const uint64_t start_us = mono->MonotonicMicros();
    uint64_t epoch;
    {
      absl::MutexLock lock(&mu_);
      // Buffers for this round's live workers; reuse the allocations.
      absl::flat_hash_map<Peer, Slot> next;
      for (const Peer& w : workers_) {
        auto it = slots_.find(w);
        Slot s;
        if (it != slots_.end()) s.grad = std::move(it->second.grad);
        if (it != slots_.end()) s.have = std::move(it->second.have);
        s.grad.resize(floats_);
        s.done = false;
        s.partial = false;
        s.have.clear();
        next.emplace(w, std::move(s));
      }
      slots_ = std::move(next);
      round_ = t;
      round_open_ = true;
      epoch = membership_epoch_;
    }
    Broadcast(t);
    const uint64_t bcast_us = mono->MonotonicMicros();
    const absl::Time deadline = absl::Now() + config_.round_deadline;
    std::vector<const float*> inputs;
    std::vector<std::vector<Range>> missing;
    std::vector<std::pair<Peer, double>> delivered;
    uint64_t bubble_bytes = 0, partial_pushes = 0;
    bool by_deadline = false, by_membership = false;
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (stop_) break;
        // Workers that left are no longer waited for.
        if (membership_epoch_ != epoch) {
          std::vector<Peer> gone;
          for (auto& [peer, slot] : slots_) {
            if (std::find(workers_.begin(), workers_.end(), peer) == workers_.end()) {
              gone.push_back(peer);
            }
          }
          for (const Peer& p : gone) {
            if (!slots_[p].done) by_membership = true;
            slots_.erase(p);
          }
          epoch = membership_epoch_;
        }
        bool all = true;
        for (auto& [peer, slot] : slots_) all = all && slot.done;
        if (all) break;
        if (changed_.WaitWithDeadline(&mu_, deadline)) {
          by_deadline = true;
          break;
        }
      }
      round_open_ = false;
      pushes.clear();
      // Sum in worker rank order, so results never depend on hash order.
      for (const Peer& w : workers_) {
        auto it = slots_.find(w);
        if (config_.trace != nullptr) {
          pushes.push_back(it != slots_.end() ? it->second.result : transport::FlowResult());
        }
        if (it == slots_.end() || !it->second.done) continue;
        Slot& slot = it->second;
        inputs.push_back(slot.grad.data());
        missing.emplace_back();
        double fraction = 1;
        if (slot.partial) {
          // Bubble-filling: every element that never arrived becomes 0. Packets
          // carry whole floats, so no value is ever half-filled.
          missing.back() = MissingRanges(std::move(slot.have), floats_);
          uint64_t holes = 0;
          for (const Range& r : missing.back()) {
            std::fill(slot.grad.begin() + r.begin, slot.grad.begin() + r.end, 0.0f);
            holes += r.end - r.begin;
          }
          bubble_bytes += holes * sizeof(float);
          ++partial_pushes;
          fraction = floats_ > 0 ? 1.0 - double(holes) / double(floats_) : 1.0;
        }
        slot.have.clear();
        delivered.push_back({w, fraction});
      }
    }
    if (stop_) break;
    const uint64_t closed_us = mono->MonotonicMicros();
    const auto agg_start = Clock::now();
    uint64_t partial_elements = 0, summed_us = 0;
    if (!inputs.empty()) {
      partial_elements = ApplyStep(t, inputs, missing, partial_pushes > 0, &summed_us);
    }
    // A round no worker contributed to changed nothing: no checkpoint, so
    // that a server whose workers are stuck (another server is down) does
    // not push out, by keep_last, the rounds the others also hold.
    const double snapshot_ms = inputs.empty() ? 0 : MaybeCheckpoint(t);
    const auto agg_end = Clock::now();
    if (config_.trace != nullptr) {
      JsonWriter line;
      line.BeginObject();
      line.Key("ev").String("round");
      line.Key("node").String(config_.trace_node);
      line.Key("t").Uint(t);
      line.Key("start").Uint(start_us);
      line.Key("bcast").Uint(bcast_us);
      line.Key("pushes").BeginArray();  // per worker rank: first, last packet, close
      for (const transport::FlowResult& r : pushes) AppendJson(r, &line);
      line.EndArray();
      line.Key("closed").Uint(closed_us);
      line.Key("summed").Uint(summed_us);
      line.Key("applied").Uint(mono->MonotonicMicros());
      // This round's broadcasts: done, since every push of the round came
      // after its worker had them (unless it closed without that worker).
      line.Key("bcasts").BeginArray();
      for (auto& h : in_flight_[t % 2]) AppendJson(h->timing(), &line);
      line.EndArray();
      line.EndObject();
      config_.trace->Write(line.str());
    }
    absl::MutexLock lock(&mu_);
    stats_.iteration = t + 1;
    stats_.last_contributors = static_cast<uint32_t>(inputs.size());
    stats_.partial_pushes += partial_pushes;
    stats_.bubble_bytes += bubble_bytes;
    stats_.partial_elements += partial_elements;
    stats_.last_delivered = std::move(delivered);
    if (by_deadline) {
      ++stats_.rounds_by_deadline;
    } else if (by_membership) {
      ++stats_.rounds_by_membership;
    } else {
      ++stats_.rounds_complete;
    }
    if (snapshot_ms > 0) {
      ++stats_.checkpoints_offered;
      stats_.last_snapshot_ms = snapshot_ms;
    }
    stats_.last_aggregate_ms =
        std::chrono::duration<double, std::milli>(agg_end - agg_start).count();
    stats_.last_round_ms = std::chrono::duration<double, std::milli>(agg_end - round_start).count();
  }
  if (stop_) return;
  // Final parameters to everyone, then wait (bounded) for them to land.
  Broadcast(config_.total_iterations);
  for (auto& h : in_flight_[config_.total_iterations % 2]) h->Wait(config_.round_deadline);
  absl::MutexLock lock(&mu_);
  stats_.finished = true;
  changed_.SignalAll();
}

}  // namespace ps
}  // namespace hetps
