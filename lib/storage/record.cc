#include "lib/storage/record.h"

#include <zlib.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace hetps {
namespace storage {
namespace {

static_assert(sizeof(float) == 4, "floats are stored as IEEE 754 binary32");

void PutU16(std::string* out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// The CRC covers the kind and length as well as the payload, so a
// payload moved under another header does not verify.
uint32_t RecordCrc(uint16_t kind, uint64_t length, std::string_view payload) {
  std::string head;
  PutU16(&head, kind);
  PutU64(&head, length);
  return Crc32(payload, Crc32(head));
}

}  // namespace

uint32_t Crc32(std::string_view bytes, uint32_t crc) {
  // zlib takes uInt lengths: feed large inputs in pieces.
  uLong c = crc;
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  size_t left = bytes.size();
  while (left > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    c = crc32(c, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(c);
}

void BeginRecord(std::string* out) { out->append(kRecordHeaderBytes, '\0'); }

uint32_t FinishRecord(RecordKind kind, size_t begin, std::string* out) {
  const std::string_view payload(out->data() + begin + kRecordHeaderBytes,
                                 out->size() - begin - kRecordHeaderBytes);
  const uint32_t crc = RecordCrc(static_cast<uint16_t>(kind), payload.size(), payload);
  std::string head;
  PutU32(&head, kRecordMagic);
  PutU16(&head, kFormatVersion);
  PutU16(&head, static_cast<uint16_t>(kind));
  PutU64(&head, payload.size());
  PutU32(&head, crc);
  PutU32(&head, 0);  // reserved: keeps the payload 8-byte aligned in the record
  out->replace(begin, kRecordHeaderBytes, head);
  return crc;
}

std::string EncodeRecord(RecordKind kind, std::string_view payload, uint32_t* crc) {
  std::string out;
  out.reserve(kRecordHeaderBytes + payload.size());
  BeginRecord(&out);
  out.append(payload.data(), payload.size());
  const uint32_t c = FinishRecord(kind, 0, &out);
  if (crc != nullptr) *crc = c;
  return out;
}

absl::StatusOr<RecordView> DecodeRecord(std::string_view bytes) {
  if (bytes.size() < kRecordHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("record of ", bytes.size(), " bytes, shorter than its header"));
  }
  const char* p = bytes.data();
  if (GetLe(p, 4) != kRecordMagic) return absl::InvalidArgumentError("not a checkpoint record");
  const uint16_t version = static_cast<uint16_t>(GetLe(p + 4, 2));
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint format version ", version,
                                                      " (this build reads ", kFormatVersion, ")"));
  }
  const uint16_t kind = static_cast<uint16_t>(GetLe(p + 6, 2));
  if (kind < uint16_t(RecordKind::kMeta) || kind > uint16_t(RecordKind::kSchedulerCounters)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown record kind ", kind));
  }
  const uint64_t length = GetLe(p + 8, 8);
  if (length != bytes.size() - kRecordHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("record says ", length, " payload bytes, has ",
                                                   bytes.size() - kRecordHeaderBytes));
  }
  if (GetLe(p + 20, 4) != 0)
    return absl::InvalidArgumentError("record header's reserved bytes set");
  RecordView r;
  r.kind = static_cast<RecordKind>(kind);
  r.payload = bytes.substr(kRecordHeaderBytes);
  r.crc = static_cast<uint32_t>(GetLe(p + 16, 4));
  if (RecordCrc(kind, length, r.payload) != r.crc) {
    return absl::DataLossError("checkpoint record fails its CRC");
  }
  return r;
}

void ByteWriter::U32(uint32_t v) { PutU32(&out_, v); }
void ByteWriter::U64(uint64_t v) { PutU64(&out_, v); }

void ByteWriter::String(std::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  out_.append(s.data(), s.size());
}

void ByteWriter::Floats(const std::vector<float>& v) {
  U64(v.size());
  // Little-endian hosts only (x86-64, aarch64): the floats' bytes as they are.
  const size_t at = out_.size();
  out_.resize(at + v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(&out_[at], v.data(), v.size() * sizeof(float));
}

bool ByteReader::Take(size_t n, const char** at) {
  if (!ok_ || n > in_.size()) {
    ok_ = false;
    return false;
  }
  *at = in_.data();
  in_.remove_prefix(n);
  return true;
}

bool ByteReader::U8(uint8_t* v) {
  const char* p;
  if (!Take(1, &p)) return false;
  *v = static_cast<uint8_t>(*p);
  return true;
}

bool ByteReader::U32(uint32_t* v) {
  const char* p;
  if (!Take(4, &p)) return false;
  *v = static_cast<uint32_t>(GetLe(p, 4));
  return true;
}

bool ByteReader::U64(uint64_t* v) {
  const char* p;
  if (!Take(8, &p)) return false;
  *v = GetLe(p, 8);
  return true;
}

bool ByteReader::String(std::string* s, size_t max_bytes) {
  uint32_t n = 0;
  const char* p;
  if (!U32(&n)) return false;
  if (n > max_bytes) {
    ok_ = false;
    return false;
  }
  if (!Take(n, &p)) return false;
  s->assign(p, n);
  return true;
}

bool ByteReader::Floats(std::vector<float>* v) {
  uint64_t n = 0;
  const char* p;
  if (!U64(&n)) return false;
  // Bounded by the bytes present before anything is allocated.
  if (n > in_.size() / sizeof(float)) {
    ok_ = false;
    return false;
  }
  if (!Take(n * sizeof(float), &p)) return false;
  v->resize(n);
  if (n > 0) std::memcpy(v->data(), p, n * sizeof(float));
  return true;
}

}  // namespace storage
}  // namespace hetps
