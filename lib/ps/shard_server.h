// ShardServer: the parameter-server side of bulk-synchronous training for
// the chunks one psd owns (ChunkMap). Each round t:
//   1. broadcast parameters t (the owned chunks) to every live worker;
//   2. collect each worker's pushed gradient for t into that worker's buffer;
//   3. close when every live worker's push is complete, or at the round
//      deadline with whoever completed (a dead or slow worker never hangs a
//      round; membership changes from SetWorkers close it at once);
//   4. average the completed gradients, apply the optimizer, and go on with
//      t + 1. A loss-tolerant (LTP) push the endpoint closed early has holes:
//      they are zero-filled (bubbles) and each element is averaged over the
//      workers whose packet for it arrived (MeanUnbiased), not over all.
// After the last round it broadcasts the final parameters (iteration =
// total_iterations) and finishes.
//
// Segments (segment_chunks; docs/plan.md): a server's chunks are cut into
// runs, and round t's step is applied, and round t + 1's parameters sent,
// segment by segment, as soon as every live worker's push of a segment
// arrived, while later segments are still coming in. A host whose link
// carries both a worker's push and the pulls it waits for then uses both
// directions at once, as ADLB's cost model and the simulator assume. A
// round that ends at its deadline or on a membership change applies its
// remaining segments with whoever completed them; a round t + 1 that
// starts under another plan is not streamed (its chunks move first).
//
// Plans (plan.h, docs/plan.md): the chunk map is a versioned value. Server
// 0 takes proposals (ProposePlan), picks the round each starts at
// (plan_lead rounds ahead) and announces it to every server and worker.
// At that round each server sends the parameters of the chunks it gives
// up to their new owners (with segments, those the round before applied
// early left then), waits for the parameters of the chunks it takes
// over, and broadcasts; the chunks' optimizer state follows, and is
// needed only before the round's first step, so the switch's critical
// path carries the parameters only. Every flow carries its plan version:
// pushes of another plan are refused and counted; chunks and announcements
// that come before this server can use them are held. A server that opened
// the round before the announcement reached it opens it again under the
// new plan (no worker can have pushed to it: workers push a round only
// once every server sent it under the plan server 0 tagged it with).
//
// Threads: the transport's thread delivers packets (Receiver callbacks); one
// round thread runs the loop above. Shared round state is under mu_.
// Start/Stop/SetWorkers/GetStats are thread-safe.
#ifndef HETPS_LIB_PS_SHARD_SERVER_H_
#define HETPS_LIB_PS_SHARD_SERVER_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/trace_log.h"
#include "lib/ps/aggregate.h"
#include "lib/ps/chunk_map.h"
#include "lib/ps/plan.h"
#include "lib/storage/checkpoint_writer.h"
#include "lib/train/optimizer.h"
#include "lib/transport/tcp_endpoint.h"

