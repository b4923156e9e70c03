#include "lib/storage/checkpoint_store.h"

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/status_macros.h"
#include "lib/storage/record.h"
#include "lib/storage/rocks_status.h"

namespace hetps {
namespace storage {
namespace {

// Keys (docs/storage-format.md): one checkpoint's keys are contiguous
//   c/<job>/<server %08x>/<round %016x>/c<chunk %08x>   chunk
//   c/<job>/<server %08x>/<round %016x>/m               meta
//   c/<job>/<server %08x>/<round %016x>/z               commit
// so each ingested table file covers a key range no other checkpoint
// overlaps: RocksDB places it without compacting anything.
std::string RoundPrefix(const std::string& job, uint32_t server, uint64_t round) {
  return absl::StrFormat("c/%s/%08x/%016x/", job, server, round);
}
std::string Key(char kind, const std::string& job, uint32_t server, uint64_t round) {
  return RoundPrefix(job, server, round) + kind;
}
std::string ChunkKey(const std::string& job, uint32_t server, uint64_t round, uint32_t chunk) {
  return absl::StrFormat("%sc%08x", RoundPrefix(job, server, round), chunk);
}
// The first key after every key of the round ('0' follows '/').
std::string RoundEnd(const std::string& job, uint32_t server, uint64_t round) {
  std::string p = RoundPrefix(job, server, round);
  p.back() = '0';
  return p;
}

// Parses `hex_digits` lowercase hex digits at the start of `s`.
bool ParseHex(std::string_view s, size_t hex_digits, uint64_t* out) {
  if (s.size() < hex_digits) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < hex_digits; ++i) {
    const char ch = s[i];
    const int d = (ch >= '0' && ch <= '9')   ? ch - '0'
                  : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                                             : -1;
    if (d < 0) return false;
    v = v * 16 + uint64_t(d);
  }
  *out = v;
  return true;
}

absl::Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  return storage::RocksStatus(s, "checkpoint store: " + what);
}

uint64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Sizes the payloads below fix (List reports a checkpoint's size from its
// meta record alone).
constexpr size_t kMetaEntryBytes = 4 + 8 + 8 + 1;  // chunk id, offset, floats, slots
constexpr size_t kCommitBytes = 8 + 4 + 4;         // round, chunks, chain
// A chunk record: header; id, offset, slot count; the parameters and each
// slot as a count and its floats.
uint64_t ChunkRecordBytes(uint64_t floats, uint64_t slots) {
  return kRecordHeaderBytes + 4 + 8 + 1 + (1 + slots) * (8 + 4 * floats);
}

struct MetaChunk {
  uint32_t chunk_id = 0;
  uint64_t offset = 0;
  uint64_t floats = 0;
  uint8_t slots = 0;
};

struct Meta {
  Checkpoint head;  // everything but the chunks' data
  std::vector<MetaChunk> chunks;
};

std::string MetaPayload(const Checkpoint& c) {
  ByteWriter w;
  w.String(c.job_id);
  w.U32(c.server_index);
  w.U64(c.round);
  w.U64(c.optimizer_steps);
  w.U64(c.written_unix_ms);
  w.String(c.spec);
  w.U32(static_cast<uint32_t>(c.chunks.size()));
  for (const ChunkState& ch : c.chunks) {
    w.U32(ch.chunk_id);
    w.U64(ch.offset);
    w.U64(ch.params.size());
    w.U8(static_cast<uint8_t>(ch.slots.size()));
  }
  // The plan, when there is one: an optional tail (older metas end above).
  const CheckpointPlan& p = c.plan;
  if (!p.empty()) {
    w.U32(p.num_servers);
    w.U32(static_cast<uint32_t>(p.chunk_server.size()));
    for (uint32_t o : p.chunk_server) w.U32(o);
    w.U32(static_cast<uint32_t>(p.worker_batch.size()));
    for (size_t k = 0; k < p.worker_batch.size(); ++k) {
      w.U32(p.worker_batch[k]);
      w.U64(p.worker_samples[k]);
    }
  }
  return w.Take();
}

absl::Status ValidatePlan(const CheckpointPlan& p) {
  if (p.empty()) {
    return p.chunk_server.empty() && p.worker_batch.empty() && p.worker_samples.empty()
               ? absl::OkStatus()
               : absl::InvalidArgumentError("plan: chunks or workers without servers");
  }
  if (p.num_servers > kPlanServersMax || p.chunk_server.size() > kChunksMax ||
      p.worker_batch.size() > kPlanWorkersMax || p.worker_batch.size() != p.worker_samples.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: ", p.num_servers, " servers, ", p.chunk_server.size(), " chunks, ",
        p.worker_batch.size(), " batches and ", p.worker_samples.size(), " sample counts"));
  }
  for (uint32_t o : p.chunk_server) {
    if (o >= p.num_servers) {
      return absl::InvalidArgumentError(absl::StrCat("plan: a chunk owned by server ", o));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Meta> ParseMeta(std::string_view payload) {
  ByteReader r(payload);
  Meta m;
  uint32_t n = 0;
  if (!r.String(&m.head.job_id, kJobIdBytesMax) || !r.U32(&m.head.server_index) ||
      !r.U64(&m.head.round) || !r.U64(&m.head.optimizer_steps) || !r.U64(&m.head.written_unix_ms) ||
      !r.String(&m.head.spec, kSpecBytesMax) || !r.U32(&n)) {
    return absl::DataLossError("checkpoint meta record truncated");
  }
  // The count is bounded by the entries the bytes can hold.
  if (n > kChunksMax || n > r.left() / kMetaEntryBytes) {
    return absl::DataLossError(absl::StrCat("checkpoint meta lists ", n, " chunks"));
  }
  m.chunks.resize(n);
  for (MetaChunk& ch : m.chunks) {
    if (!r.U32(&ch.chunk_id) || !r.U64(&ch.offset) || !r.U64(&ch.floats) || !r.U8(&ch.slots) ||
        ch.slots > kSlotsMax) {
      return absl::DataLossError("checkpoint meta chunk entry malformed");
    }
  }
  if (r.left() != 0) {
    CheckpointPlan& p = m.head.plan;
    uint32_t chunks = 0, workers = 0;
    if (!r.U32(&p.num_servers) || p.num_servers == 0 || p.num_servers > kPlanServersMax ||
        !r.U32(&chunks) || chunks > kChunksMax || chunks > r.left() / 4) {
      return absl::DataLossError("checkpoint meta: plan malformed");
    }
    p.chunk_server.resize(chunks);
    for (uint32_t& o : p.chunk_server) {
      if (!r.U32(&o) || o >= p.num_servers) {
        return absl::DataLossError("checkpoint meta: plan names a server out of range");
      }
    }
    if (!r.U32(&workers) || workers > kPlanWorkersMax || workers > r.left() / 12) {
      return absl::DataLossError("checkpoint meta: plan's workers malformed");
    }
    p.worker_batch.resize(workers);
    p.worker_samples.resize(workers);
    for (uint32_t k = 0; k < workers; ++k) {
      if (!r.U32(&p.worker_batch[k]) || !r.U64(&p.worker_samples[k])) {
        return absl::DataLossError("checkpoint meta: plan's workers truncated");
      }
    }
    if (r.left() != 0) return absl::DataLossError("checkpoint meta record has trailing bytes");
  }
  return m;
}

void ChunkPayload(const ChunkState& ch, ByteWriter* w) {
  w->U32(ch.chunk_id);
  w->U64(ch.offset);
  w->U8(static_cast<uint8_t>(ch.slots.size()));
  w->Floats(ch.params);
  for (const auto& s : ch.slots) w->Floats(s);
}

absl::StatusOr<ChunkState> ParseChunk(std::string_view payload, const MetaChunk& want) {
  ByteReader r(payload);
  ChunkState ch;
  uint8_t slots = 0;
  if (!r.U32(&ch.chunk_id) || !r.U64(&ch.offset) || !r.U8(&slots) || slots > kSlotsMax ||
      !r.Floats(&ch.params)) {
    return absl::DataLossError("checkpoint chunk record malformed");
  }
  ch.slots.resize(slots);
  for (auto& s : ch.slots) {
    if (!r.Floats(&s) || s.size() != ch.params.size()) {
      return absl::DataLossError("checkpoint chunk slot malformed");
    }
  }
  if (r.left() != 0 || ch.chunk_id != want.chunk_id || ch.offset != want.offset ||
      ch.params.size() != want.floats || slots != want.slots) {
    return absl::DataLossError(
        absl::StrCat("checkpoint chunk ", ch.chunk_id, " does not match its meta entry"));
  }
  return ch;
}

// The commit ties the records together: the round, the chunk count and a
// CRC over the meta record's CRC and every chunk record's, in meta order.
std::string CommitPayload(uint64_t round, uint32_t chunks, uint32_t chain) {
  ByteWriter w;
  w.U64(round);
  w.U32(chunks);
  w.U32(chain);
  return w.Take();
}

uint32_t ChainCrc(uint32_t chain, uint32_t record_crc) {
  ByteWriter w;
  w.U32(record_crc);
  return Crc32(w.bytes(), chain);
}

absl::Status ValidateCheckpoint(const Checkpoint& c) {
  RETURN_IF_ERROR(ValidateJobId(c.job_id));
  if (c.spec.size() > kSpecBytesMax) return absl::InvalidArgumentError("job spec too large");
  if (c.chunks.size() > kChunksMax) return absl::InvalidArgumentError("too many chunks");
  RETURN_IF_ERROR(ValidatePlan(c.plan));
  std::vector<uint32_t> ids;
  for (const ChunkState& ch : c.chunks) ids.push_back(ch.chunk_id);
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    return absl::InvalidArgumentError("a chunk id appears twice");
  }
  for (const ChunkState& ch : c.chunks) {
    if (ch.slots.size() > kSlotsMax) return absl::InvalidArgumentError("too many optimizer slots");
    for (const auto& s : ch.slots) {
      if (s.size() != ch.params.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("chunk ", ch.chunk_id, ": an optimizer slot's size differs"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobId(const std::string& job_id) {
  if (job_id.empty() || job_id.size() > kJobIdBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id of ", job_id.size(), " bytes (1 to ", kJobIdBytesMax, ")"));
  }
  for (char ch : job_id) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) return absl::InvalidArgumentError("job id: only [A-Za-z0-9._-] allowed");
  }
  return absl::OkStatus();
}

std::string CheckpointPrefix(const std::string& job_id, uint32_t server_index) {
  return absl::StrFormat("c/%s/%08x/", job_id, server_index);
}

std::string CheckpointPrefix(const std::string& job_id, uint32_t server_index, uint64_t round) {
  return RoundPrefix(job_id, server_index, round);
}

CheckpointStore::CheckpointStore(const CheckpointStoreConfig& config,
                                 const rocksdb::Options& options, rocksdb::DB* db)
    : config_(config), options_(options), db_(db) {}

CheckpointStore::~CheckpointStore() {
  absl::MutexLock lock(&db_mu_);
  if (db_ != nullptr) db_->Close().PermitUncheckedError();
}

rocksdb::Options CheckpointStore::MakeOptions(const CheckpointStoreConfig& config) {
  rocksdb::Options o;
  o.create_if_missing = !config.read_only;
  o.paranoid_checks = true;
  o.compression = rocksdb::kNoCompression;  // floats do not compress
  o.max_background_jobs = 1;
  o.max_open_files = 256;
  o.keep_log_file_num = 2;
  // Recovery from a failed write is Write's (Recover), on its thread.
  o.max_bgerror_resume_count = 0;
  if (config.env != nullptr) o.env = config.env;
  return o;
}

absl::StatusOr<rocksdb::DB*> CheckpointStore::OpenDb(const rocksdb::Options& options,
                                                     const std::string& dir) {
  rocksdb::DB* db = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(options, dir, &db), "open " + dir));
  return db;
}

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(
    const CheckpointStoreConfig& config) {
  if (config.dir.empty()) return absl::InvalidArgumentError("checkpoint store: no directory");
  if (config.keep_last == 0) return absl::InvalidArgumentError("checkpoint store: keep_last 0");
  const rocksdb::Options options = MakeOptions(config);
  rocksdb::DB* db = nullptr;
  if (config.read_only) {
    RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(options, config.dir, &db),
                              "open (read only) " + config.dir));
  } else {
    // RocksDB makes the last directory only; an operator names a path.
    std::error_code ec;
    std::filesystem::create_directories(config.dir, ec);
    ASSIGN_OR_RETURN(db, OpenDb(options, config.dir));
  }
  return std::unique_ptr<CheckpointStore>(new CheckpointStore(config, options, db));
}

absl::Status CheckpointStore::Recover() {
  {
    absl::ReaderMutexLock lock(&db_mu_);
    if (db_ != nullptr && db_->Resume().ok()) return absl::OkStatus();
  }
  // Reopened, RocksDB starts from what is on disk; the failed write was
  // reported and is not there. If the open fails, every call says so
  // until a later Write opens it.
  absl::MutexLock lock(&db_mu_);
  if (db_ != nullptr) db_->Close().PermitUncheckedError();
  db_.reset();
  ASSIGN_OR_RETURN(rocksdb::DB * db, OpenDb(options_, config_.dir));
  db_.reset(db);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> CheckpointStore::Rounds(const std::string& job_id,
                                                              uint32_t server_index) {
  const std::string prefix = CheckpointPrefix(job_id, server_index);
  std::vector<uint64_t> rounds;
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return absl::UnavailableError("checkpoint store: not open (reopen failed)");
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  // One seek per round: the chunk data between is skipped, not read.
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);) {
    uint64_t round = 0;
    const std::string_view tail(it->key().data() + prefix.size(), it->key().size() - prefix.size());
    if (!ParseHex(tail, 16, &round)) break;  // not ours: nothing after it is either
    rounds.push_back(round);
    it->Seek(RoundEnd(job_id, server_index, round));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "list"));
  std::sort(rounds.rbegin(), rounds.rend());
  return rounds;
}

