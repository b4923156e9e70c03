#include "lib/job/model_file.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/status_macros.h"

namespace hetps {

absl::Status SaveModelFile(const std::string& path, const train::Model& model,
                           const std::vector<float>& params, const ModelFileInfo& info) {
  if (params.size() != model.num_params()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model file: ", params.size(), " parameters for a model of ", model.num_params()));
  }
  storage::SafetensorsFile f;
  f.metadata = {{"format", kModelFileFormat},
                {"model", info.model},
                {"dataset", info.dataset},
                {"job", info.job}};
  for (const train::TensorInfo& t : model.tensors()) {
    storage::NamedTensor nt;
    nt.name = t.name;
    nt.shape.assign(t.shape.begin(), t.shape.end());
    nt.data.assign(params.begin() + t.offset, params.begin() + t.offset + t.size);
    f.tensors.push_back(std::move(nt));
  }
  return storage::WriteSafetensors(path, f);
}

absl::StatusOr<ModelFile> ReadModelFile(const std::string& path) {
  ModelFile mf;
  ASSIGN_OR_RETURN(mf.tensors, storage::ReadSafetensors(path));
  auto& meta = mf.tensors.metadata;
  if (meta["format"] != kModelFileFormat) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a hetps model file (format '",
                                                   meta["format"], "', want '", kModelFileFormat,
                                                   "')"));
  }
  mf.info = ModelFileInfo{meta["model"], meta["dataset"], meta["job"]};
  return mf;
}

absl::StatusOr<std::vector<float>> ModelParams(const storage::SafetensorsFile& tensors,
                                               const train::Model& model, const std::string& path) {
  std::map<std::string, const storage::NamedTensor*> by_name;
  for (const storage::NamedTensor& t : tensors.tensors) by_name[t.name] = &t;
  if (by_name.size() != model.tensors().size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", by_name.size(), " tensors, the model has ", model.tensors().size()));
  }
  std::vector<float> params(model.num_params());
  for (const train::TensorInfo& t : model.tensors()) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": no tensor ", t.name));
    }
    const std::vector<int64_t> want(t.shape.begin(), t.shape.end());
    if (it->second->shape != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", t.name, " has shape [", absl::StrJoin(it->second->shape, ","),
          "], the model [", absl::StrJoin(want, ","), "]"));
    }
    std::copy(it->second->data.begin(), it->second->data.end(), params.begin() + t.offset);
  }
  return params;
}

absl::StatusOr<std::vector<float>> LoadModelFile(const std::string& path,
                                                 const train::Model& model) {
  ASSIGN_OR_RETURN(storage::SafetensorsFile tensors, storage::ReadSafetensors(path));
  return ModelParams(tensors, model, path);
}

}  // namespace hetps
