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
  const uint32_t pf = config.endpoint.payload_floats();
  PlanShape shape;
  shape.num_servers = config.num_servers;
  shape.num_workers = config.num_workers;
  shape.batch_size = config.batch_size;
  shape.batch_max =
      config.batch_max > 0 ? config.batch_max : config.num_workers * config.batch_size;
  shape.segment_chunks = config.segment_chunks;
  // A recovery resumes under the plan its checkpoint was trained under.
  std::optional<PlanBook::Start> start;
  const storage::Checkpoint* resume = config.resume;
  if (resume != nullptr && !resume->plan.empty()) {
    if (resume->plan.num_servers != config.num_servers) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard server: the checkpoint of round ", resume->round, " was trained on ",
                       resume->plan.num_servers, " servers, this job has ", config.num_servers));
    }
    start = PlanBook::Start{resume->plan.chunk_server, resume->plan.worker_batch};
  }
  ASSIGN_OR_RETURN(PlanBook book, PlanBook::Create(layout, shape, pf, start ? &*start : nullptr));
  ChunkMap map = book.For(0).map;
  auto s = std::unique_ptr<ShardServer>(new ShardServer(config, layout, std::move(map)));
  s->optimizer_config_ = optimizer;
  s->batch_ = book.For(0).batch;
  // Samples each worker drew before the first round: what it had drawn
  // when the checkpoint was taken (equal batches, before plans were kept).
  if (resume == nullptr) {
    s->samples_.assign(config.num_workers, 0);
  } else if (!resume->plan.empty()) {
    s->samples_ = resume->plan.worker_samples;
  } else {
    s->samples_.assign(config.num_workers, resume->round * config.batch_size);
  }
  s->owned_ = s->map_.ChunksOf(config.server_index);
  {
    absl::MutexLock lock(&s->mu_);
    s->push_packets_ = book.For(0).packets[config.server_index];
    s->book_ = std::make_unique<PlanBook>(std::move(book));
    s->announcements_in_ =
        std::make_unique<PlanReceiver>(layout.num_chunks(), config.num_workers, pf);
    for (uint32_t c : s->owned_) {
      s->local_[c] = s->floats_;
      const Chunk ch = layout.chunk(c);
      s->params_.insert(s->params_.end(), initial_params.begin() + ch.offset,
                        initial_params.begin() + ch.offset + ch.floats);
      s->floats_ += ch.floats;
    }
    s->CutSegments(s->book_->For(0));
    s->incoming_.resize(config.num_servers);
  }
  // A chunk moving between servers carries its parameters and every
  // optimizer slot: at most this many packets in one flow.
  const uint64_t stride = 1 + train::OptimizerState(optimizer, 0).slot_count();
  for (uint32_t c = 0; c < layout.num_chunks(); ++c) {
    s->migrate_packets_max_ += (stride * layout.chunk(c).floats + pf - 1) / pf;
  }
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
  for (auto* flows : {&moving_.flows, &moving_.flows_other, &early_.flows, &ahead_.flows}) {
    for (auto& h : *flows) endpoint_->Cancel(h);
    for (auto& h : *flows) h->Wait(absl::Seconds(5));
  }
}

void ShardServer::SetWorkers(const std::vector<Peer>& workers) {
  absl::MutexLock lock(&mu_);
  workers_ = workers;
  ++membership_epoch_;
  changed_.SignalAll();
}

void ShardServer::SetServers(const std::vector<Peer>& servers) {
  absl::MutexLock lock(&mu_);
  servers_ = servers;
  changed_.SignalAll();
}

absl::Status ShardServer::ProposePlan(const ChunkMap& map, std::vector<uint32_t> batch,
                                      uint32_t from) {
  if (config_.server_index != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("plans enter at server 0; this is server ", config_.server_index));
  }
  if (map.num_servers() != config_.num_servers || map.num_chunks() != layout_.num_chunks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan ", map.version(), ": ", map.num_chunks(), " chunks on ", map.num_servers(),
        " servers, the job has ", layout_.num_chunks(), " on ", config_.num_servers));
  }
  absl::MutexLock lock(&mu_);
  if (batch.empty()) batch = book_->shape().EvenBatches();
  if (absl::Status s = book_->shape().CheckBatches(batch); !s.ok()) return s;
  const uint64_t newest =
      std::max<uint64_t>(book_->newest().map.version(), proposal_ ? proposal_->map.version() : 0);
  if (map.version() <= newest || map.version() > UINT32_MAX) {
    ++stats_.plans_superseded;  // delivered late, after a newer one
    return absl::OkStatus();
  }
  proposal_ = Plan{from, map, std::move(batch), {}};
  changed_.SignalAll();  // the round thread announces it (AnnounceNow)
  return absl::OkStatus();
}

int ShardServer::ServerIndex(const Peer& p) const {
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i] == p) return static_cast<int>(i);
  }
  return -1;
}

std::optional<Plan> ShardServer::PlanDue(uint32_t t) {
  const Plan& p = book_->For(t);
  if (p.map.version() == plan_version_) return std::nullopt;
  return p;
}

bool ShardServer::AnnounceDue(uint32_t t) const {
  // One plan waits to start at a time: a proposal is announced once the
  // one before it is in force.
  return proposal_ && book_->newest().from <= t &&
         std::max(t + config_.plan_lead, proposal_->from) < config_.total_iterations;
}

bool ShardServer::AnnounceNow(uint32_t t) const {
  // At once, for t + plan_lead: waiting for t + 1's open would start the
  // plan a round later, and that round runs the old map on the network
  // that made schedd issue a new one (seconds on a slow link). A server
  // that closes t before the announcement reaches it opens t + 1 again
  // under the plan, which costs the part of its broadcast sent before.
  return config_.server_index == 0 && AnnounceDue(t);
}

