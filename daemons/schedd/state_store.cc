#include "daemons/schedd/state_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/storage/record.h"
#include "lib/storage/rocks_status.h"

namespace hetps {
namespace {

constexpr char kFormatKey[] = "format";
constexpr char kFormat[] = "hetps-schedd-state-1";
constexpr char kCountersKey[] = "counters";
constexpr char kJobPrefix[] = "j/";

std::string JobKey(uint64_t seq) { return absl::StrFormat("%s%016x", kJobPrefix, seq); }

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  return storage::RocksStatus(s, "schedd state: " + what);
}

// The payload of a record of `kind` in `value`, or why not.
absl::StatusOr<std::string_view> Payload(std::string_view value, storage::RecordKind kind) {
  if (value.size() > kJobRecordBytesMax + storage::kRecordHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(value.size(), " bytes: too large"));
  }
  ASSIGN_OR_RETURN(storage::RecordView r, storage::DecodeRecord(value));
  if (r.kind != kind) return absl::InvalidArgumentError("a record of another kind");
  return r.payload;
}

template <typename Message>
absl::Status Parse(std::string_view value, storage::RecordKind kind, Message* out) {
  ASSIGN_OR_RETURN(std::string_view payload, Payload(value, kind));
  if (!out->ParseFromArray(payload.data(), int(payload.size()))) {
    return absl::InvalidArgumentError("not a valid protobuf message");
  }
  return absl::OkStatus();
}

}  // namespace

ScheddStore::ScheddStore(std::string dir, rocksdb::DB* db) : dir_(std::move(dir)), db_(db) {}

ScheddStore::~ScheddStore() = default;

absl::StatusOr<std::unique_ptr<ScheddStore>> ScheddStore::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("schedd state: cannot create ", dir, ": ", ec.message()));
  }
  rocksdb::Options o;
  o.create_if_missing = true;
  o.max_open_files = 64;
  o.keep_log_file_num = 2;
  rocksdb::DB* db = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(o, dir, &db), "open " + dir));
  std::unique_ptr<ScheddStore> store(new ScheddStore(dir, db));
  std::string format;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), kFormatKey, &format);
  if (s.IsNotFound()) {
    rocksdb::WriteOptions w;
    w.sync = true;
    RETURN_IF_ERROR(FromRocks(db->Put(w, kFormatKey, kFormat), "write format"));
  } else {
    RETURN_IF_ERROR(FromRocks(s, "read format"));
    if (format != kFormat) {
      return absl::FailedPreconditionError(absl::StrCat("schedd state in ", dir, " is of format '",
                                                        format.substr(0, 64),
                                                        "', this schedd reads '", kFormat, "'"));
    }
  }
  return store;
}

absl::StatusOr<ScheddStore::Loaded> ScheddStore::Load() {
  Loaded out;
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kCountersKey, &value);
  if (!s.IsNotFound()) {
    RETURN_IF_ERROR(FromRocks(s, "read counters"));
    // Counters that cannot be read would let ids repeat: refuse to start.
    absl::Status p = Parse(value, storage::RecordKind::kSchedulerCounters, &out.counters);
    if (!p.ok()) {
      return absl::DataLossError(absl::StrCat("schedd state in ", dir_, ": counters: ", p.message(),
                                              " (move the directory away to start "
                                              "afresh)"));
    }
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(kJobPrefix); it->Valid() && it->key().starts_with(kJobPrefix); it->Next()) {
    const std::string key = it->key().ToString();
    v1::JobRecord job;
    absl::Status p = Parse(std::string_view(it->value().data(), it->value().size()),
                           storage::RecordKind::kSchedulerJob, &job);
    if (p.ok() && JobKey(job.seq()) != key)
      p = absl::InvalidArgumentError("filed under another key");
    if (!p.ok()) {
      out.skipped.push_back(absl::StrCat(key, ": ", p.message()));
      continue;
    }
    out.jobs.push_back(std::move(job));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "read jobs"));
  return out;
}

absl::Status ScheddStore::PutJob(const v1::JobRecord& job, bool sync) {
  const std::string payload = job.SerializeAsString();
  if (payload.size() > kJobRecordBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedd state: job record of ", payload.size(), " bytes"));
  }
  rocksdb::WriteOptions w;
  w.sync = sync;
  return FromRocks(db_->Put(w, JobKey(job.seq()),
                            storage::EncodeRecord(storage::RecordKind::kSchedulerJob, payload)),
                   "write job");
}

absl::Status ScheddStore::DeleteJob(uint64_t seq) {
  return FromRocks(db_->Delete(rocksdb::WriteOptions(), JobKey(seq)), "delete job");
}

absl::Status ScheddStore::PutCounters(const v1::ScheddCounters& counters) {
  rocksdb::WriteOptions w;
  w.sync = true;
  return FromRocks(db_->Put(w, kCountersKey,
                            storage::EncodeRecord(storage::RecordKind::kSchedulerCounters,
                                                  counters.SerializeAsString())),
                   "write counters");
}

}  // namespace hetps
