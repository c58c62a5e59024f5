#include "core/bits.h"

namespace sparrow::bits {

Status ByteReader::need(size_t n) const {
  if (n > remaining())
    return CorruptData(std::string(what_) + " truncated: need " + std::to_string(n) + " bytes at offset " +
                       std::to_string(pos_) + ", " + std::to_string(remaining()) + " left");
  return Status::Ok();
}
Status ByteReader::u8(uint8_t* v) {
  SPARROW_RETURN_IF_ERROR(need(1));
  *v = b_[pos_++];
  return Status::Ok();
}
Status ByteReader::u16(uint16_t* v) {
  SPARROW_RETURN_IF_ERROR(need(2));
  *v = uint16_t(b_[pos_] | (b_[pos_ + 1] << 8));
  pos_ += 2;
  return Status::Ok();
}
Status ByteReader::u32(uint32_t* v) {
  SPARROW_RETURN_IF_ERROR(need(4));
  *v = load_u32(b_.data() + pos_);
  pos_ += 4;
  return Status::Ok();
}
Status ByteReader::u64(uint64_t* v) {
  SPARROW_RETURN_IF_ERROR(need(8));
  *v = load_u64(b_.data() + pos_);
  pos_ += 8;
  return Status::Ok();
}
Status ByteReader::bytes(size_t n, const uint8_t** p) {
  SPARROW_RETURN_IF_ERROR(need(n));
  *p = b_.data() + pos_;
  pos_ += n;
  return Status::Ok();
}
Status ByteReader::leb128(uint64_t* v, int max_bits) {
  uint64_t r = 0;
  for (int shift = 0;; shift += 7) {
    uint8_t b;
    SPARROW_RETURN_IF_ERROR(u8(&b));
    uint64_t part = b & 0x7f;
    int room = max_bits - shift;
    if (room <= 0 || (room < 7 && (part >> room) != 0))
      return CorruptData(std::string(what_) + ": LEB128 value exceeds " + std::to_string(max_bits) + " bits");
    r |= part << shift;
    if (!(b & 0x80)) {
      if (b == 0 && shift > 0) return CorruptData(std::string(what_) + ": overlong LEB128 encoding");
      *v = r;
      return Status::Ok();
    }
  }
}

}  // namespace sparrow::bits
