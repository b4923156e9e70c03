// What psd and workerd keep of jobs on disk, and hetps.v1.Artifacts, the
// service psctl fetches it with (docs/psctl.md: job export, checkpoint).
//
// - Models: workerd (rank 0 of a job) writes the final parameters of each
//   job that succeeds to <model_dir>/<job_id>.safetensors (a model file,
//   lib/job/model_file.h), keeping the newest model_keep files.
// - Checkpoints: psd answers ListCheckpoints from its checkpoint store.
//
// GetModel is for admins (the model is what the job produced);
// ListCheckpoints for any authenticated identity. Job ids from a request
// are checked before they name a file. Thread-safe.
#ifndef HETPS_LIB_DAEMON_ARTIFACTS_H_
#define HETPS_LIB_DAEMON_ARTIFACTS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/daemon/node_runtime.h"
#include "lib/job/model_file.h"
#include "proto/hetps/v1/admin.grpc.pb.h"

namespace hetps {

// Writes `params` as `model`'s file for `job_id` in `dir` (created if
// missing; written to a temporary name and renamed), then removes the
// oldest model files beyond `keep`. Returns the path.
absl::StatusOr<std::string> SaveJobModel(const std::string& dir, const std::string& job_id,
                                         const train::Model& model,
                                         const std::vector<float>& params,
                                         const ModelFileInfo& info, size_t keep);

// The path of `job_id`'s model in `dir`: InvalidArgument for an id that is
// not a plain name, NotFound when there is none.
absl::StatusOr<std::string> JobModelPath(const std::string& dir, const std::string& job_id);

class ArtifactsService final : public v1::Artifacts::Service {
 public:
  using CheckpointLister =
      std::function<grpc::Status(const std::string& job_id, v1::ListCheckpointsResponse* out)>;
  // `model_dir`: where this node's models are (empty: it keeps none).
  // `checkpoints`: psd's lister (null: this node keeps none).
  ArtifactsService(const NodeRuntime* runtime, std::string model_dir, CheckpointLister checkpoints);

  grpc::Status GetModel(grpc::ServerContext* ctx, const v1::GetModelRequest* req,
                        grpc::ServerWriter<v1::ModelChunk>* out) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* ctx, const v1::ListCheckpointsRequest* req,
                               v1::ListCheckpointsResponse* out) override;

 private:
  const NodeRuntime* const runtime_;
  const std::string model_dir_;
  const CheckpointLister checkpoints_;
};

}  // namespace hetps

#endif  // HETPS_LIB_DAEMON_ARTIFACTS_H_