namespace hetps {
namespace ps {

struct ShardServerConfig {
  uint32_t server_index = 0;
  uint64_t num_params = 0;
  uint32_t chunk_floats = 16384;
  uint32_t num_servers = 1;
  // Chunks per segment (PlanShape::segment_chunks); 0: all of a server's.
  uint32_t segment_chunks = 0;
  // The job's workers (every rank, live or not), batch per worker, and the
  // most one worker may be given: the shape plans are checked against. A
  // push says how many samples its gradient averages (Header::samples; at
  // most batch_max, else refused); a round's pushes of different sample
  // counts are averaged weighted by them (docs/plan.md). batch_max 0: not
  // checked, and plans may give one worker up to the global batch.
  uint32_t num_workers = 1;
  uint32_t batch_size = 1;
  uint32_t batch_max = 0;
  train::OptimizerConfig optimizer;
  uint32_t total_iterations = 0;
  absl::Duration round_deadline = absl::Seconds(5);
  transport::EndpointConfig endpoint;
  // Server 0: a proposed plan starts at least this many rounds after the
  // round it is announced in, so the announcement reaches every node
  // before anyone needs it (a late one costs a re-opened round, not
  // correctness).
  uint32_t plan_lead = 1;
  // The transport it creates when none is shared: UDP (reliable and ltp
  // jobs) or kernel TCP (tcp jobs).
  transport::TransportKind transport = transport::TransportKind::kUdp;
  // One line per round (docs/tracing.md) when set; not owned, must outlive
  // the server.
  TraceLog* trace = nullptr;
  std::string trace_node;  // the node id the lines name
  // Checkpoints (lib/storage): every this many rounds, when the writer is
  // idle, the round thread copies its chunks and optimizer state right
  // after the step and hands them over. 0: none. Not owned.
  uint32_t checkpoint_every_rounds = 0;
  storage::CheckpointWriter* checkpoints = nullptr;
  std::string job_id;     // what the checkpoints are filed under
  std::string spec_text;  // the job spec, stored with them
  // Resume: start at this checkpoint's round with its parameters and
  // optimizer state instead of round 0 and the initial parameters, under
  // the plan it records (version 1; none recorded: the even split). It
  // must hold exactly this server's chunks of that plan. Read by Create
  // only; not owned. Checkpoints record the plan of their round.
  const storage::Checkpoint* resume = nullptr;
};

// Upper bounds of the round-duration histogram, seconds: a loopback round
// (milliseconds) to a WAN round at a deadline (tens of seconds).
inline constexpr std::array<double, 12> kRoundSecondsBounds = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

struct ShardServerStats {
  uint32_t iteration = 0;             // rounds closed so far
  uint64_t rounds_complete = 0;       // every live worker contributed
  uint64_t rounds_by_deadline = 0;    // closed at the deadline without some
  uint64_t rounds_by_membership = 0;  // closed early because a worker left
  uint64_t stale_pushes = 0;          // flows refused: wrong iteration or peer
  uint64_t bad_chunks = 0;            // packets for chunks we do not own / out of range
  uint32_t last_contributors = 0;
  // LTP pushes: closed early with holes, the bytes zero-filled, and the
  // delivered fraction of each worker's latest push (by worker rank).
  uint64_t partial_pushes = 0;
  uint64_t bubble_bytes = 0;
  uint64_t partial_elements = 0;  // aggregated over fewer workers than contributed
  std::vector<std::pair<transport::Peer, double>> last_delivered;
  double last_aggregate_ms = 0;
  // Segments applied and sent before their round closed (pipelining).
  uint64_t segments_streamed = 0;
  // Segments of a plan's first round sent before the switch that opens
  // it (StreamAhead): during the round before, or while the chunks taken
  // over were still coming.
  uint64_t segments_ahead = 0;
  uint64_t checkpoints_offered = 0;  // snapshots handed to the writer
  double last_snapshot_ms = 0;       // the round thread's copy for the newest
  double last_round_ms = 0;
  // Every round's duration (open to applied): counts per bucket of
  // kRoundSecondsBounds (the last: above them all) and their sum.
  std::array<uint64_t, 13> round_buckets{};
  double round_seconds_sum = 0;
  // Plans: the version in force, switches made, chunks given up and taken
  // over, flows refused for carrying another plan (pushes of an older or
  // newer one), flows held until this server could use them, proposals
  // dropped for a newer one, rounds opened again under a late plan.
  uint32_t plan_version = kFirstPlanVersion;
  uint64_t plan_from = 0;  // the round plan_version started at
  uint64_t plan_switches = 0;
  uint64_t chunks_sent = 0;
  uint64_t chunks_sent_early = 0;  // their parameters, during the round before
  uint64_t chunks_received = 0;
  uint64_t stale_plan = 0;
  uint64_t plan_ahead = 0;
  uint64_t held_flows = 0;
  uint64_t plans_superseded = 0;
  uint64_t rounds_reopened = 0;
  // The newest plan known here, when it is not in force yet, and the
  // round it starts at (0: none waiting).
  uint32_t plan_next = 0;
  uint32_t plan_next_from = 0;
  bool round_open = false;  // round `iteration` is open (broadcast, taking pushes)
  bool finished = false;
};

class ShardServer : public transport::Receiver {
 public:
  // `initial_params` is the full model vector (every node derives the same
  // one from the job seed); the server keeps its own chunks.
  // It binds its own endpoint from config.endpoint, or uses `shared` (a
  // daemon's long-lived endpoint, not owned): the caller then routes the
  // endpoint's Receiver callbacks here and detaches them before destroying
  // the server, which cancels and waits out its own flows first.
  static absl::StatusOr<std::unique_ptr<ShardServer>> Create(
      const ShardServerConfig& config, absl::Span<const float> initial_params,
      transport::Transport* shared = nullptr);
  ~ShardServer() override;

