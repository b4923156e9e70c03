// Membership: schedd's table of cluster nodes and the liveness rules.
//
// A node registers (new incarnation, ALIVE), heartbeats, and either leaves
// (Deregister -> LEFT) or goes silent: Expire() marks a node DEAD once
// dead_after_missed heartbeat intervals passed since its last heartbeat. A
// restarted node registers again under the same node_id and is ALIVE with a
// higher incarnation. Every change bumps version() and is pushed to watchers.
//
// Watchers: Watch() returns a snapshot and a subscription taken atomically,
// so a watcher sees every change after its snapshot exactly once. Each
// subscription has a bounded queue (watch_queue_max); one that overflows is
// closed (the watcher must re-watch and gets a fresh snapshot) rather than
// blocking membership or growing without bound.
//
// No I/O, no protobuf. Time comes from the injected Clock. Thread-safe.
#ifndef HETPS_LIB_MEMBERSHIP_MEMBERSHIP_H_
#define HETPS_LIB_MEMBERSHIP_MEMBERSHIP_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/optional.h"
#include "lib/base/clock.h"

namespace hetps {

enum class NodeRole { kUnspecified, kScheduler, kServer, kWorker };
enum class NodeState { kAlive, kDead, kLeft };

const char* NodeRoleName(NodeRole role);     // "scheduler" | "server" | "worker"
const char* NodeStateName(NodeState state);  // "alive" | "dead" | "left"

struct GpuInfo {
  uint32_t index = 0;
  std::string name;
  uint64_t memory_bytes = 0;
  uint32_t compute_capability = 0;
};

struct Capabilities {
  std::string hostname;
  uint32_t cpu_cores = 0;
  uint64_t memory_bytes = 0;
  std::vector<GpuInfo> gpus;
  uint32_t nccl_version = 0;
};

struct NodeRecord {
  std::string node_id;
  NodeRole role = NodeRole::kUnspecified;
  NodeState state = NodeState::kAlive;
  std::string control_address;
  std::string data_address;
  std::string metrics_address;
  std::string version;
  Capabilities capabilities;
  uint64_t incarnation = 0;
  absl::Time registered;
  absl::Time last_heartbeat;
  absl::Time state_changed;
  // False for schedd's own entry: it cannot miss its own heartbeats.
  bool expires = true;
};

enum class MembershipEventKind { kSnapshot, kJoined, kDied, kLeft };

struct MembershipEvent {
  MembershipEventKind kind = MembershipEventKind::kJoined;
  uint64_t version = 0;
  NodeRecord node;                   // for kJoined / kDied / kLeft
  std::vector<NodeRecord> snapshot;  // for kSnapshot
};

class Membership;

// One watcher's queue. Obtained from Membership::Watch(); the watcher thread
// calls Next() in a loop. Thread-safe.
class MembershipSubscription {
 public:
  enum class Result { kEvent, kTimeout, kClosed, kOverflowed };

  // Waits up to `timeout` for the next event.
  Result Next(absl::Duration timeout, MembershipEvent* event);
  // Wakes Next() and makes it return kClosed from now on.
  void Close();

 private:
  friend class Membership;
  explicit MembershipSubscription(size_t queue_max) : queue_max_(queue_max) {}
  // Called by Membership with its lock held.
  void Push(const MembershipEvent& event);

  const size_t queue_max_;
  absl::Mutex mu_;
  std::deque<MembershipEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
};

class Membership {
 public:
  struct Options {
    absl::Duration heartbeat_interval = absl::Milliseconds(500);
    // A node is DEAD when this many intervals passed without a heartbeat.
    int dead_after_missed = 3;
    // Bound on the table (live + departed); departed entries are evicted
    // oldest first to make room, live ones never.
    size_t nodes_max = 10000;
    size_t watch_queue_max = 1024;
    size_t node_id_bytes_max = 128;
    // Incarnations start here (a restarted schedd: past every one it handed
    // out before), and each registration reports the next one, under the
    // table's lock, before the node learns its incarnation (schedd saves
    // it). Optional.
    uint64_t first_incarnation = 1;
    std::function<void(uint64_t next_incarnation)> on_incarnation;
  };

  struct Counters {
    uint64_t registrations = 0;
    uint64_t heartbeats = 0;
    uint64_t rejected_heartbeats = 0;
    uint64_t deaths = 0;
    uint64_t departures = 0;
    uint64_t watch_overflows = 0;
    uint64_t conflicts = 0;  // registrations refused: the id is alive elsewhere
  };

  Membership(Options options, const Clock* clock);
  ~Membership();

  // Adds or re-adds `node` (node_id, role and addresses are taken from it;
  // incarnation, state and times are assigned). Returns the new incarnation.
  // Errors: INVALID_ARGUMENT for a bad node_id or role, RESOURCE_EXHAUSTED
  // when the table is full of live nodes.
  absl::StatusOr<uint64_t> Register(NodeRecord node);
  // NOT_FOUND when the node is unknown, departed or of another incarnation:
  // the caller should register again.
  absl::Status Heartbeat(const std::string& node_id, uint64_t incarnation);
  absl::Status Deregister(const std::string& node_id, uint64_t incarnation);
  // Marks silent nodes DEAD; returns how many died. Call periodically (much
  // more often than the heartbeat interval so detection stays prompt).
  int Expire();

  std::vector<NodeRecord> List(bool include_departed) const;
  absl::optional<NodeRecord> Get(const std::string& node_id) const;
  uint64_t version() const;
  Counters counters() const;
  const Options& options() const { return options_; }

  // Snapshot + subscription, atomically. The snapshot lists departed nodes
  // too. The subscription is closed by Membership's destructor or Close().
  std::shared_ptr<MembershipSubscription> Watch(std::vector<NodeRecord>* snapshot,
                                                uint64_t* snapshot_version);
  void Unwatch(const std::shared_ptr<MembershipSubscription>& sub);
  // Closes every subscription (schedd shutdown).
  void CloseWatchers();

 private:
  void PublishLocked(MembershipEventKind kind, const NodeRecord& node)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MakeRoomLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const Clock* const clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, NodeRecord> nodes_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_incarnation_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<MembershipSubscription>> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hetps

#endif  // HETPS_LIB_MEMBERSHIP_MEMBERSHIP_H_
