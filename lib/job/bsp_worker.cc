#include "lib/job/bsp_worker.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lib/base/clock.h"
#include "lib/base/json_writer.h"
#include "lib/base/status_macros.h"

namespace hetps {

using transport::Header;
using transport::Peer;

BspWorker::BspWorker(const BspWorkerConfig& config) : config_(config) {}

absl::StatusOr<std::unique_ptr<BspWorker>> BspWorker::Create(const BspWorkerConfig& config,
                                                             train::Backend* backend,
                                                             transport::Transport* shared) {
  if (config.workers == 0 || config.rank >= config.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker rank ", config.rank, " of ", config.workers, " workers"));
  }
  auto w = std::unique_ptr<BspWorker>(new BspWorker(config));
  ASSIGN_OR_RETURN(w->train_, LoadFashionMnist(config.job.dataset, true));
  if (config.evaluate) {
    ASSIGN_OR_RETURN(w->test_, LoadFashionMnist(config.job.dataset, false));
  }
  ASSIGN_OR_RETURN(train::ModelSpec spec, train::BuiltinModel(config.job.model));
  // Sized for the largest batch a plan may give this worker (WLBS).
  w->shape_.num_workers = config.workers;
  w->shape_.batch_size = static_cast<uint32_t>(config.job.batch_size);
  w->shape_.batch_max = static_cast<uint32_t>(config.job.BatchMax(config.workers));
  w->shape_.segment_chunks = config.job.SegmentChunks();
  ASSIGN_OR_RETURN(w->model_,
                   train::Model::Create(spec, backend, static_cast<int>(w->shape_.batch_max)));
  w->sampler_ =
      std::make_unique<ShardSampler>(w->train_.size(), config.rank, config.workers, config.job.seed,
                                     static_cast<uint32_t>(config.job.batch_size));
  ASSIGN_OR_RETURN(ps::ChunkLayout layout,
                   ps::ChunkLayout::Create(w->model_->num_params(),
                                           static_cast<uint32_t>(config.job.chunk_size)));
  w->layout_ = std::make_unique<ps::ChunkLayout>(layout);
  if (!config.start_plan.chunk_server.empty()) {
    if (config.start_plan.chunk_server.size() != layout.num_chunks()) {
      return absl::InvalidArgumentError(absl::StrCat("worker: the plan to resume under has ",
                                                     config.start_plan.chunk_server.size(),
                                                     " chunks, the model ", layout.num_chunks()));
    }
    RETURN_IF_ERROR(w->shape_.CheckBatches(config.start_plan.batch));
  }
  std::vector<uint32_t> every(layout.num_chunks());
  std::iota(every.begin(), every.end(), 0u);
  w->pull_packets_max_ = ps::PacketsForChunks(layout, every, config.endpoint.payload_floats());
  w->total_ = config.job.TotalIterations(w->train_.size(), config.workers);
  w->params_ = w->model_->InitialParameters(config.job.seed);
  w->grad_.resize(w->params_.size());
  {
    absl::MutexLock lock(&w->mu_);
    w->incoming_ = w->params_;
    // Every round copies params_ up and grad_ down; the pull's swap makes
    // incoming_ the next params_. None of the three is resized again.
    for (std::vector<float>* v : {&w->params_, &w->incoming_, &w->grad_}) {
      w->pins_.emplace_back(backend, v->data(), v->size() * sizeof(float));
    }
  }
  w->SetServers(config.servers);
  if (shared != nullptr) {
    w->endpoint_ = shared;
  } else {
    transport::EndpointConfig ec = config.endpoint;
    if (ec.tcp_congestion.empty()) ec.tcp_congestion = config.job.tcp_congestion_name();
    ASSIGN_OR_RETURN(
        w->own_endpoint_,
        transport::CreateTransport(transport::TransportKindFor(config.job.transport), ec, w.get()));
    w->endpoint_ = w->own_endpoint_.get();
  }
  return w;
}

BspWorker::~BspWorker() {
  Stop();
  if (own_endpoint_) own_endpoint_->Shutdown();
}

void BspWorker::Stop() {
  stop_ = true;
  std::vector<std::shared_ptr<transport::SendHandle>> pushes;
  {
    absl::MutexLock lock(&mu_);
    arrived_.SignalAll();
    pushes = in_flight_;
  }
  for (auto& h : pushes) endpoint_->Cancel(h);
}

void BspWorker::SetServers(const std::vector<Peer>& servers) {
  absl::MutexLock lock(&mu_);
  servers_ = servers;
  complete_.assign(servers.size(), start_ - 1);
  receiving_.assign(servers.size(), start_ - 1);
  complete_plan_.assign(servers.size(), 1);
  pulls_.assign(servers.size(), Pull());
  flow_chunk_.clear();
  pulled_.assign(servers.size(), transport::FlowResult());
  if (!servers.empty() && (book_ == nullptr || book_->num_servers() != servers.size())) {
    ps::PlanShape shape = shape_;
    shape.num_servers = static_cast<uint32_t>(servers.size());
    const bool resumed = !config_.start_plan.chunk_server.empty();
    auto book = ps::PlanBook::Create(*layout_, shape, config_.endpoint.payload_floats(),
                                     resumed ? &config_.start_plan : nullptr);
    book_ = book.ok() ? std::make_unique<ps::PlanBook>(std::move(*book)) : nullptr;
    book_error_ = book.status();
    announcements_in_ = std::make_unique<ps::PlanReceiver>(layout_->num_chunks(), shape.num_workers,
                                                           config_.endpoint.payload_floats());
  }
  arrived_.SignalAll();
}

std::pair<int64_t, double> BspWorker::ComputeDone() const {
  absl::MutexLock lock(&live_mu_);
  return compute_done_;
}

WorkerPlanStats BspWorker::plan_stats() const {
  absl::MutexLock lock(&mu_);
  WorkerPlanStats s = plan_stats_;
  s.bad_packets = int64_t(bad_packets_);
  return s;
}

void BspWorker::ResumeAt(int64_t iteration) {
  absl::MutexLock lock(&mu_);
  start_ = std::clamp<int64_t>(iteration, 0, total_);
  // A resumed server's first parameters may have arrived already.
  for (int64_t& c : complete_) c = std::max(c, start_ - 1);
  for (int64_t& r : receiving_) r = std::max(r, start_ - 1);
  arrived_.SignalAll();
}

int BspWorker::ServerIndex(const Peer& p) const {
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i] == p) return static_cast<int>(i);
  }
  return -1;
}

