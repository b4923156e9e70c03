// Test only: a RocksDB file system that fails or holds file creation on
// demand (what a full disk, a directory gone read-only or a slow disk does
// to a write), over the real one; and bit rot in a file at rest.
#ifndef HETPS_LIB_STORAGE_TEST_FS_H_
#define HETPS_LIB_STORAGE_TEST_FS_H_

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"

namespace hetps {
namespace storage {

// Flips one bit of the byte a third of the way into `path` (in a table
// file: inside its data blocks).
inline void FlipByte(const std::string& path) {
  const auto at = std::streamoff(std::filesystem::file_size(path) / 3);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char b = 0;
  f.read(&b, 1);
  b ^= 0x20;
  f.seekp(at);
  f.write(&b, 1);
}

class FaultyDisk : public rocksdb::FileSystemWrapper {
 public:
  enum Fault { kNone, kNoSpace, kIoError, kHold };
  explicit FaultyDisk(const std::shared_ptr<rocksdb::FileSystem>& base) : FileSystemWrapper(base) {}
  const char* Name() const override { return "FaultyDisk"; }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    if (fault == kNoSpace) return rocksdb::IOStatus::NoSpace("injected: no space left on device");
    if (fault == kIoError) return rocksdb::IOStatus::IOError("injected: read-only file system");
    if (fault == kHold) {
      // The first file created while holding: say so, wait for release.
      if (!held.HasBeenNotified()) held.Notify();
      release.WaitForNotification();
    }
    return target()->NewWritableFile(f, o, r, d);
  }
  std::atomic<Fault> fault{kNone};
  absl::Notification held;     // a creation is being held
  absl::Notification release;  // let it (and all later ones) go
};

// A FaultyDisk over the real file system, and the RocksDB Env to open a
// store with (CheckpointStoreConfig::env).
struct FaultyEnv {
  FaultyEnv()
      : disk(std::make_shared<FaultyDisk>(rocksdb::FileSystem::Default())),
        env(rocksdb::NewCompositeEnv(disk)) {}
  std::shared_ptr<FaultyDisk> disk;
  std::unique_ptr<rocksdb::Env> env;
};

}  // namespace storage
}  // namespace hetps

#endif  // HETPS_LIB_STORAGE_TEST_FS_H_
