// What schedd knows of the network and how it turns it into plans
// (docs/plan.md, docs/awareness.md).
//
// LinkTable: the newest report of each directed link between nodes, with
// when it came. PolicyLoop: for the active job with an adaptive
// load_policy, once the map in force has been measured for an update
// period, and then whenever schedd looks (every kLookMs), the throughput
// of each psd's host (HostRates). When
// some host's throughput moved by more than update_rate from what the
// plan in force was made from, they go through lib/policy's solver for
// the job's policy; the shares become chunk counts (largest remainders,
// probe chunks for hosts given none), the counts a chunk map that moves
// as few chunks as possible from the plan in force (RebalanceChunks),
// issued as the next version when at least update_rate of it changed.
// Pure values with the time passed in; thread-compatible (schedd guards).
#ifndef HETPS_DAEMONS_SCHEDD_POLICY_LOOP_H_
#define HETPS_DAEMONS_SCHEDD_POLICY_LOOP_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/hetps/v1/scheduler.pb.h"

namespace hetps {

class LinkTable {
 public:
  // At most this many links are kept (the oldest report goes first).
  static constexpr size_t kLinksMax = 65536;
  // A report whose probe ended longer ago than this (the longest update
  // period) is refused.
  static constexpr int64_t kSampleAgeMaxMs = 86'400'000;
  // A report carries at most this many probes (LinkMeter::kProbesReported).
  static constexpr int kProbesMax = 8;

  // Checks and records one report made by `reporter` (a link into it:
  // to_node_id must be the reporter). InvalidArgument says why not.
  absl::Status Record(const std::string& reporter, const v1::LinkReport& link, int64_t now_ms);
  // Every link, by (from, to), with measured_unix_ms set to when schedd
  // received its newest report.
  std::vector<v1::LinkReport> All() const;
  const v1::LinkReport* Find(const std::string& from, const std::string& to) const;
  void Clear() {
    links_.clear();
    traffic_.clear();
  }

  // Node traffic (ReportLinksRequest.traffic) is kept on a grid of
  // kTrafficBinMs bins of calendar time for kTrafficKeepMs.
  static constexpr int64_t kTrafficBinMs = 50;
  static constexpr int64_t kTrafficKeepMs = 60'000;
  static constexpr int kTrafficBinsMax = 1024;  // per report
  // A host's rate is read over windows this long: several round trips,
  // and long enough that a shaper's burst allowance is a small part.
  static constexpr int64_t kHostWindowMs = 200;
  // Checks and records what `reporter` received per bin: its bins (of
  // kTrafficBinMs; others are refused) replace what was held for their
  // times. InvalidArgument says why not.
  absl::Status RecordTraffic(const std::string& reporter, const v1::NodeTraffic& traffic,
                             int64_t now_ms);
  // The most bytes per second `nodes` received together in any
  // kHostWindowMs within [from_ms, to_ms); 0 when none reported a byte.
  double PeakRate(const std::vector<std::string>& nodes, int64_t from_ms, int64_t to_ms) const;