void ShardServer::Announce(uint32_t t) {
  std::vector<Peer> peers;
  {
    absl::MutexLock lock(&mu_);
    if (AnnounceDue(t)) {
      const uint32_t from = std::max(t + config_.plan_lead, proposal_->from);
      if (absl::Status s = book_->Add(from, proposal_->map, proposal_->batch); !s.ok()) {
        ++stats_.plans_superseded;
      } else {
        const std::vector<uint32_t> words = EncodePlan(from, proposal_->map, proposal_->batch);
        Announcement& a = announcements_[uint32_t(proposal_->map.version())];
        a.words.resize(words.size());
        std::memcpy(a.words.data(), words.data(), words.size() * sizeof(uint32_t));
        changed_.SignalAll();  // AwaitStats: plan_next
      }
      proposal_.reset();
    }
    peers = workers_;
    for (size_t i = 1; i < servers_.size(); ++i) peers.push_back(servers_[i]);
  }
  // Versions no longer needed by anyone joining: those before the one in
  // force. Their flows are done or to a peer that is gone.
  const uint32_t in_force = [&] {
    absl::MutexLock lock(&mu_);
    return uint32_t(book_->For(t).map.version());
  }();
  while (!announcements_.empty() && announcements_.begin()->first < in_force) {
    for (auto& h : announcements_.begin()->second.flows) endpoint_->Cancel(h);
    for (auto& h : announcements_.begin()->second.flows) h->Wait(absl::Seconds(5));
    announcements_.erase(announcements_.begin());
  }
  const uint32_t pf = config_.endpoint.payload_floats();
  for (auto& [version, a] : announcements_) {
    for (const Peer& p : peers) {
      uint32_t& told = told_[p];
      if (told >= version) continue;
      told = version;
      std::vector<transport::PacketSpan> packets;
      transport::AppendPackets(kPlanChunk, a.words.data(), uint32_t(a.words.size()), pf, true,
                               &packets);
      transport::SendOptions options;
      options.plan = version;
      // The iteration field names the round the plan starts at.
      const uint32_t from = reinterpret_cast<const uint32_t*>(a.words.data())[1];
      a.flows.push_back(endpoint_->Send(p, from, std::move(packets), options));
    }
  }
}

ShardServer::Incoming* ShardServer::FindIncoming(uint32_t server, uint32_t flow_id) {
  for (Incoming& in : incoming_[server]) {
    if (std::find(in.flows.begin(), in.flows.end(), flow_id) != in.flows.end()) return &in;
  }
  return nullptr;
}

bool ShardServer::ChunksIn(uint32_t server, uint32_t plan, const std::vector<uint32_t>& chunks,
                           bool whole) const {
  if (chunks.empty()) return true;
  const uint64_t nslots = optimizer_->slot_count();
  for (const Incoming& in : incoming_[server]) {
    if (in.plan != plan) continue;
    for (uint32_t c : chunks) {
      auto it = in.chunks.find(c);
      const uint64_t floats = layout_.chunk(c).floats;
      if (it == in.chunks.end() || it->second.params < floats ||
          (whole && it->second.slots < nslots * floats)) {
        return false;
      }
    }
    return true;
  }
  return false;
}

bool ShardServer::Switch(uint32_t t, const Plan& next) {
  const uint32_t me = config_.server_index;
  const uint32_t v = static_cast<uint32_t>(next.map.version());
  const size_t nslots = optimizer_->slot_count();
  std::vector<Peer> servers;
  {
    // Chunks go to servers by address: wait for them (SetServers).
    absl::MutexLock lock(&mu_);
    while (servers_.size() != config_.num_servers && !stop_) changed_.Wait(&mu_);
    if (stop_) return false;
    servers = servers_;
  }
  FinishMoved();  // the switch before: its flows are long done
  // Out: what this server gives up, per new owner: the parameters now,
  // the optimizer slots once this round's parameters went out (SendState).
  // Parameters the round before sent already, as its segments were
  // applied (SendEarly), are not sent again.
  Moving m;
  m.plan = v;
  m.params.resize(config_.num_servers);
  m.state.resize(config_.num_servers);
  m.out.resize(config_.num_servers);
  m.in.resize(config_.num_servers);
  std::vector<std::vector<uint32_t>> late(config_.num_servers);
  if (early_.plan == v) {
    m.flows = std::move(early_.flows);
    m.early = std::move(early_.buffers);
  } else {
    for (auto& h : early_.flows) endpoint_->Cancel(h);  // of a plan not followed
    m.flows_other = std::move(early_.flows);
    m.early = std::move(early_.buffers);
    early_.sent.clear();
  }
  uint64_t sent = 0;
  for (uint32_t c : owned_) {
    const uint32_t to = next.map.owner(c);
    if (to == me) continue;
    const Chunk ch = layout_.chunk(c);
    const size_t at = local_.at(c);
    if (early_.sent.empty() || !early_.sent[c]) {
      m.params[to].insert(m.params[to].end(), params_.begin() + at,
                          params_.begin() + at + ch.floats);
      late[to].push_back(c);
    }
    for (size_t k = 0; k < nslots; ++k) {
      const absl::Span<const float> slot = optimizer_->slot(k).subspan(at, ch.floats);
      m.state[to].insert(m.state[to].end(), slot.begin(), slot.end());
    }
    m.out[to].push_back(c);
    ++sent;
  }
  early_ = Early();
  for (uint32_t to = 0; to < config_.num_servers; ++to) {
    if (!late[to].empty()) {
      m.flows.push_back(SendChunks(servers[to], t, v, late[to], m.params[to], 0));
    }
  }
  // In: the chunks this server takes over, from their previous owners.
  for (uint32_t c = 0; c < layout_.num_chunks(); ++c) {
    if (next.map.owner(c) == me && map_.owner(c) != me) {
      m.in[map_.owner(c)].push_back(c);
      m.installing = true;
    }
  }
  mu_.Lock();
  moving_ = std::move(m);
  auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (uint32_t from = 0; from < config_.num_servers; ++from) {
      if (!ChunksIn(from, v, moving_.in[from], false)) return false;
    }
    return true;
  };
  // No deadline: these chunks exist nowhere else. A server that died
  // holding them ends the job's epoch (recovery), which stops this one.
  // Meanwhile the segments whose chunks are all here go to the workers.
  while (!arrived() && !stop_) {
    if (StreamAhead(t, true) > 0) continue;
    changed_.Wait(&mu_);
  }
  if (stop_) {
    mu_.Unlock();
    return false;
  }
  // The new layout: chunks kept, then chunks taken over, in chunk order.
  // The state of those taken over comes later (InstallState).
  std::vector<uint32_t> owned = next.map.ChunksOf(me);
  absl::flat_hash_map<uint32_t, size_t> local;
  size_t floats = 0;
  for (uint32_t c : owned) {
    local[c] = floats;
    floats += layout_.chunk(c).floats;
  }
  std::vector<float> params(floats);
  auto optimizer = std::make_unique<train::OptimizerState>(optimizer_config_, floats);
  optimizer->set_steps(optimizer_->steps());
  for (uint32_t c : owned) {
    const Chunk ch = layout_.chunk(c);
    const size_t to = local[c];
    if (map_.owner(c) == me) {
      const size_t at = local_.at(c);
      std::copy_n(params_.begin() + at, ch.floats, params.begin() + to);
      for (size_t k = 0; k < nslots; ++k) {
        std::copy_n(optimizer_->slot(k).begin() + at, ch.floats,
                    optimizer->mutable_slot(k).begin() + to);
      }
      continue;
    }
    for (const Incoming& in : incoming_[map_.owner(c)]) {
      if (in.plan == v) std::copy_n(in.chunks.at(c).state.begin(), ch.floats, params.begin() + to);
    }
  }
  owned_ = std::move(owned);
  local_ = std::move(local);
  floats_ = floats;
  CutSegments(next);
  params_ = std::move(params);
  optimizer_ = std::move(optimizer);
  aggregate_.resize(std::min(floats_, kApplyTileFloats));
  snapshot_for_ = -1;  // ApplyStep's snapshot has the old layout
  map_ = next.map;
  batch_ = next.batch;
  plan_version_ = v;
  if (!moving_.installing) installed_plan_ = v;
  push_packets_ = next.packets[me];
  ++stats_.plan_switches;
  stats_.plan_version = v;
  stats_.plan_from = t;
  stats_.chunks_sent += sent;
  changed_.SignalAll();
  mu_.Unlock();
  return true;
}