void CheckpointStore::DeleteRound(rocksdb::WriteBatch* b, const std::string& job, uint32_t srv,
                                  uint64_t round) {
  b->DeleteRange(RoundPrefix(job, srv, round), RoundEnd(job, srv, round));
}

absl::Status CheckpointStore::ReadOnly() const {
  return absl::FailedPreconditionError(
      absl::StrCat("checkpoint store ", config_.dir, ": opened read only (another psd's)"));
}

absl::Status CheckpointStore::Write(const Checkpoint& given) {
  if (config_.read_only) return ReadOnly();
  RETURN_IF_ERROR(ValidateCheckpoint(given));
  absl::MutexLock wlock(&write_mu_);  // pruning reads the rounds, then writes
  // After a failed write RocksDB may refuse more until recovered; with the
  // fault still there (or RocksDB recovering from a full disk by itself)
  // this write fails too, with its reason.
  if (failed_) {
    RETURN_IF_ERROR(Recover());
    failed_ = false;
  }
  failed_ = true;  // until this write is done
  Checkpoint c = given;
  c.written_unix_ms = NowUnixMs();
  const std::string& job = c.job_id;
  const uint32_t srv = c.server_index;
  ASSIGN_OR_RETURN(std::vector<uint64_t> rounds, Rounds(job, srv));
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return absl::UnavailableError("checkpoint store: not open (reopen failed)");
  // 1. A round written again goes first, whole: the new one may have fewer
  //    chunks.
  if (std::find(rounds.begin(), rounds.end(), c.round) != rounds.end()) {
    rocksdb::WriteBatch b;
    DeleteRound(&b, job, srv, c.round);
    RETURN_IF_ERROR(FromRocks(db_->Write(rocksdb::WriteOptions(), &b), "replace"));
  }
  // 2. The checkpoint as one table file, ingested: RocksDB links it in with
  //    one manifest write, so it is on disk whole or not at all, and its
  //    bytes are written once (not to a log, a memtable and then a table).
  //    Keys in order: the chunks (by id), the meta, the commit.
  uint32_t meta_crc = 0;
  const std::string meta = EncodeRecord(RecordKind::kMeta, MetaPayload(c), &meta_crc);
  std::vector<size_t> order(c.chunks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return c.chunks[a].chunk_id < c.chunks[b].chunk_id; });
  const std::string path =
      absl::StrFormat("%s/checkpoint-%08x-%016x.sst.tmp", config_.dir, srv, c.round);
  rocksdb::SstFileWriter w(rocksdb::EnvOptions(), options_);
  RETURN_IF_ERROR(FromRocks(w.Open(path), "table file"));
  std::vector<uint32_t> crcs(c.chunks.size());
  std::string rec;
  absl::Status s;
  for (size_t i : order) {
    const ChunkState& ch = c.chunks[i];
    rec.clear();
    BeginRecord(&rec);
    ByteWriter bw(std::move(rec));
    ChunkPayload(ch, &bw);
    rec = bw.Take();
    crcs[i] = FinishRecord(RecordKind::kChunk, 0, &rec);
    s = FromRocks(w.Put(ChunkKey(job, srv, c.round, ch.chunk_id), rec), "table file");
    if (!s.ok()) break;
  }
  uint32_t chain = ChainCrc(0, meta_crc);
  for (uint32_t crc : crcs) chain = ChainCrc(chain, crc);
  if (s.ok()) s = FromRocks(w.Put(Key('m', job, srv, c.round), meta), "table file");
  if (s.ok()) {
    s = FromRocks(w.Put(Key('z', job, srv, c.round),
                        EncodeRecord(RecordKind::kCommit,
                                     CommitPayload(c.round, uint32_t(c.chunks.size()), chain))),
                  "table file");
  }
  if (s.ok()) s = FromRocks(w.Finish(), "table file");
  if (s.ok()) {
    rocksdb::IngestExternalFileOptions io;
    io.move_files = true;  // a hard link into the database: no copy
    s = FromRocks(db_->IngestExternalFile({path}, io), "ingest");
  }
  options_.env->DeleteFile(path).PermitUncheckedError();  // moved, or a failed attempt's
  RETURN_IF_ERROR(s);
  // 3. Those beyond the keep_last newest. Lost in a crash, they are
  //    removed by the next write.
  rounds.push_back(c.round);
  std::sort(rounds.rbegin(), rounds.rend());
  rounds.erase(std::unique(rounds.begin(), rounds.end()), rounds.end());
  if (rounds.size() > config_.keep_last) {
    rocksdb::WriteBatch b;
    for (size_t i = config_.keep_last; i < rounds.size(); ++i) DeleteRound(&b, job, srv, rounds[i]);
    RETURN_IF_ERROR(FromRocks(db_->Write(rocksdb::WriteOptions(), &b), "prune"));
    // The deletes hide them; their table files (one per checkpoint, over
    // nothing else) go now rather than at some compaction.
    std::vector<std::string> bounds;
    for (size_t i = config_.keep_last; i < rounds.size(); ++i) {
      bounds.push_back(RoundPrefix(job, srv, rounds[i]));
      bounds.push_back(RoundEnd(job, srv, rounds[i]));
    }
    std::vector<rocksdb::Slice> slices(bounds.begin(), bounds.end());
    std::vector<rocksdb::RangePtr> ranges;
    for (size_t k = 0; k < slices.size(); k += 2) ranges.emplace_back(&slices[k], &slices[k + 1]);
    RETURN_IF_ERROR(FromRocks(rocksdb::DeleteFilesInRanges(db_.get(), db_->DefaultColumnFamily(),
                                                           ranges.data(), ranges.size(), false),
                              "prune files"));
  }
  failed_ = false;
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> CheckpointStore::Read(const std::string& job_id, uint32_t server_index,
                                                 uint64_t round) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  const rocksdb::ReadOptions ro;  // verify_checksums: RocksDB's own, on every block read
  std::string value;
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return absl::UnavailableError("checkpoint store: not open (reopen failed)");
  const std::string where = absl::StrFormat("%s server %u round %u", job_id, server_index, round);
  RETURN_IF_ERROR(FromRocks(db_->Get(ro, Key('m', job_id, server_index, round), &value),
                            "checkpoint " + where));
  auto mv = DecodeRecord(value);
  if (!mv.ok() || mv->kind != RecordKind::kMeta) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", where, ": meta: ", mv.ok() ? "wrong kind" : mv.status().message()));
  }
  ASSIGN_OR_RETURN(Meta meta, ParseMeta(mv->payload));
  if (meta.head.job_id != job_id || meta.head.server_index != server_index ||
      meta.head.round != round) {
    return absl::DataLossError("checkpoint meta names another checkpoint");
  }
  uint32_t chain = ChainCrc(0, mv->crc);
  Checkpoint c = std::move(meta.head);
  c.chunks.reserve(meta.chunks.size());
  for (const MetaChunk& want : meta.chunks) {
    const rocksdb::Status s =
        db_->Get(ro, ChunkKey(job_id, server_index, round, want.chunk_id), &value);
    if (s.IsNotFound()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", where, ": chunk ", want.chunk_id, " missing"));
    }
    RETURN_IF_ERROR(FromRocks(s, absl::StrCat("checkpoint ", where, ": chunk ", want.chunk_id)));
    auto rv = DecodeRecord(value);
    if (!rv.ok() || rv->kind != RecordKind::kChunk) {
      return absl::DataLossError(absl::StrCat("checkpoint ", where, ": chunk ", want.chunk_id, ": ",
                                              rv.ok() ? "wrong kind" : rv.status().message()));
    }
    chain = ChainCrc(chain, rv->crc);
    ASSIGN_OR_RETURN(ChunkState ch, ParseChunk(rv->payload, want));
    c.chunks.push_back(std::move(ch));
  }
  const rocksdb::Status s = db_->Get(ro, Key('z', job_id, server_index, round), &value);
  if (s.IsNotFound())
    return absl::DataLossError(absl::StrCat("checkpoint ", where, " uncommitted"));
  RETURN_IF_ERROR(FromRocks(s, absl::StrCat("checkpoint ", where, ": commit")));
  auto zv = DecodeRecord(value);
  if (!zv.ok() || zv->kind != RecordKind::kCommit ||
      zv->payload != CommitPayload(round, static_cast<uint32_t>(c.chunks.size()), chain)) {
    return absl::DataLossError(absl::StrCat("checkpoint ", where, ": commit does not match"));
  }
  return c;
}

