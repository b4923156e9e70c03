// checkpoint_bench: what one psd checkpoint costs against writing its bytes
// to a plain file. The checkpoint is one psd's half of mlp-wide by default
// (2.9 M parameters and their SGD momentum, in 64 Ki-float chunks: 23 MB);
// the baseline writes the same bytes with write(2) and fdatasync(2) in the
// same run. Prints the median over --repeats of each, their ratio, and the
// store's read-back time.
//
//   bazel run --config=opt //bench:checkpoint_bench -- [--floats N] [--repeats N] [--dir D]
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/storage/checkpoint_store.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool WriteFile(const std::string& path, const std::vector<hetps::storage::ChunkState>& chunks) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = true;
  auto put = [&](const std::vector<float>& v) {
    const char* p = reinterpret_cast<const char*>(v.data());
    size_t left = v.size() * sizeof(float);
    while (ok && left > 0) {
      const ssize_t n = write(fd, p, left);
      if (n <= 0) {
        ok = false;
      } else {
        p += n;
        left -= size_t(n);
      }
    }
  };
  for (const auto& ch : chunks) {
    put(ch.params);
    for (const auto& s : ch.slots) put(s);
  }
  ok = ok && fdatasync(fd) == 0;
  close(fd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  size_t floats = 2912261;  // mlp-wide's 5824522 parameters over 2 psd
  size_t chunk_floats = 65536;
  int repeats = 7;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--floats" && i + 1 < argc) {
      floats = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: checkpoint_bench [--floats N] [--repeats N] [--dir D]\n");
      return 2;
    }
  }
  if (dir.empty()) {
    std::string t = "/tmp/hetps-ckpt-bench.XXXXXX";
    if (mkdtemp(t.data()) == nullptr) return 1;
    dir = t;
  }
  hetps::storage::Checkpoint c;
  c.job_id = "bench";
  c.spec = "model: mlp-wide\n";
  for (size_t off = 0; off < floats; off += chunk_floats) {
    hetps::storage::ChunkState ch;
    ch.chunk_id = uint32_t(off / chunk_floats);
    ch.offset = off;
    ch.params.resize(std::min(chunk_floats, floats - off));
    for (size_t i = 0; i < ch.params.size(); ++i) ch.params[i] = float(off + i) * 1e-6f;
    ch.slots.push_back(ch.params);
    c.chunks.push_back(std::move(ch));
  }
  const double mb = double(floats) * 2 * sizeof(float) / 1e6;
  hetps::storage::CheckpointStoreConfig cfg;
  cfg.dir = dir + "/db";
  cfg.keep_last = 2;
  auto store = hetps::storage::CheckpointStore::Open(cfg);
  if (!store.ok()) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  std::vector<double> file_ms, store_ms, read_ms;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    if (!WriteFile(dir + "/plain", c.chunks)) {
      std::perror("checkpoint_bench: plain file");
      return 1;
    }
    auto t1 = Clock::now();
    c.round = uint64_t(r) + 1;
    const absl::Status s = (*store)->Write(c);
    auto t2 = Clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "checkpoint_bench: %s\n", s.ToString().c_str());
      return 1;
    }
    auto back = (*store)->ReadNewest(c.job_id, 0);
    auto t3 = Clock::now();
    if (!back.ok() || back->round != c.round) {
      std::fprintf(stderr, "checkpoint_bench: read back failed\n");
      return 1;
    }
    file_ms.push_back(Ms(t0, t1));
    store_ms.push_back(Ms(t1, t2));
    read_ms.push_back(Ms(t2, t3));
  }
  const double f = Median(file_ms), w = Median(store_ms), rd = Median(read_ms);
  std::printf("checkpoint: %.1f MB (%zu floats, 1 slot), %zu chunks, median of %d, %s\n", mb,
              floats, c.chunks.size(), repeats, dir.c_str());
  std::printf("%-28s %10s %10s\n", "", "ms", "MB/s");
  std::printf("%-28s %10.1f %10.0f\n", "plain file (write+fdatasync)", f, mb / f * 1e3);
  std::printf("%-28s %10.1f %10.0f\n", "CheckpointStore::Write", w, mb / w * 1e3);
  std::printf("%-28s %10.1f %10.0f\n", "CheckpointStore::ReadNewest", rd, mb / rd * 1e3);
  std::printf("write / plain file: %.2f\n", w / f);
  std::filesystem::remove_all(dir);
  return 0;
}
