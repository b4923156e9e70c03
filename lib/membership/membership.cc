#include "lib/membership/membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace hetps {

const char* NodeRoleName(NodeRole role) {
  switch (role) {
    case NodeRole::kScheduler:
      return "scheduler";
    case NodeRole::kServer:
      return "server";
    case NodeRole::kWorker:
      return "worker";
    case NodeRole::kUnspecified:
      break;
  }
  return "unspecified";
}

const char* NodeStateName(NodeState state) {
  switch (state) {
    case NodeState::kAlive:
      return "alive";
    case NodeState::kDead:
      return "dead";
    case NodeState::kLeft:
      return "left";
  }
  return "unknown";
}

MembershipSubscription::Result MembershipSubscription::Next(absl::Duration timeout,
                                                            MembershipEvent* event) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return closed_ || overflowed_ || !queue_.empty();
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (overflowed_) return Result::kOverflowed;
  if (!queue_.empty()) {
    *event = std::move(queue_.front());
    queue_.pop_front();
    return Result::kEvent;
  }
  return closed_ ? Result::kClosed : Result::kTimeout;
}

void MembershipSubscription::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

void MembershipSubscription::Push(const MembershipEvent& event) {
  absl::MutexLock lock(&mu_);
  if (closed_ || overflowed_) return;
  if (queue_.size() >= queue_max_) {
    // Dropping one event silently would leave the watcher with a wrong view;
    // fail it instead so it re-watches from a snapshot.
    overflowed_ = true;
    queue_.clear();
    return;
  }
  queue_.push_back(event);
}

Membership::Membership(Options options, const Clock* clock)
    : options_(options),
      clock_(clock),
      next_incarnation_(std::max<uint64_t>(1, options.first_incarnation)) {}

Membership::~Membership() { CloseWatchers(); }

bool Membership::MakeRoomLocked() {
  if (nodes_.size() < options_.nodes_max) return true;
  auto oldest = nodes_.end();
  for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
    if (it->second.state == NodeState::kAlive) continue;
    if (oldest == nodes_.end() || it->second.state_changed < oldest->second.state_changed) {
      oldest = it;
    }
  }
  if (oldest == nodes_.end()) return false;
  nodes_.erase(oldest);
  return true;
}

absl::StatusOr<uint64_t> Membership::Register(NodeRecord node) {
  if (node.node_id.empty()) return absl::InvalidArgumentError("node_id is empty");
  if (node.node_id.size() > options_.node_id_bytes_max) {
    return absl::InvalidArgumentError(
        absl::StrCat("node_id is longer than ", options_.node_id_bytes_max, " bytes"));
  }
  for (unsigned char c : node.node_id) {
    if (c <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError("node_id contains whitespace or control characters");
    }
  }
  if (node.role == NodeRole::kUnspecified) {
    return absl::InvalidArgumentError("role is unspecified");
  }
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node.node_id);
  // One live node per id. Another control address while the registered one
  // is alive is a second daemon with the same id (or this node restarted on
  // a new port before its old registration expired): refused, so the live
  // one keeps its incarnation. The same address is the same endpoint: the
  // old process is gone (ports are not shared), and it re-joins at once.
  if (it != nodes_.end() && it->second.state == NodeState::kAlive &&
      it->second.control_address != node.control_address) {
    ++counters_.conflicts;
    return absl::AlreadyExistsError(absl::StrCat(
        "node id '", node.node_id, "' is alive at ", it->second.control_address, " (incarnation ",
        it->second.incarnation, "); refused the registration from ", node.control_address,
        ": another daemon runs with this node id, or this node restarted before its old "
        "registration expired"));
  }
  if (it == nodes_.end() && !MakeRoomLocked()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("membership table is full (", options_.nodes_max, " live nodes)"));
  }
  absl::Time now = clock_->Now();
  node.incarnation = next_incarnation_++;
  if (options_.on_incarnation) options_.on_incarnation(next_incarnation_);
  node.state = NodeState::kAlive;
  node.registered = now;
  node.last_heartbeat = now;
  node.state_changed = now;
  nodes_[node.node_id] = node;
  ++counters_.registrations;
  PublishLocked(MembershipEventKind::kJoined, node);
  return node.incarnation;
}