absl::StatusOr<Checkpoint> CheckpointStore::ReadNewest(const std::string& job_id,
                                                       uint32_t server_index, ReadStats* stats) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  ASSIGN_OR_RETURN(std::vector<uint64_t> rounds, Rounds(job_id, server_index));
  for (uint64_t r : rounds) {
    auto c = Read(job_id, server_index, r);
    if (c.ok()) return c;
    if (stats != nullptr) {
      ++stats->skipped;
      stats->why.push_back(std::string(c.status().message()));
    }
  }
  return absl::NotFoundError(absl::StrCat("no valid checkpoint of job ", job_id, " server ",
                                          server_index, " in ", config_.dir));
}

absl::StatusOr<std::vector<CheckpointInfo>> CheckpointStore::List(const std::string& job_id) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  const std::string prefix = absl::StrCat("c/", job_id, "/");
  std::vector<CheckpointInfo> out;
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return absl::UnavailableError("checkpoint store: not open (reopen failed)");
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);) {
    const std::string_view tail(it->key().data() + prefix.size(), it->key().size() - prefix.size());
    uint64_t server = 0, round = 0;
    if (tail.size() < 26 || !ParseHex(tail, 8, &server) || tail[8] != '/' ||
        !ParseHex(tail.substr(9), 16, &round)) {
      break;
    }
    const uint32_t srv = static_cast<uint32_t>(server);
    std::string value;
    // Read reports a meta that is missing or fails its checks, with why.
    if (db_->Get(rocksdb::ReadOptions(), Key('m', job_id, srv, round), &value).ok()) {
      auto mv = DecodeRecord(value);
      auto meta = mv.ok() ? ParseMeta(mv->payload) : absl::StatusOr<Meta>(mv.status());
      if (meta.ok() && meta->head.job_id == job_id) {
        CheckpointInfo info;
        info.job_id = job_id;
        info.server_index = srv;
        info.round = round;
        info.written_unix_ms = meta->head.written_unix_ms;
        info.chunks = static_cast<uint32_t>(meta->chunks.size());
        info.bytes = value.size() + kRecordHeaderBytes + kCommitBytes;  // meta and commit
        for (const MetaChunk& ch : meta->chunks)
          info.bytes += ChunkRecordBytes(ch.floats, ch.slots);
        out.push_back(std::move(info));
      }
    }
    it->Seek(RoundEnd(job_id, srv, round));
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "list"));
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.round != b.round ? a.round > b.round : a.server_index < b.server_index;
  });
  return out;
}