 private:
  std::map<std::pair<std::string, std::string>, v1::LinkReport> links_;
  // By node: bytes by bin start (unix ms, a multiple of kTrafficBinMs).
  std::map<std::string, std::map<int64_t, double>> traffic_;
};

// The fastest probe of `link` (as LinkTable holds it) that ended at or
// after from_ms: of its estimate and the probes its report carried (none
// from an older node). A link's estimate is its largest recent
// probe and may be older than from_ms while newer, slower probes are not;
// those still say what the link carried then. 0: none since. O(probes).
double FastestSince(const v1::LinkReport& link, int64_t from_ms);

// Chunk counts per server in proportion to `shares` (each >= 0, sum > 0),
// summing to `chunks`: floors, then the largest remainders (ties: lower
// index). O(S log S).
std::vector<int64_t> ChunkCounts(const std::vector<double>& shares, int64_t chunks);

// ADLB Algorithm 2's probe slices in chunks: server i given fewer than
// probe[i] takes the rest from the servers with the most, one at a time,
// so its links keep carrying flows large enough to measure (when there
// are enough chunks for every probe). O(S^2 probe) worst case.
std::vector<int64_t> WithProbes(std::vector<int64_t> counts, const std::vector<int64_t>& probe);

struct PolicyJob;
// The probe slice each server needs: job.probe_chunks, or none for a psd
// whose host also runs one of the job's workers. ADLB probes every
// worker-server pair; here a host's throughput is measured from all its
// nodes (HostRates), and that worker's push and pull cross the same
// access link every round, far above probe_chunk_bytes. A slice kept
// only to be measured costs the slowest host its broadcast to every
// worker each round. O((S + W) log W).
std::vector<int64_t> ProbeChunks(const PolicyJob& job);

// The shares of `load_policy` (elastic, adlb-alg1, adlb) for servers of
// these throughputs (bytes/s, each > 0), as fractions of the model.
absl::StatusOr<std::vector<double>> PolicyShares(const std::string& load_policy,
                                                 const std::vector<double>& throughput_Bps);

// ADLB's Eq. 9 round transfer time, in units of one model's bytes over
// 1 byte/s, of servers holding `counts` chunks (taken as equal-sized) at
// these throughputs; what a load decision compares maps by. 0 when there
// are no chunks or the sizes differ. O(S).
double PredictedTransfer(const std::vector<int64_t>& counts, const std::vector<double>& rate);

// What a load decision compares maps by: the same Eq. 9 times under
// their 4-norm, i.e. the slowest host's time raised by hosts near it. A
// round ends when its last host does, and hosts' times vary round to
// round: two hosts both near the bound end later, on average, than one
// alone, which the max (Eq. 10) does not see. ADLB's optimum leaves the
// other hosts as far below the bound as the bound allows; a map from
// older readings can load a host to just under it, and the max calls
// the two maps equal. A host far below adds almost nothing (one at half
// the bound adds 1/16 to the sum of 4th powers, the bound's being 1), so
// fast hosts' swinging readings seldom move chunks. 0 as
// PredictedTransfer. O(S).
double MapCost(const std::vector<int64_t>& counts, const std::vector<double>& rate);

// The round model (docs/policy.md, "Round model"): one round of servers
// holding `counts` chunks at these host throughputs (by server, bytes/s),
// as lib/sim's sharded round runs it over the job's hosts, in s. Eq. 9
// counts each host's bytes; a round's end also depends on when they can
// move: a psd sends a segment back only once every worker pushed it, so
// every psd holding chunks adds its last segment to the tail each
// worker's downlink carries after the slowest push. 0 where the model
// does not cover the job: no chunk_bytes, a worker on a host with no
// psd (its link is not read), over kRoundModelPairsMax servers x
// workers (a round's flows), or sizes that differ. O(flows x hosts) per
// flow.
constexpr size_t kRoundModelPairsMax = 256;
double ModelRound(const PolicyJob& job, const std::vector<int64_t>& counts,
                  const std::vector<double>& rate);

// ADLB's map (`counts`, with probes) for these throughputs, or the map
// ADLB makes with some hosts left out, whichever the round model calls
// fastest: leaving out, greedily, the host whose removal shortens the
// modelled round most, while one does. Eq. 9 gives a host a few chunks
// wherever its bytes fit under the slowest host's; their last segment
// can cost more than they spare the others. `counts` itself where the
// round model does not cover the job. O(S^2) round models.
std::vector<int64_t> FastestByRound(const PolicyJob& job, const std::vector<double>& rate,
                                    const std::vector<int64_t>& counts);

// WLBS (docs/plan.md): the global batch split over the workers in
// proportion to their speeds (samples per compute second, each > 0), each
// 1 to batch_max, summing to workers x batch_size. O(W^2) worst case.
absl::StatusOr<std::vector<uint32_t>> WlbsBatches(const std::vector<double>& speed,
                                                  uint32_t batch_size, uint32_t batch_max);

// A worker's progress as it reports it (cumulative).
struct WorkerWork {
  int64_t samples = 0;
  double compute_s = 0;
};

struct PolicyJob {
  std::string job_id;
  uint32_t recovery_epoch = 0;
  std::string load_policy;  // average: the chunk map stays the even split
  std::string batch_policy = "equal";
  uint32_t batch_size = 1;
  uint32_t batch_max = 1;
  std::vector<std::string> workers;        // node ids by rank
  std::map<std::string, WorkerWork> work;  // by node id
  // Workers gone from the job (died or left): their share goes to the
  // others, each keeping one sample (a plan's batches cover every rank).
  std::set<std::string> gone;
  int64_t update_time_ms = 10'000;
  // How far back readings reach (MeasureWindowMs; 0: update_time_ms).
  int64_t measure_window_ms = 0;
  int64_t window_ms() const { return measure_window_ms > 0 ? measure_window_ms : update_time_ms; }
  double update_rate = 0.1;
  int64_t num_chunks = 0;
  int64_t probe_chunks = 1;  // chunks a psd keeps to stay measured
  // A chunk's bytes and the chunks per broadcast segment (0: one flow per
  // psd), for the round model; chunk_bytes 0: no round model (Eq. 9).
  double chunk_bytes = 0;
  int64_t segment_chunks = 0;
  std::vector<std::string> servers;  // node ids by server index
  // Every member's host (its data address's IP), by node id: the nodes
  // of one host share its access link.
  std::map<std::string, std::string> host_of;
  // `node`'s host; a node not in host_of is a host of its own.
  std::string HostOf(const std::string& node) const {
    auto it = host_of.find(node);
    return it != host_of.end() ? it->second : node;
  }
  // When every server had closed the first round of the loop's plan in
  // force (JobTable::PlanSettledMs; 0: not yet, or not said).
  int64_t plan_settled_ms = 0;
  // The round after that first one, the first the map itself sets, at its
  // slowest server, in ms (JobTable::PlanRoundMs; 0: not yet, or not said).
  double plan_round_ms = 0;
  // A recovery epoch that resumed under its checkpoint's plan: that plan
  // (version 1 of the epoch; chunk_server and worker_batches). Unset: the
  // even split.
  std::optional<v1::Policy> start;
};

// Each server's host throughput in bytes/s, for the load policies: the
// fastest link into or out of its host's nodes probed in the last
// job.window_ms(), or the most they received together in a short window of it,
// whichever is larger; only what was received at or after since_ms
// counts. A host none of whose servers holds a chunk in server_chunks
// (the map in force; null: every host holds some) is read over the last
// kIdlePeriods periods. Unavailable while a server's host has neither.
// `source`, when set, gets what each reading came from ("link FROM>TO"
// or "traffic"; PolicyDecision::server_throughput_source).
constexpr int64_t kIdlePeriods = 3;
absl::StatusOr<std::vector<double>> HostRates(const PolicyJob& job, const LinkTable& links,
                                              int64_t now_ms, int64_t since_ms = 0,
                                              const std::vector<int64_t>* server_chunks = nullptr,
                                              std::vector<std::string>* source = nullptr);

// A host whose psds hold fewer chunks than a probe's worth under the map
// in force (`chunks`: none, or too few for their flows to be timed) shows
// only its worker's flows: its pull from the psds that hold chunks and
// its pushes into them. Where its workers' pushes into those psds, in
// links probed since from_ms, came together to at least kFedShare of the
// fastest push each psd took from another host, its own link did not
// hold them, and it may be any faster: its rate is lifted to the fastest
// host's, so the next map gives it chunks and its link's own reading
// follows within a window (exploration: under ADLB the host left without
// chunks is the one read slowest, and read only through its peers it
// would stay so). Where they came clearly slower, its own link held them
// (a psd shares its downlink max-min: a sender gets what the others get
// unless its own link cannot carry it), and its reading stands. Returns
// the servers lifted. O(L log L + S^3).
//
// Pushes, not pulls: a psd paces its broadcast so that its flows to all
// workers end together (egress share, docs/congestion.md), so it sends a fast
// idle host as slowly as the slowest one, and pulls told the two apart
// only by chance. Sums over the psds, not each psd within update_rate:
// one probe of one pair then decided, and single probes of shares are
// tens of percent off. 3/4, not lower: a host held by its own link
// pushes at about its rate over the others', but into a psd whose
// downlink several senders share a slow host keeps up with its share,
// and a lower bar lifts it (docs/awareness.md).
//
// `own`, when given, gets the idle servers whose hosts' pushes came to
// under kOwnShare of the others': their own link held them, so their
// readings are their link's (DecideLoad reads them over a window, as a
// loaded host's, not over kIdlePeriods). `unmeasured`, when given, gets
// the idle servers not compared: no push of theirs, or none of another
// host's, into a psd with chunks since from_ms, or read as the fastest.
constexpr double kFedShare = 0.75;
constexpr double kOwnShare = 0.5;
std::vector<size_t> LiftFedHosts(const PolicyJob& job, const std::vector<int64_t>& chunks,
                                 const LinkTable& links, int64_t from_ms, std::vector<double>* rate,
                                 std::vector<size_t>* own = nullptr,
                                 std::vector<size_t>* unmeasured = nullptr);

// An idle host is read over kIdlePeriods (HostRates): its readings are
// what its peers let through, lower bounds that swing with them. One
// whose own link held its pushes (`own`, from LiftFedHosts) reads its
// link, and a drop of it must show within a window, as a loaded host's
// does: read over kIdlePeriods, a host whose link dropped while it was
// idle keeps its old rate, and the next map gives it chunks. Each such
// server's rate becomes its host's reading over the last window, where
// lower; none changes while some host has no reading in the window.
void ReadOwnLinks(const PolicyJob& job, const LinkTable& links, int64_t now_ms, int64_t since_ms,
                  const std::vector<size_t>& own, std::vector<double>* rate,
                  std::vector<std::string>* source = nullptr);

class PolicyLoop {
 public:
  // The history kept per job.
  static constexpr size_t kHistoryMax = 64;
  // A map's next decision waits for every server to close the map's
  // first round (PolicyJob::plan_settled_ms) and then a whole update
  // period of readings; servers that never say so are taken as settled
  // 2 periods after the map was issued once this many periods passed.
  static constexpr int64_t kSettleWaitPeriods = 5;