void ShardServer::SendEarly(uint32_t t, const Plan& next, const std::vector<size_t>& ready) {
  const uint32_t me = config_.server_index;
  const uint32_t v = static_cast<uint32_t>(next.map.version());
  if (early_.plan != v) {
    for (auto& h : early_.flows) endpoint_->Cancel(h);  // of a plan superseded
    for (auto& h : early_.flows) h->Wait(absl::InfiniteDuration());
    early_ = Early();
    early_.plan = v;
    early_.sent.assign(layout_.num_chunks(), false);
  }
  std::vector<Peer> servers;
  {
    absl::MutexLock lock(&mu_);
    servers = servers_;
  }
  std::vector<std::vector<uint32_t>> chunks(config_.num_servers);
  for (size_t k : ready) {
    for (size_t i = segs_[k].first; i < segs_[k].first + segs_[k].count; ++i) {
      const uint32_t c = owned_[i];
      if (next.map.owner(c) != me && !early_.sent[c]) chunks[next.map.owner(c)].push_back(c);
    }
  }
  for (uint32_t to = 0; to < config_.num_servers; ++to) {
    if (chunks[to].empty()) continue;
    auto buf = std::make_unique<std::vector<float>>();
    for (uint32_t c : chunks[to]) {
      const size_t at = local_.at(c);
      buf->insert(buf->end(), params_.begin() + at, params_.begin() + at + layout_.chunk(c).floats);
    }
    for (uint32_t c : chunks[to]) early_.sent[c] = true;
    early_.flows.push_back(SendChunks(servers[to], t, v, chunks[to], *buf, 0));
    early_.buffers.push_back(std::move(buf));
    absl::MutexLock lock(&mu_);
    stats_.chunks_sent_early += chunks[to].size();
  }
}

void ShardServer::SendState(uint32_t t) {
  const size_t nslots = optimizer_->slot_count();
  if (nslots == 0) return;
  // After the parameters, which the new owners' broadcasts wait for: a
  // state flow beside them would halve their rate. No push of this round
  // can come before they are in (every worker waits for those owners).
  for (auto& h : moving_.flows) {
    while (!h->Wait(absl::Milliseconds(100))) {
      if (stop_) return;
    }
  }
  std::vector<Peer> servers;
  {
    absl::MutexLock lock(&mu_);
    servers = servers_;
  }
  for (uint32_t to = 0; to < moving_.out.size(); ++to) {
    if (moving_.out[to].empty()) continue;
    moving_.flows.push_back(SendChunks(servers[to], t, moving_.plan, moving_.out[to],
                                       moving_.state[to], uint32_t(nslots)));
  }
}

std::shared_ptr<transport::SendHandle> ShardServer::SendChunks(const Peer& to, uint32_t t,
                                                               uint32_t plan,
                                                               const std::vector<uint32_t>& chunks,
                                                               const std::vector<float>& data,
                                                               uint32_t slots) {
  const uint32_t pf = config_.endpoint.payload_floats();
  std::vector<transport::PacketSpan> packets;
  size_t off = 0;
  for (uint32_t c : chunks) {
    const uint32_t floats = layout_.chunk(c).floats;
    const uint32_t n = slots == 0 ? floats : slots * floats;
    const size_t first = packets.size();
    transport::AppendPackets(c, data.data() + off, n, pf, true, &packets);
    // The slots lie after the parameters in a chunk's [params | slots].
    if (slots > 0) {
      for (size_t i = first; i < packets.size(); ++i) packets[i].chunk_offset += floats;
    }
    off += n;
  }
  transport::SendOptions options;
  options.plan = plan;
  return endpoint_->Send(to, t, std::move(packets), options);
}