transport::DropReason BspWorker::AcceptFlow(const Peer& from, const Header& first) {
  absl::MutexLock lock(&mu_);
  const int s = ServerIndex(from);
  if (s < 0 || book_ == nullptr) return transport::DropReason::kUnexpected;
  const uint32_t pf = config_.endpoint.payload_floats();
  if (first.payload_bytes > pf * sizeof(float)) return transport::DropReason::kBadFlowSize;
  if (first.chunk_id == ps::kPlanChunk) {
    // An announcement: from server 0, of a plan newer than all known here.
    if (s != 0) return transport::DropReason::kUnexpected;
    const uint32_t newest = uint32_t(book_->newest().map.version());
    if (first.plan <= newest) return transport::DropReason::kUnexpected;
    return announcements_in_->Open(first.flow_id, first.total_packets, first.plan, newest)
               ? transport::DropReason::kNone
               : transport::DropReason::kBadFlowSize;
  }
  // Parameters come for iterations up to total_ (the final ones), newer
  // than the server's last complete flow: a later round, or the same one
  // sent again under a newer plan.
  const int64_t it = first.iteration;
  if (it > total_ || it < complete_[s] || (it == complete_[s] && first.plan <= complete_plan_[s])) {
    return transport::DropReason::kUnexpected;
  }
  const ps::Plan* plan = book_->Get(first.plan);
  if (first.plan < book_->For(uint32_t(it)).map.version() || (plan != nullptr && plan->from > it)) {
    ++plan_stats_.stale_plan;
    return transport::DropReason::kUnexpected;
  }
  // A server sends each segment of its chunks under the plan as one flow,
  // cut at the job's packet size; under a plan not announced here yet, at
  // most every chunk.
  if (plan != nullptr) {
    if (first.chunk_id == ps::kEmptyChunk
            ? first.total_packets != 1 || !plan->map.ChunksOf(uint32_t(s)).empty()
            : first.chunk_id >= layout_->num_chunks() ||
                  plan->map.owner(first.chunk_id) != uint32_t(s) ||
                  first.total_packets !=
                      plan->segment_packets[s][plan->chunk_segment[first.chunk_id]]) {
      return transport::DropReason::kBadFlowSize;
    }
  } else if (first.total_packets > pull_packets_max_) {
    return transport::DropReason::kBadFlowSize;
  }
  // Bounded: flows leave it when they end; more open at once than a round
  // of every server's every chunk is no server's doing.
  if (flow_chunk_.size() >= 2 * size_t(layout_->num_chunks()) + 2 * servers_.size()) {
    return transport::DropReason::kBadFlowSize;
  }
  if (plan == nullptr) ++plan_stats_.held_flows;
  receiving_[s] = std::max(receiving_[s], it);
  flow_chunk_[{s, first.flow_id}] = first.chunk_id;
  return transport::DropReason::kNone;
}