absl::Status Membership::Heartbeat(const std::string& node_id, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) {
    ++counters_.rejected_heartbeats;
    return absl::NotFoundError(absl::StrCat("node '", node_id, "' is not registered"));
  }
  NodeRecord& n = it->second;
  if (n.incarnation != incarnation) {
    ++counters_.rejected_heartbeats;
    return absl::NotFoundError(absl::StrCat("node '", node_id, "' incarnation ", incarnation,
                                            " is stale (current ", n.incarnation, ")"));
  }
  if (n.state != NodeState::kAlive) {
    ++counters_.rejected_heartbeats;
    return absl::NotFoundError(
        absl::StrCat("node '", node_id, "' is ", NodeStateName(n.state), "; register again"));
  }
  n.last_heartbeat = clock_->Now();
  ++counters_.heartbeats;
  return absl::OkStatus();
}

absl::Status Membership::Deregister(const std::string& node_id, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end() || it->second.incarnation != incarnation) {
    return absl::NotFoundError(
        absl::StrCat("node '", node_id, "' incarnation ", incarnation, " is not registered"));
  }
  NodeRecord& n = it->second;
  if (n.state != NodeState::kAlive) return absl::OkStatus();  // idempotent
  n.state = NodeState::kLeft;
  n.state_changed = clock_->Now();
  ++counters_.departures;
  PublishLocked(MembershipEventKind::kLeft, n);
  return absl::OkStatus();
}

int Membership::Expire() {
  absl::MutexLock lock(&mu_);
  absl::Time now = clock_->Now();
  absl::Duration limit = options_.heartbeat_interval * options_.dead_after_missed;
  int died = 0;
  for (auto& [id, n] : nodes_) {
    if (n.state != NodeState::kAlive || !n.expires) continue;
    if (now - n.last_heartbeat >= limit) {
      n.state = NodeState::kDead;
      n.state_changed = now;
      ++counters_.deaths;
      ++died;
      PublishLocked(MembershipEventKind::kDied, n);
    }
  }
  return died;
}

void Membership::PublishLocked(MembershipEventKind kind, const NodeRecord& node) {
  ++version_;
  MembershipEvent event;
  event.kind = kind;
  event.version = version_;
  event.node = node;
  for (const auto& w : watchers_) {
    w->Push(event);
  }
  // Forget watchers that overflowed; they learn it from Next().
  uint64_t overflowed = 0;
  auto gone = std::remove_if(watchers_.begin(), watchers_.end(), [&overflowed](const auto& w) {
    absl::MutexLock wl(&w->mu_);
    if (w->overflowed_) ++overflowed;
    return w->overflowed_ || w->closed_;
  });
  watchers_.erase(gone, watchers_.end());
  counters_.watch_overflows += overflowed;
}

std::vector<NodeRecord> Membership::List(bool include_departed) const {
  absl::MutexLock lock(&mu_);
  std::vector<NodeRecord> out;
  out.reserve(nodes_.size());
  for (const auto& [id, n] : nodes_) {
    if (include_departed || n.state == NodeState::kAlive) out.push_back(n);
  }
  return out;
}

absl::optional<NodeRecord> Membership::Get(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return absl::nullopt;
  return it->second;
}

uint64_t Membership::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

Membership::Counters Membership::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

std::shared_ptr<MembershipSubscription> Membership::Watch(std::vector<NodeRecord>* snapshot,
                                                          uint64_t* snapshot_version) {
  absl::MutexLock lock(&mu_);
  auto sub =
      std::shared_ptr<MembershipSubscription>(new MembershipSubscription(options_.watch_queue_max));
  snapshot->clear();
  for (const auto& [id, n] : nodes_) snapshot->push_back(n);
  *snapshot_version = version_;
  watchers_.push_back(sub);
  return sub;
}

void Membership::Unwatch(const std::shared_ptr<MembershipSubscription>& sub) {
  sub->Close();
  absl::MutexLock lock(&mu_);
  watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), sub), watchers_.end());
}

void Membership::CloseWatchers() {
  absl::MutexLock lock(&mu_);
  for (const auto& w : watchers_) w->Close();
  watchers_.clear();
}

}  // namespace hetps