  // Between update periods the loop looks this often: a map is made as
  // soon as its readings allow (a period of the map in force, and a host
  // moved), not at the next period's tick, which would add up to a
  // period to every change. The batches, and the decisions kept for
  // psctl, stay once a period.
  static constexpr int64_t kLookMs = 250;

  // A map waits for a window of readings since the last host began to
  // move, but at most this many windows since the first did.
  static constexpr int64_t kMoveWaitWindows = 3;

  // A map checked against its own rounds: its first round of its own
  // (PolicyJob::plan_round_ms) over the round Eq. 9 predicted for it from
  // the readings it was made from. Where that ratio is over
  // kWrongMapFactor times the median of the maps before it (the newest
  // kRatiosMax not found wrong so), the readings were wrong (a change they had not caught
  // up with, an idle host's old rate), and its successor is decided once
  // without waiting for a period of readings or for moves to settle: its
  // rounds so far are of the map alone. The ratio, not the round: how
  // much of a round the transfer is depends on the job, and only the
  // same job's maps say what a right one costs. Once per map, so that a
  // round that was slow by chance costs at most one early look.
  static constexpr double kWrongMapFactor = 1.75;
  static constexpr size_t kRatiosMax = 8;

  // A new map is issued when MapCost predicts its round shorter than the
  // map in force's by more than this fraction of update_rate, not all of
  // it: both costs come from the same readings, so an error the readings
  // share cancels in their ratio, while a map that keeps a host near the
  // slowest one loaded shows a gain below update_rate at decision after
  // decision and stays for good, that much slower (docs/awareness.md).
  static constexpr double kMapGain = 0.4;