absl::StatusOr<std::vector<std::string>> CheckpointStore::Jobs() {
  std::vector<std::string> ids;
  {
    absl::ReaderMutexLock lock(&db_mu_);
    if (db_ == nullptr) return absl::UnavailableError("checkpoint store: not open (reopen failed)");
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    // One seek per job: "c/<job>0" is the first key after "c/<job>/...".
    for (it->Seek("c/"); it->Valid() && it->key().starts_with("c/");) {
      const std::string_view key(it->key().data() + 2, it->key().size() - 2);
      const size_t slash = key.find('/');
      if (slash == std::string_view::npos) break;
      ids.emplace_back(key.substr(0, slash));
      it->Seek(absl::StrCat("c/", ids.back(), "0"));
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "list jobs"));
  }
  std::vector<std::pair<uint64_t, std::string>> by_time;
  for (const std::string& id : ids) {
    if (!ValidateJobId(id).ok()) continue;
    ASSIGN_OR_RETURN(std::vector<CheckpointInfo> list, List(id));
    uint64_t newest = 0;
    for (const CheckpointInfo& c : list) newest = std::max(newest, c.written_unix_ms);
    by_time.push_back({newest, id});
  }
  std::sort(by_time.rbegin(), by_time.rend());
  std::vector<std::string> out;
  for (auto& [t, id] : by_time) out.push_back(std::move(id));
  return out;
}

