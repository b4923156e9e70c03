// A trained model as a safetensors file (lib/storage/safetensors.h): the
// model's tensors by name ("dense1.weight", ...) and shape, and metadata
// naming the format, the model and the dataset it was trained on. What
// `hetps-train --save` writes and `--eval` reads back.
#ifndef HETPS_LIB_JOB_MODEL_FILE_H_
#define HETPS_LIB_JOB_MODEL_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/storage/safetensors.h"
#include "lib/train/model.h"

namespace hetps {

constexpr char kModelFileFormat[] = "hetps-model-1";

struct ModelFileInfo {
  std::string model;    // a built-in model name
  std::string dataset;  // the directory it was trained on
  std::string job;      // the job's name
};

// Writes `params` (model.num_params() floats) as `model`'s tensors.
absl::Status SaveModelFile(const std::string& path, const train::Model& model,
                           const std::vector<float>& params, const ModelFileInfo& info);

struct ModelFile {
  ModelFileInfo info;
  storage::SafetensorsFile tensors;
};

// A model file, read once: its metadata (which model to build) and its
// tensors. InvalidArgument for a safetensors file not in this format.
absl::StatusOr<ModelFile> ReadModelFile(const std::string& path);

// The flat parameter vector of `model` from `tensors` (read from `path`,
// named in errors): every tensor of the model present with its shape,
// nothing else; InvalidArgument naming the first difference.
absl::StatusOr<std::vector<float>> ModelParams(const storage::SafetensorsFile& tensors,
                                               const train::Model& model, const std::string& path);

// ModelParams of the safetensors file at `path` (any metadata).
absl::StatusOr<std::vector<float>> LoadModelFile(const std::string& path,
                                                 const train::Model& model);

}  // namespace hetps

#endif  // HETPS_LIB_JOB_MODEL_FILE_H_