  // A new plan to issue (version > 1), or none: not due yet, the map in
  // force not measured for a whole period since it settled (below),
  // links not all measured (each psd's host needs a link probed, or
  // traffic received, within the last update period), or too little
  // changed. A job or recovery epoch it has not seen starts
  // from version 1 (job.start, or the even split). `why` says what happened (status).
  std::optional<v1::Policy> Tick(const PolicyJob& job, const LinkTable& links, int64_t now_ms);
  // Whether Tick would do anything for this job now (a new job or epoch,
  // or time to look again): callers gather a PolicyJob only then.
  bool Due(const std::string& job_id, uint32_t recovery_epoch, int64_t now_ms) const {
    return job_id != job_id_ || recovery_epoch != epoch_ || now_ms >= next_look_ms_;
  }

  // The job's plan in force at schedd (version 1 before any), and the
  // plans issued, oldest first.
  const v1::Policy& current() const { return current_; }
  const std::vector<v1::Policy>& history() const { return history_; }
  const std::string& job_id() const { return job_id_; }
  // The servers of that job, by index (node ids).
  const std::vector<std::string>& servers() const { return servers_; }
  // What the last Tick decided, for psctl policy show.
  const std::string& last_decision() const { return last_decision_; }
  // The latest decisions (at most kDecisionsMax), oldest first: one per
  // update period, one per plan issued and one per map kept with new
  // readings as its basis, with the host throughputs read.
  static constexpr size_t kDecisionsMax = 64;
  const std::deque<v1::PolicyDecision>& decisions() const { return decisions_; }