  transport::Peer local() const { return endpoint_->local(); }
  transport::Transport& endpoint() { return *endpoint_; }

  // The live workers, by rank. Removing a worker closes a round waiting for
  // it; adding one includes it from the next round.
  void SetWorkers(const std::vector<transport::Peer>& workers);
  // Every server of the job, by index (this one included): where chunks
  // move and announcements go. Needed only for plans after version 1.
  void SetServers(const std::vector<transport::Peer>& servers);
  // Server 0 only (FailedPrecondition elsewhere): a new chunk map (version
  // above every earlier one, else dropped and counted) to hold from round
  // `from` at the earliest. The newest proposal wins; it is announced at
  // the next round open once the previous plan is in force.
  // `batch`: each worker's batch by rank (empty: the even split).
  absl::Status ProposePlan(const ChunkMap& map, std::vector<uint32_t> batch, uint32_t from);
  void Start();
  // Blocks until every round is done (or Stop). True when finished.
  bool WaitFinished(absl::Duration timeout);
  void Stop();
  ShardServerStats GetStats() const;
  // Blocks until `done` holds for the stats (checked whenever a round
  // opens or closes, a plan is announced, or a push is refused for its
  // plan) or `timeout` passed; returns whether it held.
  bool AwaitStats(const std::function<bool(const ShardServerStats&)>& done,
                  absl::Duration timeout) const;
  // This server's chunks of the parameters, in chunk order. Call only once
  // WaitFinished returned true (the round thread owns them until then).
  std::vector<float> OwnedParams() const;
  // Call only once WaitFinished returned true, like OwnedParams.
  const std::vector<uint32_t>& owned_chunks() const { return owned_; }

  // transport::Receiver (endpoint thread)
  transport::DropReason AcceptFlow(const transport::Peer& from,
                                   const transport::Header& first) override;
  void OnData(const transport::Peer& from, const transport::Header& h,
              const uint8_t* payload) override;
  void OnFlowDone(const transport::Peer& from, const transport::FlowResult& result) override;