void BspWorker::OnData(const Peer& from, const Header& h, const uint8_t* payload) {
  absl::MutexLock lock(&mu_);
  const int s = ServerIndex(from);
  const uint32_t floats = h.payload_bytes / sizeof(float);
  if (s >= 0 && h.chunk_id == ps::kPlanChunk) {
    if (s != 0 || announcements_in_ == nullptr ||
        !announcements_in_->Write(h.flow_id, h.chunk_offset, payload, h.payload_bytes)) {
      ++bad_packets_;
    }
    return;
  }
  if (s >= 0 && h.chunk_id == ps::kEmptyChunk) return;  // a server that owns no chunks
  // The values of a round are the same whichever server sends them, so a
  // chunk is written as it comes; which plan it came under only decides
  // when the round is whole (Run).
  const ps::Plan* plan = book_ != nullptr ? book_->Get(h.plan) : nullptr;
  if (s < 0 || book_ == nullptr || h.chunk_id >= layout_->num_chunks() ||
      (plan != nullptr && plan->map.owner(h.chunk_id) != uint32_t(s)) ||
      uint64_t(h.chunk_offset) + floats > layout_->chunk(h.chunk_id).floats) {
    ++bad_packets_;
    return;
  }
  std::memcpy(incoming_.data() + layout_->chunk(h.chunk_id).offset + h.chunk_offset, payload,
              h.payload_bytes);
}

void BspWorker::OnFlowDone(const Peer& from, const transport::FlowResult& result) {
  const uint32_t iteration = result.iteration;
  absl::MutexLock lock(&mu_);
  const int s = ServerIndex(from);
  if (s < 0 || book_ == nullptr) return;
  absl::StatusOr<ps::Plan> plan;
  if (s == 0 && announcements_in_->Close(result.flow_id, result.complete(), result.plan, *layout_,
                                         book_->shape(), &plan)) {
    if (!plan.ok() || !book_->Add(plan->from, std::move(plan->map), std::move(plan->batch)).ok()) {
      ++bad_packets_;  // a malformed announcement: refused whole
      return;
    }
    // Segments held for this plan may make a round whole now.
    for (size_t k = 0; k < pulls_.size(); ++k) TryComplete(int(k));
    arrived_.SignalAll();
    return;
  }
  auto f = flow_chunk_.find({s, result.flow_id});
  if (f == flow_chunk_.end()) return;
  const uint32_t chunk = f->second;
  flow_chunk_.erase(f);
  if (!result.complete()) return;
  Pull& p = pulls_[s];
  if (int64_t(iteration) > p.iteration ||
      (int64_t(iteration) == p.iteration && result.plan > p.plan)) {
    p = Pull{int64_t(iteration), result.plan, {}, {}};
  } else if (int64_t(iteration) != p.iteration || result.plan != p.plan) {
    return;  // a segment of a round or plan already superseded
  }
  p.chunks.push_back(chunk);
  p.result = result;
  TryComplete(s);
}

