#include "lib/daemon/artifacts.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/rpc/grpc_util.h"
#include "lib/storage/checkpoint_store.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;

constexpr char kSuffix[] = ".safetensors";
constexpr size_t kChunkBytes = 1 << 20;

}  // namespace

absl::StatusOr<std::string> JobModelPath(const std::string& dir, const std::string& job_id) {
  RETURN_IF_ERROR(storage::ValidateJobId(job_id));  // a plain name, never a path
  if (dir.empty()) return absl::NotFoundError("this node keeps no models (its model_dir is empty)");
  const std::string path = absl::StrCat(dir, "/", job_id, kSuffix);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat("no model of job ", job_id, " here"));
  }
  return path;
}

absl::StatusOr<std::string> SaveJobModel(const std::string& dir, const std::string& job_id,
                                         const train::Model& model,
                                         const std::vector<float>& params,
                                         const ModelFileInfo& info, size_t keep) {
  RETURN_IF_ERROR(storage::ValidateJobId(job_id));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string path = absl::StrCat(dir, "/", job_id, kSuffix);
  RETURN_IF_ERROR(SaveModelFile(path, model, params, info));
  // The newest `keep` stay, so that job after job does not fill the disk.
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && e.path().extension() == kSuffix) {
      files.push_back({e.last_write_time(ec), e.path()});
    }
  }
  std::sort(files.rbegin(), files.rend());
  for (size_t i = std::max<size_t>(keep, 1); i < files.size(); ++i) {
    if (files[i].second != fs::path(path)) fs::remove(files[i].second, ec);
  }
  return path;
}

ArtifactsService::ArtifactsService(const NodeRuntime* runtime, std::string model_dir,
                                   CheckpointLister checkpoints)
    : runtime_(runtime), model_dir_(std::move(model_dir)), checkpoints_(std::move(checkpoints)) {}

grpc::Status ArtifactsService::GetModel(grpc::ServerContext* ctx, const v1::GetModelRequest* req,
                                        grpc::ServerWriter<v1::ModelChunk>* out) {
  if (grpc::Status a = runtime_->authorizer().RequireAdmin(ctx, "Artifacts.GetModel"); !a.ok()) {
    return a;
  }
  absl::StatusOr<std::string> path = JobModelPath(model_dir_, req->job_id());
  if (!path.ok()) return ToGrpcStatus(path.status());
  std::ifstream in(*path, std::ios::binary);
  std::error_code ec;
  const uint64_t total = fs::file_size(*path, ec);
  if (!in || ec) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "cannot read " + *path);
  v1::ModelChunk chunk;
  chunk.set_total_bytes(total);
  std::string buf(kChunkBytes, '\0');
  uint64_t sent = 0;
  while (sent < total) {
    in.read(buf.data(), std::streamsize(std::min<uint64_t>(kChunkBytes, total - sent)));
    const std::streamsize n = in.gcount();
    if (n <= 0) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "short read of " + *path);
    chunk.set_data(buf.data(), size_t(n));
    if (!out->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    sent += uint64_t(n);
  }
  return grpc::Status::OK;
}

grpc::Status ArtifactsService::ListCheckpoints(grpc::ServerContext* ctx,
                                               const v1::ListCheckpointsRequest* req,
                                               v1::ListCheckpointsResponse* out) {
  if (grpc::Status a = runtime_->authorizer().RequireAny(ctx, "Artifacts.ListCheckpoints");
      !a.ok()) {
    return a;
  }
  if (!checkpoints_) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "this node keeps no checkpoints (psd does)");
  }
  if (!req->job_id().empty()) {
    if (absl::Status v = storage::ValidateJobId(req->job_id()); !v.ok()) return ToGrpcStatus(v);
  }
  return checkpoints_(req->job_id(), out);
}

}  // namespace hetps