absl::StatusOr<std::vector<uint64_t>> CheckpointStore::ValidRounds(const std::string& job_id,
                                                                   uint32_t server_index,
                                                                   ReadStats* stats) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  ASSIGN_OR_RETURN(std::vector<uint64_t> rounds, Rounds(job_id, server_index));
  std::vector<uint64_t> valid;
  for (uint64_t round : rounds) {
    absl::StatusOr<Checkpoint> c = Read(job_id, server_index, round);
    if (c.ok()) {
      valid.push_back(round);
    } else if (stats != nullptr) {
      ++stats->skipped;
      stats->why.push_back(std::string(c.status().message()));
    }
  }
  return valid;
}

absl::Status CheckpointStore::DeleteAfter(const std::string& job_id, uint32_t server_index,
                                          uint64_t round) {
  if (config_.read_only) return ReadOnly();
  RETURN_IF_ERROR(ValidateJobId(job_id));
  ASSIGN_OR_RETURN(std::vector<uint64_t> rounds, Rounds(job_id, server_index));
  absl::MutexLock wlock(&write_mu_);
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return absl::UnavailableError("checkpoint store: not open (reopen failed)");
  rocksdb::WriteBatch b;
  for (uint64_t r : rounds) {
    if (r > round) DeleteRound(&b, job_id, server_index, r);
  }
  if (b.Count() == 0) return absl::OkStatus();
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &b), "delete later rounds");
}