bool ShardServer::InstallState(bool wait) {
  if (!moving_.installing) return true;
  const size_t nslots = optimizer_->slot_count();
  const uint32_t v = moving_.plan;
  auto arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (uint32_t from = 0; from < config_.num_servers; ++from) {
      if (!ChunksIn(from, v, moving_.in[from], true)) return false;
    }
    return true;
  };
  while (!arrived()) {
    if (!wait || stop_) return false;
    changed_.Wait(&mu_);
  }
  uint64_t received = 0;
  for (uint32_t from = 0; from < config_.num_servers; ++from) {
    for (const Incoming& in : incoming_[from]) {
      if (in.plan != v) continue;
      for (uint32_t c : moving_.in[from]) {
        const Chunk ch = layout_.chunk(c);
        const size_t to = local_.at(c);
        const std::vector<float>& state = in.chunks.at(c).state;
        for (size_t k = 0; k < nslots; ++k) {
          std::copy_n(state.begin() + (k + 1) * ch.floats, ch.floats,
                      optimizer_->mutable_slot(k).begin() + to);
        }
        ++received;
      }
    }
  }
  for (std::vector<Incoming>& ins : incoming_) {
    ins.erase(
        std::remove_if(ins.begin(), ins.end(), [&](const Incoming& in) { return in.plan <= v; }),
        ins.end());
  }
  moving_.installing = false;
  installed_plan_ = v;
  stats_.chunks_received += received;
  changed_.SignalAll();
  return true;
}

void ShardServer::FinishMoved(std::vector<transport::FlowTiming>* timings) {
  // The copies sent must outlive their flows; receivers hold them early,
  // so this costs at most one path's delay.
  for (auto& h : moving_.flows) {
    while (!h->Wait(absl::Milliseconds(100))) {
      if (stop_) endpoint_->Cancel(h);
    }
  }
  if (timings != nullptr) {
    for (auto& h : moving_.flows) timings->push_back(h->timing());
  }
  for (auto& h : moving_.flows_other) h->Wait(absl::InfiniteDuration());  // cancelled
  moving_.flows.clear();
  moving_.flows_other.clear();
  moving_.early.clear();
  moving_.params.clear();
  moving_.state.clear();
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
  return StatsLocked();
}

bool ShardServer::AwaitStats(const std::function<bool(const ShardServerStats&)>& done,
                             absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (!done(StatsLocked())) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return done(StatsLocked());
  }
  return true;
}

ShardServerStats ShardServer::StatsLocked() const {
  ShardServerStats s = stats_;
  s.round_open = round_open_;
  const Plan& newest = book_->newest();
  if (newest.map.version() > plan_version_) {
    s.plan_next = uint32_t(newest.map.version());
    s.plan_next_from = newest.from;
  }
  return s;
}

std::vector<float> ShardServer::OwnedParams() const { return params_; }

std::vector<PacketSpan> ShardServer::SegmentPackets(const float* base, size_t k) const {
  static const float kZero = 0;
  if (owned_.empty()) return {PacketSpan{kEmptyChunk, 0, &kZero, 1, true}};
  std::vector<PacketSpan> packets;
  const uint32_t pf = config_.endpoint.payload_floats();
  const Segment& g = segs_[k];
  for (size_t i = g.first; i < g.first + g.count; ++i) {
    const uint32_t c = owned_[i];
    transport::AppendPackets(c, base + local_.at(c), layout_.chunk(c).floats, pf, true, &packets);
  }
  return packets;
}

void ShardServer::CutSegments(const Plan& plan) {
  seg_packets_ = plan.segment_packets[config_.server_index];
  chunk_seg_ = plan.chunk_segment;
  segs_.assign(seg_packets_.size(), Segment());
  for (size_t i = 0; i < owned_.size(); ++i) {
    Segment& g = segs_[chunk_seg_[owned_[i]]];
    const size_t lo = local_.at(owned_[i]);
    if (g.count == 0) {
      g.lo = lo;
      g.first = i;
    }
    g.hi = lo + layout_.chunk(owned_[i]).floats;
    ++g.count;
  }
}

void ShardServer::FillBubbles(Slot& slot) {
  if (slot.filled) return;
  slot.filled = true;
  // Bubble-filling: every element that never arrived becomes 0. Packets
  // carry whole floats, so no value is ever half-filled.
  slot.missing = MissingRanges(std::move(slot.have), floats_);
  slot.have.clear();
  slot.holes = 0;
  for (const Range& r : slot.missing) {
    std::fill(slot.grad.begin() + r.begin, slot.grad.begin() + r.end, 0.0f);
    slot.holes += r.end - r.begin;
  }
}

void ShardServer::ReleaseSnapshot(uint32_t iteration) {
  const int b = iteration % 2;
  for (auto& h : in_flight_[b]) endpoint_->Cancel(h);
  // A cancel takes effect on the endpoint's thread, which reads the
  // snapshot (or a copy sent ahead of a switch) until then: the buffer is
  // rewritten, grown after a switch, or freed only once the flows are
  // over. Two rounds on, every worker that stayed had them long ago, so
  // this rarely waits. Stopped meanwhile, the destructor waits for them.
  for (auto& h : in_flight_[b]) {
    while (!h->done()) {  // Wait is false for a cancelled flow, done or not
      h->Wait(absl::Milliseconds(100));
      if (stop_) return;
    }
  }
  ahead_kept_[b].clear();
  in_flight_[b].clear();
  in_flight_to_[b].clear();
}

void ShardServer::Broadcast(uint32_t iteration) {
  const int b = iteration % 2;
  if (snapshot_for_ != int64_t(iteration)) {
    ReleaseSnapshot(iteration);
    broadcast_[b] = params_;
  }
  std::vector<Peer> workers;
  uint32_t plan;
  {
    absl::MutexLock lock(&mu_);
    workers = workers_;
    plan = plan_version_;
  }
  if (!ahead_.flows.empty() || !ahead_.buffers.empty()) {
    if (ahead_.iteration == int64_t(iteration) && ahead_.plan == plan) {
      in_flight_[b].insert(in_flight_[b].end(), ahead_.flows.begin(), ahead_.flows.end());
      in_flight_to_[b].insert(in_flight_to_[b].end(), ahead_.to.begin(), ahead_.to.end());
      for (auto& buf : ahead_.buffers) ahead_kept_[b].push_back(std::move(buf));
    } else {
      for (auto& h : ahead_.flows) endpoint_->Cancel(h);  // of a round not opened so
      for (auto& h : ahead_.flows) h->Wait(absl::InfiniteDuration());
    }
    ahead_ = Ahead();
  }
  // Segments streamed during the round before (or ahead of its switch)
  // went to the workers of that moment under this plan: the others get
  // them now.
  const bool streamed = sent_.iteration == int64_t(iteration) && sent_.plan == plan;
  std::vector<Peer> fresh;
  for (const Peer& w : workers) {
    if (!streamed || std::find(sent_.to.begin(), sent_.to.end(), w) == sent_.to.end()) {
      fresh.push_back(w);
    }
  }
  for (size_t k = 0; k < segs_.size(); ++k) {
    SendSegment(iteration, k, streamed && sent_.segs[k] ? fresh : workers, plan);
  }
}