 private:
  // The chunk map's part of a decision: a new map in next (false: keep).
  bool DecideLoad(const PolicyJob& job, const LinkTable& links, int64_t now_ms, v1::Policy* next,
                  std::string* why);
  // Keeps the map in force with `rate` as its basis (current_ and next),
  // and marks the tick's decision as one to record.
  void Rebase(const std::vector<double>& rate, v1::Policy* next);
  // Whether the map in force ran over kWrongMapFactor and its early
  // decision is still to come (measures it first; `note` says why).
  bool WrongMap(const PolicyJob& job, std::string* note);
  // The batches' part: new worker_batches in next (false: keep).
  bool DecideBatches(const PolicyJob& job, v1::Policy* next, std::string* why);
  // Appends this tick's decision to decisions_.
  void Record(int64_t now_ms);

  std::string job_id_;
  std::vector<std::string> servers_;
  std::map<std::string, WorkerWork> work_seen_;  // at the last decision
  uint32_t epoch_ = 0;
  int64_t began_ms_ = 0;  // when the loop first saw this job or epoch
  // By server: the first look that found it moved from the plan's
  // throughput (0: not moving), and the first look since that found it
  // back within update_rate (0: not back). A move ends once the host has
  // read back within for a whole window.
  std::vector<int64_t> moved_at_ms_;
  std::vector<int64_t> back_at_ms_;
  // By server: the first look of those since that all found its idle
  // host fed (LiftFedHosts), or had nothing to compare (0: the last look
  // that compared did not find it fed). The host is lifted once it has
  // been found so at every such look, and by the pushes probed after the
  // first alone, or for over a window: the comparison takes each link at
  // its fastest probe in the window, so one fast probe of the slowest
  // host's pushes keeps it over kFedShare until that probe is a window
  // old, and a lift on it gives the slowest host chunks. A host that did
  // rise keeps its pushes fast, and stays lifted through looks with none
  // of them (a link is probed about once a round). Until lifted it counts
  // as a host that began to move when first found, and a map waits for
  // it past kMoveWaitWindows: it is decided, either way, within a window.
  std::vector<int64_t> fed_since_ms_;
  int64_t next_ms_ = 0;       // the next period's decision
  int64_t next_look_ms_ = 0;  // the next look (kLookMs)
  v1::Policy current_;
  std::vector<v1::Policy> history_;
  std::string last_decision_;
  std::vector<double> last_rates_;         // DecideLoad's host throughputs, this tick
  std::vector<std::string> last_sources_;  // and what each came from
  // DecideLoad kept the map and made this tick's readings its basis: the
  // next ticks compare with them, so the decision is recorded whenever it
  // comes, between periods too.
  bool rebased_ = false;
  std::deque<v1::PolicyDecision> decisions_;
  // The map in force against its rounds (kWrongMapFactor): Eq. 9's round
  // for it from the readings it was made from (0: not a map of this
  // loop), its first round's ratio to that (0: not measured yet),
  // whether it was wrong, whether its early decision was made, and the
  // ratios of the maps before it not found wrong.
  double map_predicted_ = 0;
  double map_ratio_ = 0;
  bool map_wrong_ = false;  // its ratio over kWrongMapFactor: not a norm
  bool map_redecided_ = false;
  std::deque<double> ratios_;
};

}  // namespace hetps

#endif  // HETPS_DAEMONS_SCHEDD_POLICY_LOOP_H_