absl::Status CheckpointStore::DeleteJob(const std::string& job_id) {
  if (config_.read_only) return ReadOnly();
  RETURN_IF_ERROR(ValidateJobId(job_id));
  absl::MutexLock wlock(&write_mu_);
  absl::ReaderMutexLock lock(&db_mu_);
  if (db_ == nullptr) return absl::UnavailableError("checkpoint store: not open (reopen failed)");
  const std::string begin = absl::StrCat("c/", job_id, "/"), end = absl::StrCat("c/", job_id, "0");
  rocksdb::WriteBatch b;
  b.DeleteRange(begin, end);
  RETURN_IF_ERROR(FromRocks(db_->Write(rocksdb::WriteOptions(), &b), "delete job"));
  const rocksdb::Slice lo(begin), hi(end);
  return FromRocks(
      rocksdb::DeleteFilesInRange(db_.get(), db_->DefaultColumnFamily(), &lo, &hi, false),
      "delete job files");
}

absl::StatusOr<std::vector<std::string>> CheckpointStore::KeepJobs(size_t keep,
                                                                   const std::string& current) {
  ASSIGN_OR_RETURN(std::vector<std::string> jobs, Jobs());
  std::vector<std::string> removed;
  size_t kept = 0;
  for (const std::string& id : jobs) {
    if (id == current) continue;
    if (kept < keep) {
      ++kept;
      continue;
    }
    RETURN_IF_ERROR(DeleteJob(id));
    removed.push_back(id);
  }
  return removed;
}

}  // namespace storage
}  // namespace hetps