 private:
  ShardServer(const ShardServerConfig& config, ChunkLayout layout, ChunkMap map);
  void Run();
  // Sends the parameters of `iteration` to every worker, from its snapshot
  // buffer (taken now unless ApplyStep already wrote it): each segment
  // not streamed already under the plan followed, and the streamed ones
  // to workers that did not get them.
  void Broadcast(uint32_t iteration);
  // Sends segment k of `iteration` (its snapshot) to `to`, under `plan`.
  void SendSegment(uint32_t iteration, size_t k, const std::vector<transport::Peer>& to,
                   uint32_t plan);
  // Cancels what is still being sent from the snapshot buffer of
  // `iteration` (the one two rounds back: a worker not done with it is
  // gone or far behind) and waits for those flows to end, so it can be
  // written, grown or freed.
  void ReleaseSnapshot(uint32_t iteration);
  // The optimizer step of round t over local floats [lo, hi), from the
  // mean of `inputs` (each floats_ long), tile by tile while each is in
  // cache: sum, update, and copy the new parameters into the snapshot for
  // round t + 1. The round's first call begins the step (one optimizer
  // step per round, however many segments). With bubbles (`missing`:
  // each input's, over all floats_) the unbiased mean of the range is
  // taken first. `samples`: each input's (empty: all equal); unequal
  // ones weight it. Returns MeanUnbiased's count of elements with bubbles.
  uint64_t ApplyStep(uint32_t t, size_t lo, size_t hi, const std::vector<const float*>& inputs,
                     const std::vector<std::vector<Range>>& missing,
                     const std::vector<float>& samples, bool bubbles);
  // Round t, mu_ held: applies the segments every live worker's push
  // completed and sends them as round t + 1's, unlocking meanwhile.
  // Returns how many (0: none ready, or segments not streamed now).
  size_t StreamReady(uint32_t t, uint64_t* partial_elements) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Round t is a switch's first (its plan is not the one followed yet),
  // mu_ held: sends the live workers each segment of this server's under
  // that plan whose every chunk is here: kept ones once their step for
  // round t - 1 was applied (all of them once `closed`), taken-over ones
  // once their parameters came. Broadcast(t) sends only the rest. Unlocks
  // while sending; returns how many segments went.
  size_t StreamAhead(uint32_t t, bool closed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Segment k's packets of a snapshot laid out like params_.
  std::vector<transport::PacketSpan> SegmentPackets(const float* base, size_t k) const;
  // segs_ and chunk_seg_ for the plan followed (owned_ and local_ set).
  void CutSegments(const Plan& plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A push that ended with holes: zero-fills them once and keeps them
  // (slot.missing); later data for the round cannot come.
  struct Slot;
  void FillBubbles(Slot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loads `c` (config_.resume) into the parameters and optimizer state.
  absl::Status Restore(const storage::Checkpoint& c);
  // After round t's step: the checkpoint of t + 1 rounds applied, if due
  // and the writer is idle. Returns the copy's time (0: none taken).
  double MaybeCheckpoint(uint32_t t);
  // Server 0, at round t's open, or in round t when AnnounceNow: announces
  // the newest proposal (if AnnounceDue) from round t + plan_lead, and the
  // plans some peer was not told of.
  void Announce(uint32_t t);
  // A proposal can be announced in round t: the plan before it is in
  // force, and it would start before the job ends.
  bool AnnounceDue(uint32_t t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Server 0 announces a proposal in round t as soon as AnnounceDue.
  bool AnnounceNow(uint32_t t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Switches to `next` (in force from round t): the parameters of the
  // chunks given up out, those of the chunks taken over in, then the new
  // layout; their optimizer state is packed for SendState. False when
  // stopped first.
  bool Switch(uint32_t t, const Plan& next);
  // After the switch's broadcast: the optimizer state of the chunks given
  // up, one flow per new owner.
  void SendState(uint32_t t);
  // Round t - 1 of a switch to `next` at t: sends the parameters of the
  // chunks given up in segments `ready` (just applied) to their new
  // owners, so that Switch waits only for the rest.
  void SendEarly(uint32_t t, const Plan& next, const std::vector<size_t>& ready);
  // Waits (no deadline: it exists nowhere else) for the optimizer state
  // of the chunks taken over at the switch and puts it in place; false
  // when stopped first, or, with `wait` false, when some is still coming.
  // Before the first step under the plan.
  bool InstallState(bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One flow of `chunks` to `to`, tagged with round t and `plan`: `data`
  // holds each chunk's parameters (slots 0) or its `slots` optimizer
  // slots, chunk after chunk; it must outlive the flow.
  std::shared_ptr<transport::SendHandle> SendChunks(const transport::Peer& to, uint32_t t,
                                                    uint32_t plan,
                                                    const std::vector<uint32_t>& chunks,
                                                    const std::vector<float>& data, uint32_t slots);
  // Waits for the flows of the last switch, so their buffers may go;
  // their timings (traces) into `timings` when set.
  void FinishMoved(std::vector<transport::FlowTiming>* timings = nullptr);
  // The plan that holds at `t` when it is not the one followed, copied.
  std::optional<Plan> PlanDue(uint32_t t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int ServerIndex(const transport::Peer& p) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ShardServerStats StatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ShardServerConfig config_;
  const ChunkLayout layout_;
  train::OptimizerConfig optimizer_config_;
  uint64_t migrate_packets_max_ = 0;  // the largest chunk flow between servers
  // The plan followed. Only the round thread changes these (Switch), and
  // it does so under mu_: the endpoint thread reads local_ and floats_
  // under mu_, the round thread reads them without.
  ChunkMap map_;
  std::vector<uint32_t> batch_;                  // each worker's, by rank, under map_'s plan
  std::vector<uint64_t> samples_;                // each worker's drawn before the next round
  std::vector<uint32_t> owned_;                  // chunk ids, ascending
  absl::flat_hash_map<uint32_t, size_t> local_;  // chunk id -> local offset
  size_t floats_ = 0;
  uint64_t push_packets_ ABSL_GUARDED_BY(mu_) = 0;  // total_packets of every push
  uint32_t plan_version_ ABSL_GUARDED_BY(mu_) = kFirstPlanVersion;
  // The newest plan whose chunks (parameters and state) are all here:
  // chunk flows of it or older are refused.
  uint32_t installed_plan_ ABSL_GUARDED_BY(mu_) = kFirstPlanVersion;
  std::unique_ptr<transport::Transport> own_endpoint_;
  transport::Transport* endpoint_ = nullptr;  // own_endpoint_ or the shared one
  std::unique_ptr<train::OptimizerState> optimizer_;
  std::vector<float> params_;        // round thread only
  std::vector<float> broadcast_[2];  // snapshots being sent, double-buffered
  std::vector<std::shared_ptr<transport::SendHandle>> in_flight_[2];
  // Beside each of in_flight_: the worker and segment it went to, for
  // the trace (which worker's broadcasts ended a round late).
  struct BcastTo {
    transport::Peer peer;
    uint32_t seg = 0;
  };
  std::vector<BcastTo> in_flight_to_[2];
  int64_t snapshot_for_ = -1;     // the iteration whose snapshot ApplyStep took
  uint32_t start_round_ = 0;      // 0, or the round of the checkpoint resumed from
  std::vector<float> aggregate_;  // the mean gradient: one tile, or a range with bubbles
  // The segments of the plan followed: local float range, owned_ index
  // range and packets. Changed under mu_ by the round thread (Switch);
  // the endpoint thread reads chunk_seg_ (each chunk's segment) under it.
  struct Segment {
    size_t lo = 0, hi = 0;        // local floats
    size_t first = 0, count = 0;  // owned_[first, first + count)
  };
  std::vector<Segment> segs_;
  std::vector<uint64_t> seg_packets_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> chunk_seg_ ABSL_GUARDED_BY(mu_);
  // Round thread: whether round t's step began (ApplyStep), which
  // segments of it are applied, and which segments of which iteration's
  // snapshot went out under which plan, to whom.
  bool stepping_ = false;
  std::vector<bool> applied_;
  struct Sent {
    int64_t iteration = -1;
    uint32_t plan = 0;
    std::vector<bool> segs;
    std::vector<transport::Peer> to;  // had every segment sent so far
    // Segments just went to `now`: only those of `to` among them had
    // every one (Broadcast sends them to the others).
    void KeepOnly(const std::vector<transport::Peer>& now) {
      std::vector<transport::Peer> all;
      for (const transport::Peer& p : to) {
        if (std::find(now.begin(), now.end(), p) != now.end()) all.push_back(p);
      }
      to = std::move(all);
    }
  };
  Sent sent_;
  // A switch's first round sent ahead (StreamAhead; which segments and
  // to whom: sent_): the copies it was sent from and its flows, until
  // Broadcast adds them to in_flight_; ahead_kept_ then holds the copies
  // until ReleaseSnapshot has seen those flows end.
  struct Ahead {
    int64_t iteration = -1;
    uint32_t plan = 0;
    std::vector<std::unique_ptr<std::vector<float>>> buffers;
    std::vector<std::shared_ptr<transport::SendHandle>> flows;
    std::vector<BcastTo> to;
  };
  Ahead ahead_;
  std::vector<std::unique_ptr<std::vector<float>>> ahead_kept_[2];
  std::thread thread_;
  std::atomic<bool> stop_{false};

  mutable absl::Mutex mu_;
  mutable absl::CondVar changed_;
  std::vector<transport::Peer> workers_ ABSL_GUARDED_BY(mu_);
  uint64_t membership_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool round_open_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t round_ ABSL_GUARDED_BY(mu_) = 0;
  // Per worker peer: gradient buffer and whether its push completed.
  struct Slot {
    std::vector<float> grad;
    bool done = false;
    bool partial = false;          // closed early: `have` says what arrived
    std::vector<ps::Range> have;   // ranges an LTP push delivered this round
    transport::FlowResult result;  // its push's (traces)
    uint32_t samples = 0;          // the push's Header::samples
    std::vector<uint64_t> got;     // packets arrived, per segment
    bool filled = false;           // FillBubbles ran: `missing` is final
    std::vector<ps::Range> missing;
    uint64_t holes = 0;  // floats in `missing`
  };
  absl::flat_hash_map<transport::Peer, Slot> slots_ ABSL_GUARDED_BY(mu_);
  ShardServerStats stats_ ABSL_GUARDED_BY(mu_);

  // Plans: what this server knows, server 0's pending proposal, and the
  // other servers by index.
  std::unique_ptr<PlanBook> book_ ABSL_GUARDED_BY(mu_);
  std::optional<Plan> proposal_ ABSL_GUARDED_BY(mu_);
  std::vector<transport::Peer> servers_ ABSL_GUARDED_BY(mu_);
  // An announcement being received from server 0 (its flow id and words).
  std::unique_ptr<PlanReceiver> announcements_in_ ABSL_GUARDED_BY(mu_);
  // Chunks another server sends this one, per sender index and plan (the
  // two newest): each chunk's state ([params | optimizer slots]) and the
  // floats of each part arrived (the transport delivers each packet
  // once), from at most two flows per chunk (parameters, then state).
  struct InChunk {
    std::vector<float> state;
    uint64_t params = 0, slots = 0;
  };
  struct Incoming {
    uint32_t plan = 0;
    std::vector<uint32_t> flows;
    absl::flat_hash_map<uint32_t, InChunk> chunks;
  };
  static constexpr size_t kIncomingPlans = 2;
  std::vector<std::vector<Incoming>> incoming_ ABSL_GUARDED_BY(mu_);
  Incoming* FindIncoming(uint32_t server, uint32_t flow_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether every chunk of `chunks` from `server` under `plan` has its
  // parameters (or its whole state) here.
  bool ChunksIn(uint32_t server, uint32_t plan, const std::vector<uint32_t>& chunks,
                bool whole) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The last switch (round thread): what goes out, by new owner, packed
  // per chunk ([params] in `params`, [slots] in `state`), the flows sent,
  // and the chunks taken over, by previous owner, whose state is to come.
  struct Moving {
    uint32_t plan = 0;
    std::vector<std::vector<float>> params, state;
    std::vector<std::unique_ptr<std::vector<float>>> early;  // SendEarly's buffers
    std::vector<std::vector<uint32_t>> out;
    std::vector<std::shared_ptr<transport::SendHandle>> flows;
    std::vector<std::shared_ptr<transport::SendHandle>> flows_other;  // cancelled
    std::vector<std::vector<uint32_t>> in;
    bool installing = false;
  };
  Moving moving_;
  // The parameters of chunks given up that left during the round before
  // a switch (SendEarly): under which plan, which chunks (by id), their
  // buffers and flows. Switch takes them over.
  struct Early {
    uint32_t plan = 0;
    std::vector<bool> sent;
    std::vector<std::unique_ptr<std::vector<float>>> buffers;
    std::vector<std::shared_ptr<transport::SendHandle>> flows;
  };
  Early early_;
  // Server 0: the announcements sent (by version: words as floats, flows)
  // and the newest version each peer was told of.
  struct Announcement {
    std::vector<float> words;
    std::vector<std::shared_ptr<transport::SendHandle>> flows;
  };
  std::map<uint32_t, Announcement> announcements_;       // round thread
  absl::flat_hash_map<transport::Peer, uint32_t> told_;  // round thread
};

}  // namespace ps
}  // namespace hetps

#endif  // HETPS_LIB_PS_SHARD_SERVER_H_