void ShardServer::SendSegment(uint32_t iteration, size_t k, const std::vector<Peer>& to,
                              uint32_t plan) {
  if (to.empty()) return;
  const int b = iteration % 2;
  transport::SendOptions options;
  options.plan = plan;
  const std::vector<PacketSpan> packets = SegmentPackets(broadcast_[b].data(), k);
  for (const Peer& w : to) {
    in_flight_[b].push_back(endpoint_->Send(w, iteration, packets, options));
    in_flight_to_[b].push_back({w, uint32_t(k)});
  }
}

transport::DropReason ShardServer::AcceptFlow(const Peer& from, const Header& first) {
  absl::MutexLock lock(&mu_);
  if (const int server = ServerIndex(from); server >= 0) {
    if (first.chunk_id == kPlanChunk) {
      // An announcement: from server 0 only, of a plan newer than all
      // this server knows, exactly one plan long.
      if (server != 0 || config_.server_index == 0) return transport::DropReason::kUnexpected;
      const uint32_t newest = uint32_t(book_->newest().map.version());
      if (first.plan <= newest) {
        ++stats_.stale_plan;
        return transport::DropReason::kUnexpected;
      }
      return announcements_in_->Open(first.flow_id, first.total_packets, first.plan, newest)
                 ? transport::DropReason::kNone
                 : transport::DropReason::kBadFlowSize;
    }
    // Chunks moving here under a plan whose chunks are not all in yet;
    // held until this server takes them (its announcement may still be
    // on the way). Per sender: two plans (the oldest goes for a newer
    // one), two flows each (parameters, then optimizer state).
    if (first.total_packets > migrate_packets_max_) return transport::DropReason::kBadFlowSize;
    std::vector<Incoming>& ins = incoming_[server];
    if (first.plan <= installed_plan_) {
      ++stats_.stale_plan;
      return transport::DropReason::kUnexpected;
    }
    auto in = std::find_if(ins.begin(), ins.end(),
                           [&](const Incoming& i) { return i.plan == first.plan; });
    if (in == ins.end()) {
      if (ins.size() >= kIncomingPlans) {
        in = std::min_element(ins.begin(), ins.end(),
                              [](const Incoming& a, const Incoming& b) { return a.plan < b.plan; });
        if (in->plan > first.plan) {
          ++stats_.stale_plan;
          return transport::DropReason::kUnexpected;
        }
        *in = Incoming();
      } else {
        in = ins.insert(ins.end(), Incoming());
      }
      in->plan = first.plan;
    }
    // A flow carries one chunk at least: parameters, state, or both.
    if (in->flows.size() > 2 * size_t(layout_.num_chunks())) {
      return transport::DropReason::kBadFlowSize;
    }
    if (book_->For(first.iteration).map.version() != first.plan) ++stats_.held_flows;
    in->flows.push_back(first.flow_id);
    return transport::DropReason::kNone;
  }
  // A push is of the plan this server follows (a worker pushes a round
  // only once this server sent it under that plan)...
  if (first.plan != plan_version_) {
    ++(first.plan < plan_version_ ? stats_.stale_plan : stats_.plan_ahead);
    changed_.SignalAll();  // AwaitStats
    return transport::DropReason::kUnexpected;
  }
  // ...and exactly our chunks cut at the job's packet size: anything
  // else is refused before the endpoint sizes state from it.
  if (first.total_packets != push_packets_ ||
      first.payload_bytes > config_.endpoint.payload_floats() * sizeof(float) ||
      (config_.batch_max > 0 && first.samples > config_.batch_max)) {
    return transport::DropReason::kBadFlowSize;
  }
  auto slot = slots_.find(from);
  const bool ok = round_open_ && first.iteration == round_ && slot != slots_.end() &&
                  !slot->second.done && slot->second.have.empty();
  if (!ok) {
    ++stats_.stale_pushes;
    return transport::DropReason::kUnexpected;
  }
  slot->second.samples = first.samples;
  return transport::DropReason::kNone;
}

void ShardServer::OnData(const Peer& from, const Header& h, const uint8_t* payload) {
  absl::MutexLock lock(&mu_);
  const uint32_t floats = h.payload_bytes / sizeof(float);
  if (const int server = ServerIndex(from); server >= 0) {
    if (h.chunk_id == kPlanChunk) {
      if (server != 0 ||
          !announcements_in_->Write(h.flow_id, h.chunk_offset, payload, h.payload_bytes)) {
        ++stats_.bad_chunks;
      }
      return;
    }
    Incoming* in = FindIncoming(uint32_t(server), h.flow_id);
    const uint64_t stride = 1 + optimizer_->slot_count();
    if (in == nullptr || in->plan != h.plan || h.chunk_id >= layout_.num_chunks() ||
        uint64_t(h.chunk_offset) + floats > stride * layout_.chunk(h.chunk_id).floats) {
      ++stats_.bad_chunks;
      return;
    }
    // Bounded: two plans per sender, each chunk at most its state's size.
    const uint64_t chunk_floats = layout_.chunk(h.chunk_id).floats;
    InChunk& c = in->chunks[h.chunk_id];
    c.state.resize(stride * chunk_floats);
    std::memcpy(c.state.data() + h.chunk_offset, payload, h.payload_bytes);
    const uint64_t lo = h.chunk_offset, hi = lo + floats;
    const uint64_t in_params = lo < chunk_floats ? std::min(hi, chunk_floats) - lo : 0;
    c.params += in_params;
    c.slots += floats - in_params;
    return;
  }
  if (!round_open_ || h.iteration != round_) return;      // closed while in flight
  if (h.chunk_id == kEmptyChunk && floats_ == 0) return;  // the push of a server with no chunks
  auto slot = slots_.find(from);
  auto local = local_.find(h.chunk_id);
  if (slot == slots_.end() || local == local_.end() ||
      uint64_t(h.chunk_offset) + floats > layout_.chunk(h.chunk_id).floats) {
    ++stats_.bad_chunks;
    return;
  }
  const uint64_t at = local->second + h.chunk_offset;
  std::memcpy(slot->second.grad.data() + at, payload, h.payload_bytes);
  // Every packet arrives once (the transport drops duplicates): a segment
  // is in when its count reaches the segment's packets.
  const uint32_t k = chunk_seg_[h.chunk_id];
  if (k < slot->second.got.size()) {
    ++slot->second.got[k];
    if (slot->second.got[k] == seg_packets_[k] && seg_packets_.size() > 1) changed_.SignalAll();
  }
  // Only a loss-tolerant push can end with holes: only its ranges are kept.
  if (h.flags & transport::kFlagLossTolerant) slot->second.have.push_back({at, at + floats});
}