void BspWorker::TryComplete(int s) {
  Pull& p = pulls_[s];
  const ps::Plan* plan = book_->Get(p.plan);
  if (p.chunks.empty() || plan == nullptr) return;  // its announcement is still coming
  if (p.iteration < complete_[s] || (p.iteration == complete_[s] && p.plan <= complete_plan_[s])) {
    return;
  }
  const std::vector<uint64_t>& segs = plan->segment_packets[s];
  std::vector<bool> in(segs.size(), false);
  size_t n = 0;
  for (uint32_t c : p.chunks) {
    // A server with no chunks sends one kEmptyChunk packet: its segment 0.
    const uint32_t k = c == ps::kEmptyChunk ? 0 : plan->chunk_segment[c];
    if (c == ps::kEmptyChunk ? !plan->map.ChunksOf(uint32_t(s)).empty()
                             : plan->map.owner(c) != uint32_t(s)) {
      continue;  // held under a plan that did not say yet
    }
    if (!in[k]) ++n;
    in[k] = true;
  }
  if (n < segs.size()) return;
  complete_[s] = p.iteration;
  complete_plan_[s] = p.plan;
  pulled_[s] = p.result;
  arrived_.SignalAll();
}

absl::Status BspWorker::Run(int64_t report_every,
                            const std::function<void(const WorkerProgress&)>& progress) {
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  WorkerProgress p;
  p.total = total_;
  const size_t px = train_.pixels_per_image();
  // This worker's batch follows the plan of each iteration (WLBS); its
  // samples are the next ones of its stream.
  int batch = static_cast<int>(config_.job.batch_size);
  const size_t batch_max = shape_.batch_max;
  std::vector<float> x(batch_max * px);
  std::vector<uint8_t> y(batch_max);
  int64_t samples_done = 0;  // since the last report
  double loss_sum = 0;
  int64_t t;
  {
    absl::MutexLock lock(&mu_);
    t = start_;
  }
  int64_t loss_n = 0;
  auto last_report = Clock::now();
  p.iteration = t;
  bool first_pull = true;
  const RealClock* mono = RealClock::Get();  // the endpoint's clock: traces line up
  JsonWriter line;
  std::vector<transport::FlowResult> pulled;
  std::optional<ps::ChunkMap> map;  // the plan of the iteration pulled
  // Position in this worker's sample stream: where the checkpoint resumed
  // from says it was, or where equal batches would be.
  uint64_t cursor = !config_.start_plan.chunk_server.empty() ? config_.resume_samples
                                                             : uint64_t(t) * config_.job.batch_size;
  for (;;) {
    // Pull: parameters t from every server (or newer, if we fell behind).
    const auto wait_start = Clock::now();
    const uint64_t wait_us = mono->MonotonicMicros();
    int64_t have;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time deadline = absl::Now() + config_.pull_timeout;
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (stop_ || servers_.empty() || book_ == nullptr) return stop_ || !book_error_.ok();
        for (size_t s = 0; s < complete_.size(); ++s) {
          // A server still sending an older round is not ready.
          if (complete_[s] < t || receiving_[s] > complete_[s]) return false;
          if (book_->Get(complete_plan_[s]) == nullptr) return false;  // not announced yet
        }
        // The round is whole when every server sent it under the plan
        // server 0 sent it under (or, behind it, the plan known to hold).
        const int64_t oldest = *std::min_element(complete_.begin(), complete_.end());
        const uint32_t plan =
            complete_[0] == oldest ? complete_plan_[0] : book_->For(uint32_t(oldest)).map.version();
        for (size_t s = 0; s < complete_.size(); ++s) {
          if (complete_[s] == oldest && complete_plan_[s] != plan) return false;
        }
        return true;
      };
      while (!ready()) {
        if (arrived_.WaitWithDeadline(&mu_, deadline)) break;
      }
      if (stop_) return absl::CancelledError("worker stopped");
      if (!book_error_.ok()) return book_error_;
      if (!ready()) {
        return absl::DeadlineExceededError(
            absl::StrCat("worker ", config_.rank, ": no parameters for iteration ", t, " within ",
                         absl::FormatDuration(config_.pull_timeout)));
      }
      have = *std::min_element(complete_.begin(), complete_.end());
      // The pulled buffer becomes the model's (no copy of the model per
      // iteration); the next pull lands in the other one. No flow is in
      // progress now (ready), and the next ones write every chunk of their
      // server before it counts as complete, except a server already past
      // `have` (this worker fell behind): its newer chunks are in the
      // buffer just taken, so they are carried over.
      std::swap(params_, incoming_);
      const uint32_t plan =
          complete_[0] == have ? complete_plan_[0] : book_->For(uint32_t(have)).map.version();
      map = book_->Get(plan)->map;
      batch = static_cast<int>(book_->Get(plan)->batch[config_.rank]);
      plan_stats_.version = plan;
      for (size_t s = 0; s < complete_.size(); ++s) {
        if (complete_[s] <= have) continue;
        for (uint32_t c : book_->Get(complete_plan_[s])->map.ChunksOf(uint32_t(s))) {
          const ps::Chunk ch = layout_->chunk(c);
          std::copy_n(params_.begin() + ch.offset, ch.floats, incoming_.begin() + ch.offset);
        }
      }
      if (config_.trace != nullptr) pulled = pulled_;
    }
    const uint64_t woke_us = mono->MonotonicMicros();
    (first_pull ? p.start_wait_s : p.pull_wait_s) += secs(wait_start, Clock::now());
    first_pull = false;
    if (have > t) {
      p.skipped += have - t;
      cursor += uint64_t(have - t) * batch;
      t = have;
    }
    if (t >= total_) break;  // the final parameters

    // Compute.
    const auto compute_start = Clock::now();
    const uint64_t compute_us = mono->MonotonicMicros();
    const std::vector<uint32_t> idx = sampler_->Samples(cursor, static_cast<uint32_t>(batch));
    cursor += batch;
    samples_done += batch;
    p.samples += batch;
    for (int i = 0; i < batch; ++i) {
      std::copy_n(train_.pixels.begin() + size_t(idx[i]) * px, px, x.begin() + size_t(i) * px);
      y[i] = train_.labels[idx[i]];
    }
    // Push: each server gets the gradient of the chunks it owns, as soon
    // as backward has finished them (the servers owning the last layers
    // first, while backward goes on: chunks are contiguous per server).
    // By server index (null: nothing to push there); traces list them so.
    std::vector<std::shared_ptr<transport::SendHandle>> handles;
    std::vector<bool> pushed;
    auto push_ready = [&](size_t final_from) {
      absl::MutexLock lock(&mu_);
      pushed.resize(servers_.size(), false);
      handles.resize(servers_.size());
      const uint32_t pf = config_.endpoint.payload_floats();
      static const float kZero = 0;
      for (uint32_t s = 0; s < servers_.size() && !stop_; ++s) {
        if (pushed[s]) continue;
        const std::vector<uint32_t> chunks = map->ChunksOf(s);
        std::vector<transport::PacketSpan> packets;
        if (chunks.empty()) {
          // A server with no chunks under this plan still gets a push, so
          // that its round closes with the others'.
          if (final_from > 0) continue;
          packets.push_back({ps::kEmptyChunk, 0, &kZero, 1, true});
        } else {
          const ps::Chunk first = layout_->chunk(chunks.front());
          if (first.offset < final_from) continue;
        }
        pushed[s] = true;
        for (uint32_t c : chunks) {
          const ps::Chunk ch = layout_->chunk(c);
          transport::AppendPackets(c, grad_.data() + ch.offset, ch.floats, pf, true, &packets);
        }
        transport::SendOptions options;
        options.plan = static_cast<uint32_t>(map->version());
        options.samples = static_cast<uint32_t>(batch);
        options.loss_tolerant = config_.job.loss_tolerant() && !chunks.empty();
        handles[s] =
            endpoint_->Send(servers_[s], static_cast<uint32_t>(t), std::move(packets), options);
        in_flight_.push_back(handles[s]);
      }
    };
    // params_ stays put until the next pull: the model reads it in place.
    RETURN_IF_ERROR(model_->UseParameters(params_));
    ASSIGN_OR_RETURN(float loss, model_->ComputeGradients(x.data(), y.data(), batch,
                                                          absl::MakeSpan(grad_), push_ready));
    loss_sum += loss;
    ++loss_n;
    if (config_.compute_slowdown > 1) {
      const double took = secs(compute_start, Clock::now());
      absl::SleepFor(absl::Seconds(took * (config_.compute_slowdown - 1)));
    }
    p.compute_s += secs(compute_start, Clock::now());
    {
      absl::MutexLock lock(&live_mu_);
      compute_done_ = {p.samples, p.compute_s};
    }
    const auto push_start = Clock::now();
    const uint64_t push_us = mono->MonotonicMicros();
    push_ready(0);  // the rest
    // The gradient buffer must stay put until every push is done (or given up).
    handles.erase(std::remove(handles.begin(), handles.end(), nullptr), handles.end());
    for (auto& h : handles) {
      if (!h->Wait(config_.job.round_deadline_ms * absl::Milliseconds(1))) endpoint_->Cancel(h);
    }
    // Cancelled flows finish on the endpoint thread's next turn.
    for (auto& h : handles) h->Wait(absl::InfiniteDuration());
    {
      absl::MutexLock lock(&mu_);
      in_flight_.clear();
    }
    if (stop_) return absl::CancelledError("worker stopped");
    p.push_s += secs(push_start, Clock::now());
    if (config_.trace != nullptr) {
      line = JsonWriter();
      line.BeginObject();
      line.Key("ev").String("iteration");
      line.Key("node").String(config_.trace_node);
      line.Key("t").Int(t);
      line.Key("wait").Uint(wait_us);
      line.Key("woke").Uint(woke_us);
      line.Key("pull").BeginArray();  // per server: first, last packet, close
      for (const transport::FlowResult& r : pulled) AppendJson(r, &line);
      line.EndArray();
      line.Key("compute").Uint(compute_us);
      line.Key("push").Uint(push_us);
      line.Key("pushes").BeginArray();
      for (auto& h : handles) AppendJson(h->timing(), &line);
      line.EndArray();
      line.Key("pushed").Uint(mono->MonotonicMicros());
      line.EndObject();
      config_.trace->Write(line.str());
    }
    ++t;

    p.iteration = t;
    const bool eval =
        config_.evaluate && config_.job.eval_every > 0 && t % config_.job.eval_every == 0;
    if (eval || (report_every > 0 && t % report_every == 0)) {
      p.loss = loss_n > 0 ? loss_sum / loss_n : 0;
      const auto now = Clock::now();
      p.samples_per_s = double(samples_done) / std::max(1e-9, secs(last_report, now));
      samples_done = 0;
      p.batch = batch;
      p.test_accuracy = -1;
      if (eval) {
        // Evaluates the parameters pulled for this iteration (the model
        // holds them); the update from this iteration arrives with the next pull.
        ASSIGN_OR_RETURN(
            train::EvalResult r,
            model_->Evaluate(test_.pixels.data(), test_.labels.data(),
                             std::min<size_t>(config_.job.eval_samples, test_.size())));
        p.test_accuracy = r.accuracy;
      }
      if (progress) progress(p);
      loss_sum = 0;
      loss_n = 0;
      last_report = Clock::now();
    }
  }
  // Final parameters are in params_.
  p.iteration = total_;
  if (config_.evaluate) {
    RETURN_IF_ERROR(model_->SetParameters(params_));
    ASSIGN_OR_RETURN(final_eval_,
                     model_->Evaluate(test_.pixels.data(), test_.labels.data(),
                                      std::min<size_t>(config_.job.eval_samples, test_.size())));
    p.test_accuracy = final_eval_.accuracy;
  }
  p.loss = loss_n > 0 ? loss_sum / loss_n : p.loss;
  if (progress) progress(p);
  return absl::OkStatus();
}

}  // namespace hetps
