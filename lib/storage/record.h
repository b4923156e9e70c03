// The checkpoint store's records (docs/storage-format.md): each RocksDB
// value is a 24-byte header (magic, format version, kind, payload length,
// CRC-32 of the kind, length and payload) and the payload. The CRC is ours,
// beside RocksDB's block checksums: it also catches a value that was wrong
// when written, or changed by anything that rewrote the file consistently.
//
// Also the little-endian writer and bounded reader the payloads are made
// with. Everything read is hostile until checked: lengths are bounded by
// the bytes that are there before anything is allocated from them. Pure;
// thread-compatible.
#ifndef HETPS_LIB_STORAGE_RECORD_H_
#define HETPS_LIB_STORAGE_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hetps {
namespace storage {

constexpr uint32_t kRecordMagic = 0x4B435048;  // "HPCK", little-endian
constexpr uint16_t kFormatVersion = 1;
constexpr size_t kRecordHeaderBytes = 24;

enum class RecordKind : uint16_t {
  kMeta = 1,    // a checkpoint's description and chunk list
  kChunk = 2,   // one chunk's parameters and optimizer slots
  kCommit = 3,  // written with the others: the checkpoint is complete
  // schedd's state store (daemons/schedd/state_store.h): protobuf payloads.
  kSchedulerJob = 4,
  kSchedulerCounters = 5,
};

// CRC-32 (IEEE 802.3, zlib's) of `bytes`, continuing from `crc`.
uint32_t Crc32(std::string_view bytes, uint32_t crc = 0);

// The record of `payload`; its CRC also in *crc when given.
std::string EncodeRecord(RecordKind kind, std::string_view payload, uint32_t* crc = nullptr);

// The same, built in place (no copy of a large payload): BeginRecord
// leaves room for the header at the end of *out, the caller appends the
// payload, FinishRecord fills the header in and returns the record's CRC.
void BeginRecord(std::string* out);
uint32_t FinishRecord(RecordKind kind, size_t begin, std::string* out);

struct RecordView {
  RecordKind kind;
  std::string_view payload;  // into the bytes given to DecodeRecord
  uint32_t crc = 0;          // the header's CRC (commit records chain them)
};

// The record in `bytes`, or why not: InvalidArgument for a bad magic,
// kind or length, FailedPrecondition for another format version, DataLoss
// for a CRC mismatch.
absl::StatusOr<RecordView> DecodeRecord(std::string_view bytes);

// Appends little-endian values.
class ByteWriter {
 public:
  ByteWriter() = default;
  // Appends to `initial` (e.g. a record begun with BeginRecord).
  explicit ByteWriter(std::string initial) : out_(std::move(initial)) {}
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v);
  void U64(uint64_t v);
  // A u32 length, then the bytes.
  void String(std::string_view s);
  // A u64 count, then the floats' bytes (IEEE 754, little-endian).
  void Floats(const std::vector<float>& v);
  const std::string& bytes() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what ByteWriter wrote. Each call fails (and every later one) once
// the bytes run out or a length exceeds what is left.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  bool U8(uint8_t* v);
  bool U32(uint32_t* v);
  bool U64(uint64_t* v);
  // At most max_bytes long.
  bool String(std::string* s, size_t max_bytes);
  bool Floats(std::vector<float>* v);
  size_t left() const { return in_.size(); }
  bool ok() const { return ok_; }

 private:
  bool Take(size_t n, const char** at);
  std::string_view in_;
  bool ok_ = true;
};

}  // namespace storage
}  // namespace hetps

#endif  // HETPS_LIB_STORAGE_RECORD_H_
