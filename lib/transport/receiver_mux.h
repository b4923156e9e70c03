// ReceiverMux: a Receiver that forwards to a replaceable target, so one
// long-lived Endpoint (a daemon's data address) serves one job after
// another. With no target, every flow is refused (counted as "unexpected"
// by the endpoint). Set() waits until no callback is running into the old
// target, so the caller may destroy it afterwards. An observer, when set,
// is told of every flow the target took to its end (link awareness).
// Thread-safe.
#ifndef HETPS_LIB_TRANSPORT_RECEIVER_MUX_H_
#define HETPS_LIB_TRANSPORT_RECEIVER_MUX_H_

#include "absl/synchronization/mutex.h"
#include "lib/transport/endpoint.h"

namespace hetps {
namespace transport {

class FlowObserver {
 public:
  virtual ~FlowObserver() = default;
  virtual void OnFlow(const Peer& from, const FlowResult& result) = 0;
};

class ReceiverMux final : public Receiver {
 public:
  // Not owned; must outlive its use here (until SetObserver(nullptr)).
  void SetObserver(FlowObserver* observer) {
    absl::WriterMutexLock lock(&mu_);
    observer_ = observer;
  }
  void Set(Receiver* target) {
    absl::WriterMutexLock lock(&mu_);
    target_ = target;
  }

  DropReason AcceptFlow(const Peer& from, const Header& first) override {
    absl::ReaderMutexLock lock(&mu_);
    return target_ != nullptr ? target_->AcceptFlow(from, first) : DropReason::kUnexpected;
  }
  void OnData(const Peer& from, const Header& h, const uint8_t* payload) override {
    absl::ReaderMutexLock lock(&mu_);
    if (target_ != nullptr) target_->OnData(from, h, payload);
  }
  void OnFlowDone(const Peer& from, const FlowResult& result) override {
    absl::ReaderMutexLock lock(&mu_);
    if (target_ == nullptr) return;
    target_->OnFlowDone(from, result);
    if (observer_ != nullptr) observer_->OnFlow(from, result);
  }

 private:
  absl::Mutex mu_;
  Receiver* target_ ABSL_GUARDED_BY(mu_) = nullptr;
  FlowObserver* observer_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_RECEIVER_MUX_H_
