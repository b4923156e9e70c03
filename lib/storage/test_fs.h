// Test only: a RocksDB file system that fails or holds file creation on
// demand (what a full disk, a directory gone read-only or a slow disk does
// to a write), over the real one.
#ifndef HETPS_LIB_STORAGE_TEST_FS_H_
#define HETPS_LIB_STORAGE_TEST_FS_H_

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"

namespace hetps {
namespace storage {

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
