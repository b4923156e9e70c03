// Model files: a model's parameters saved and loaded back are identical;
// a file of another model, or one with a tensor reshaped, is refused
// naming the difference.
#include "lib/job/model_file.h"

#include <catch2/catch.hpp>

#include "lib/base/test_dir.h"
#include "lib/storage/safetensors.h"
#include "lib/train/backend.h"

namespace hetps {
namespace {

// Files of this test, in one fresh directory.
std::string TempPath(const std::string& name) {
  static const std::string dir = MakeTestDir("model-file");
  return dir + "/" + name;
}

std::unique_ptr<train::Model> Build(const std::string& name, train::Backend* backend) {
  auto spec = train::BuiltinModel(name);
  REQUIRE(spec.ok());
  auto m = train::Model::Create(*spec, backend, 4);
  REQUIRE(m.ok());
  return std::move(*m);
}

TEST_CASE("a saved model loads back bit for bit, with its metadata", "[model_file]") {
  std::unique_ptr<train::Backend> cpu = train::NewCpuBackend();
  auto model = Build("lenet5", cpu.get());
  const std::vector<float> params = model->InitialParameters(7);
  const std::string path = TempPath("lenet5.safetensors");
  REQUIRE(SaveModelFile(path, *model, params, {"lenet5", "/data/fm", "job-a"}).ok());
  auto file = ReadModelFile(path);
  REQUIRE(file.ok());
  const ModelFileInfo* info = &file->info;
  CHECK(info->model == "lenet5");
  CHECK(info->dataset == "/data/fm");
  CHECK(info->job == "job-a");
  auto back = LoadModelFile(path, *model);
  REQUIRE(back.ok());
  CHECK(*back == params);
}

TEST_CASE("another model's file, or a reshaped tensor, is refused", "[model_file]") {
  std::unique_ptr<train::Backend> cpu = train::NewCpuBackend();
  auto mlp = Build("mlp", cpu.get());
  auto lenet = Build("lenet5", cpu.get());
  const std::string path = TempPath("mlp.safetensors");
  REQUIRE(SaveModelFile(path, *mlp, mlp->InitialParameters(1), {"mlp", "", ""}).ok());
  CHECK(LoadModelFile(path, *lenet).status().code() == absl::StatusCode::kInvalidArgument);

  auto f = storage::ReadSafetensors(path);
  REQUIRE(f.ok());
  std::swap(f->tensors[0].shape[0], f->tensors[0].shape[1]);  // transposed
  const std::string bad = TempPath("mlp-t.safetensors");
  REQUIRE(storage::WriteSafetensors(bad, *f).ok());
  auto r = LoadModelFile(bad, *mlp);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(r.status().message()).find("shape") != std::string::npos);
  CHECK(ReadModelFile(TempPath("nothing")).status().code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace hetps