void ShardServer::OnFlowDone(const Peer& from, const transport::FlowResult& result) {
  absl::MutexLock lock(&mu_);
  if (const int server = ServerIndex(from); server >= 0) {
    absl::StatusOr<Plan> plan;
    if (server == 0 && announcements_in_->Close(result.flow_id, result.complete(), result.plan,
                                                layout_, book_->shape(), &plan)) {
      if (!result.complete()) return;  // cancelled by server 0: nothing to add
      if (!plan.ok() ||
          !book_->Add(plan->from, std::move(plan->map), std::move(plan->batch)).ok()) {
        ++stats_.bad_chunks;  // a malformed announcement: refused whole
        return;
      }
      changed_.SignalAll();
      return;
    }
    // Its chunks' floats are counted as they came: wake the round thread.
    if (FindIncoming(uint32_t(server), result.flow_id) != nullptr) changed_.SignalAll();
    return;
  }
  if (!round_open_ || result.iteration != round_) return;
  auto slot = slots_.find(from);
  if (slot == slots_.end()) return;
  slot->second.done = true;
  slot->second.partial = !result.complete();
  slot->second.result = result;
  changed_.SignalAll();
}

uint64_t ShardServer::ApplyStep(uint32_t t, size_t lo, size_t hi,
                                const std::vector<const float*>& inputs,
                                const std::vector<std::vector<Range>>& missing,
                                const std::vector<float>& samples, bool bubbles) {
  const size_t n = inputs.size();
  const float* weights = samples.empty() ? nullptr : samples.data();
  double weight_sum = 0;
  for (float w : samples) weight_sum += w;
  std::vector<const float*> at(n);
  uint64_t partial_elements = 0;
  if (bubbles) {
    // The range's own holes, from its start.
    std::vector<std::vector<Range>> holes(n);
    for (size_t k = 0; k < n; ++k) {
      at[k] = inputs[k] + lo;
      for (const Range& r : missing[k]) {
        const size_t b = std::max<size_t>(r.begin, lo), e = std::min<size_t>(r.end, hi);
        if (b < e) holes[k].push_back({b - lo, e - lo});
      }
    }
    aggregate_.resize(std::max(aggregate_.size(), hi - lo));
    partial_elements =
        MeanUnbiased(at.data(), holes.data(), n, hi - lo, aggregate_.data(), weights);
  }
  if (!stepping_) {
    // The snapshot for round t + 1 is written as each tile is updated;
    // its buffer held round t - 1's, which every worker that pushed round
    // t has.
    ReleaseSnapshot(t + 1);
    broadcast_[(t + 1) % 2].resize(floats_);
    optimizer_->BeginStep();
    stepping_ = true;
  }
  std::vector<float>& next = broadcast_[(t + 1) % 2];
  if (aggregate_.size() < std::min(kApplyTileFloats, hi - lo)) {
    aggregate_.resize(std::min(kApplyTileFloats, hi - lo));
  }
  for (size_t off = lo; off < hi; off += kApplyTileFloats) {
    const size_t len = std::min(kApplyTileFloats, hi - off);
    const float* mean = aggregate_.data() + (off - lo);
    if (!bubbles) {
      for (size_t k = 0; k < n; ++k) at[k] = inputs[k] + off;
      if (weights == nullptr) {
        SumScaled(at.data(), n, len, 1.0f / float(n), aggregate_.data());
      } else {
        WeightedSum(at.data(), weights, n, len, float(1.0 / weight_sum), aggregate_.data());
      }
      mean = aggregate_.data();
    }
    optimizer_->Update(off, absl::MakeSpan(params_.data() + off, len),
                       absl::MakeConstSpan(mean, len));
    std::copy_n(params_.data() + off, len, next.data() + off);
  }
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
  c.plan.num_servers = config_.num_servers;
  c.plan.chunk_server = map_.owners();
  c.plan.worker_batch = batch_;
  c.plan.worker_samples = samples_;
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

size_t ShardServer::StreamReady(uint32_t t, uint64_t* partial_elements) {
  if (seg_packets_.size() < 2 || t + 1 > config_.total_iterations || slots_.empty()) return 0;
  // A round t + 1 under another plan goes out from that plan's owners
  // once they have the chunks that move (Switch): of the segments applied
  // now, only those chunks' parameters leave, to their new owners.
  const std::optional<Plan> next = PlanDue(t + 1);
  std::vector<size_t> ready;
  for (size_t k = 0; k < seg_packets_.size(); ++k) {
    if (applied_[k]) continue;
    bool in = true;
    for (const auto& [peer, slot] : slots_)
      in = in && (slot.done || slot.got[k] == seg_packets_[k]);
    if (in) ready.push_back(k);
  }
  if (ready.empty()) return 0;
  // The state of the chunks taken over at this round's switch first.
  if (!InstallState(false)) return 0;
  // Every live worker's input, in rank order as at the round's close; a
  // push that ended with holes counts with them.
  std::vector<const float*> inputs;
  std::vector<std::vector<Range>> missing;
  std::vector<float> samples;
  bool said = true, bubbles = false;
  std::vector<Peer> to;
  for (const Peer& w : workers_) {
    auto it = slots_.find(w);
    if (it == slots_.end()) continue;
    Slot& slot = it->second;
    to.push_back(w);
    inputs.push_back(slot.grad.data());
    samples.push_back(float(slot.samples));
    said = said && slot.samples > 0;
    missing.emplace_back();
    if (slot.done && slot.partial) {
      FillBubbles(slot);
      missing.back() = slot.missing;
      bubbles = true;
    }
  }
  if (!said || !Unequal(samples.data(), samples.size())) samples.clear();
  const uint32_t plan = plan_version_;
  const bool servers_known = servers_.size() == config_.num_servers;
  mu_.Unlock();
  for (size_t k : ready) {
    *partial_elements += ApplyStep(t, segs_[k].lo, segs_[k].hi, inputs, missing, samples, bubbles);
  }
  if (next) {
    for (size_t k : ready) applied_[k] = true;
    if (servers_known) SendEarly(t + 1, *next, ready);
    mu_.Lock();
    return ready.size();
  }
  if (sent_.iteration != int64_t(t) + 1 || sent_.plan != plan) {
    sent_ = Sent{int64_t(t) + 1, plan, std::vector<bool>(segs_.size(), false), to};
  }
  sent_.KeepOnly(to);
  for (size_t k : ready) applied_[k] = true;
  {
    // Counted before they go: a worker that has one sees it counted.
    absl::MutexLock lock(&mu_);
    stats_.segments_streamed += ready.size();
    changed_.SignalAll();  // AwaitStats
  }
  for (size_t k : ready) {
    SendSegment(t + 1, k, to, plan);
    sent_.segs[k] = true;
  }
  mu_.Lock();
  return ready.size();
}

size_t ShardServer::StreamAhead(uint32_t t, bool closed) {
  if (t >= config_.total_iterations || servers_.size() != config_.num_servers) return 0;
  const Plan& next = book_->For(t);
  const uint32_t v = static_cast<uint32_t>(next.map.version());
  if (v == plan_version_) return 0;
  const uint32_t me = config_.server_index;
  const std::vector<uint32_t> owned = next.map.ChunksOf(me);
  if (owned.empty()) return 0;  // its round is one empty packet
  if (sent_.iteration != int64_t(t) || sent_.plan != v) {
    sent_ =
        Sent{int64_t(t), v, std::vector<bool>(next.segment_packets[me].size(), false), workers_};
    ahead_.iteration = t;
    ahead_.plan = v;
  }
  // The segments whose every chunk is here, each with its chunks (owned
  // is ascending: a segment's chunks are consecutive in it).
  std::vector<std::pair<size_t, std::vector<uint32_t>>> ready;
  for (size_t i = 0; i < owned.size();) {
    const uint32_t k = next.chunk_segment[owned[i]];
    size_t e = i;
    bool in = !sent_.segs[k];
    for (; e < owned.size() && next.chunk_segment[owned[e]] == k; ++e) {
      const uint32_t c = owned[e];
      const uint32_t from = map_.owner(c);
      in = in && (from == me ? closed || applied_[chunk_seg_[c]]
                             : ChunksIn(from, v, {c}, /*whole=*/false));
    }
    if (in) ready.emplace_back(k, std::vector<uint32_t>(owned.begin() + i, owned.begin() + e));
    i = e;
  }
  if (ready.empty()) return 0;
  // Copied under mu_ (the chunks taken over sit in incoming_), in the
  // order the new layout will have them; the packets point into the copy.
  const uint32_t pf = config_.endpoint.payload_floats();
  std::vector<std::vector<PacketSpan>> packets(ready.size());
  for (size_t r = 0; r < ready.size(); ++r) {
    size_t floats = 0;
    for (uint32_t c : ready[r].second) floats += layout_.chunk(c).floats;
    auto buf = std::make_unique<std::vector<float>>(floats);
    size_t at = 0;
    for (uint32_t c : ready[r].second) {
      const uint32_t n = layout_.chunk(c).floats;
      const uint32_t from = map_.owner(c);
      const float* src = nullptr;
      if (from == me) {
        src = params_.data() + local_.at(c);
      } else {
        for (const Incoming& in : incoming_[from]) {
          if (in.plan == v) src = in.chunks.at(c).state.data();
        }
      }
      std::copy_n(src, n, buf->data() + at);
      transport::AppendPackets(c, buf->data() + at, n, pf, true, &packets[r]);
      at += n;
    }
    ahead_.buffers.push_back(std::move(buf));
    sent_.segs[ready[r].first] = true;
  }
  const std::vector<Peer> to = workers_;
  sent_.KeepOnly(to);
  stats_.segments_ahead += ready.size();  // counted before they go, as StreamReady's
  changed_.SignalAll();                   // AwaitStats
  mu_.Unlock();
  transport::SendOptions options;
  options.plan = v;
  for (size_t r = 0; r < ready.size(); ++r) {
    for (const Peer& w : to) {
      ahead_.flows.push_back(endpoint_->Send(w, t, packets[r], options));
      ahead_.to.push_back({w, uint32_t(ready[r].first)});
    }
  }
  mu_.Lock();
  return ready.size();
}

void ShardServer::Run() {
  using Clock = std::chrono::steady_clock;
  const RealClock* mono = RealClock::Get();  // the endpoint's clock: traces line up
  std::vector<transport::FlowResult> pushes;
  std::vector<Peer> ranks;  // workers_ at the close, for the trace
  for (uint32_t t = start_round_; t < config_.total_iterations && !stop_; ++t) {
    const auto round_start = Clock::now();
    const uint64_t start_us = mono->MonotonicMicros();
    uint64_t epoch = 0;
    stepping_ = false;
    uint64_t stream_partial = 0;
    // Opens round t under the plan that holds for it: switches first when
    // that plan is new here, then broadcasts. False when stopped.
    auto open = [&]() -> bool {
      std::optional<Plan> due;
      {
        absl::MutexLock lock(&mu_);
        due = PlanDue(t);
      }
      if (due && !Switch(t, *due)) return false;
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
          s.got.assign(seg_packets_.size(), 0);
          next.emplace(w, std::move(s));
        }
        slots_ = std::move(next);
        applied_.assign(seg_packets_.size(), false);
        round_ = t;
        round_open_ = true;
        epoch = membership_epoch_;
        changed_.SignalAll();  // AwaitStats
      }
      Broadcast(t);
      // The state of the chunks given up: after the parameters, which
      // every worker waits for.
      if (due) SendState(t);
      return true;
    };
    if (config_.server_index == 0) Announce(t);
    if (!open()) break;
    const uint64_t bcast_us = mono->MonotonicMicros();
    absl::Time deadline = absl::Now() + config_.round_deadline;
    std::vector<const float*> inputs;
    std::vector<std::vector<Range>> missing;
    std::vector<float> samples;  // per input; cleared when one does not say
    bool samples_said = true;
    std::vector<std::pair<Peer, double>> delivered;
    uint64_t bubble_bytes = 0, partial_pushes = 0;
    bool by_deadline = false, by_membership = false;
    {
      mu_.Lock();
      for (;;) {
        if (stop_) break;
        // The plan for this round reached this server only after it opened
        // the round: open it again under that plan. No worker pushed yet:
        // workers push a round once every server sent it under the plan
        // server 0 sent it under.
        if (PlanDue(t)) {
          round_open_ = false;
          ++stats_.rounds_reopened;
          mu_.Unlock();
          const bool reopened = open();
          mu_.Lock();
          if (!reopened) break;
          deadline = absl::Now() + config_.round_deadline;
          continue;
        }
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
        if (AnnounceNow(t)) {
          mu_.Unlock();
          Announce(t);
          mu_.Lock();
          continue;
        }
        bool all = true;
        for (auto& [peer, slot] : slots_) all = all && slot.done;
        if (all) break;
        if (StreamReady(t, &stream_partial) > 0) continue;
        if (StreamAhead(t + 1, false) > 0) continue;
        if (changed_.WaitWithDeadline(&mu_, deadline)) {
          by_deadline = true;
          break;
        }
      }
      round_open_ = false;
      // The step needs the state of the chunks taken over at this round's
      // switch, however the round closed.
      if (!InstallState(true)) {
        mu_.Unlock();
        break;
      }
      pushes.clear();
      if (config_.trace != nullptr) ranks = workers_;
      // Sum in worker rank order, so results never depend on hash order.
      for (const Peer& w : workers_) {
        auto it = slots_.find(w);
        if (config_.trace != nullptr) {
          pushes.push_back(it != slots_.end() ? it->second.result : transport::FlowResult());
        }
        if (it == slots_.end() || !it->second.done) continue;
        Slot& slot = it->second;
        inputs.push_back(slot.grad.data());
        samples.push_back(float(slot.result.samples));
        samples_said = samples_said && slot.result.samples > 0;
        missing.emplace_back();
        double fraction = 1;
        if (slot.partial) {
          FillBubbles(slot);
          missing.back() = slot.missing;
          bubble_bytes += slot.holes * sizeof(float);
          ++partial_pushes;
          fraction = floats_ > 0 ? 1.0 - double(slot.holes) / double(floats_) : 1.0;
        }
        slot.have.clear();
        delivered.push_back({w, fraction});
      }
      mu_.Unlock();
    }
    if (stop_) break;
    const uint64_t closed_us = mono->MonotonicMicros();
    const auto agg_start = Clock::now();
    uint64_t partial_elements = stream_partial;
    const uint64_t summed_us = mono->MonotonicMicros();
    if (!samples_said || !Unequal(samples.data(), samples.size())) samples.clear();
    // The segments not streamed: one range when none was.
    for (size_t k = 0; k < segs_.size();) {
      size_t e = k;
      while (e < segs_.size() && !applied_[e]) ++e;
      if (e == k) {
        ++k;
        continue;
      }
      const size_t lo = segs_[k].lo, hi = segs_[e - 1].hi;
      if (!inputs.empty()) {
        partial_elements += ApplyStep(t, lo, hi, inputs, missing, samples, partial_pushes > 0);
      } else if (stepping_) {
        // Streamed segments stepped, nobody completed these: unchanged.
        std::copy(params_.begin() + lo, params_.begin() + hi, broadcast_[(t + 1) % 2].begin() + lo);
      }
      k = e;
    }
    if (stepping_) snapshot_for_ = int64_t(t) + 1;
    // A round no worker contributed to changed nothing: no checkpoint, so
    // that a server whose workers are stuck (another server is down) does
    // not push out, by keep_last, the rounds the others also hold.
    for (size_t k = 0; k < samples_.size() && k < batch_.size(); ++k) samples_[k] += batch_[k];
    const double snapshot_ms = inputs.empty() ? 0 : MaybeCheckpoint(t);
    std::vector<transport::FlowTiming> moves;
    FinishMoved(config_.trace != nullptr ? &moves : nullptr);
    const auto agg_end = Clock::now();
    if (config_.trace != nullptr) {
      JsonWriter line;
      line.BeginObject();
      line.Key("ev").String("round");
      line.Key("node").String(config_.trace_node);
      line.Key("t").Uint(t);
      line.Key("plan").Uint(map_.version());
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
      for (size_t i = 0; i < in_flight_[t % 2].size(); ++i) {
        const BcastTo& to = in_flight_to_[t % 2][i];
        line.BeginObject();
        const auto rank = std::find(ranks.begin(), ranks.end(), to.peer);
        line.Key("worker").Int(rank != ranks.end() ? rank - ranks.begin() : -1);
        line.Key("seg").Uint(to.seg);
        line.Key("timing");
        AppendJson(in_flight_[t % 2][i]->timing(), &line);
        line.EndObject();
      }
      line.EndArray();
      // A switch at this round: the chunks it gave up (parameters, then
      // state), done (FinishMoved).
      if (!moves.empty()) {
        line.Key("moves").BeginArray();
        for (const transport::FlowTiming& m : moves) AppendJson(m, &line);
        line.EndArray();
      }
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
    const double round_s = stats_.last_round_ms / 1e3;
    ++stats_.round_buckets[std::lower_bound(kRoundSecondsBounds.begin(), kRoundSecondsBounds.end(),
                                            round_s) -
                           kRoundSecondsBounds.begin()];
    stats_.round_seconds_sum += round_s;
    changed_.SignalAll();  // AwaitStats
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
