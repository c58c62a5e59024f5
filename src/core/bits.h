// Byte- and bit-level primitives for every message and format (the checkpoint format, transport,
// bootstrap and topology messages): little-endian fields, unsigned LEB128, and LSB-first bit streams. Readers check every bound and report truncation as kCorruptData.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::bits {

inline void put_u8(std::vector<uint8_t>& o, uint8_t v) { o.push_back(v); }
inline void put_u16(std::vector<uint8_t>& o, uint16_t v) {
  o.push_back(uint8_t(v));
  o.push_back(uint8_t(v >> 8));
}
inline void put_u32(std::vector<uint8_t>& o, uint32_t v) {
  for (int i = 0; i < 4; ++i) o.push_back(uint8_t(v >> (8 * i)));
}
inline void put_u64(std::vector<uint8_t>& o, uint64_t v) {
  for (int i = 0; i < 8; ++i) o.push_back(uint8_t(v >> (8 * i)));
}
inline void store_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint32_t load_u32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

// Appends unsigned LEB128; returns bytes written.
inline size_t put_leb128(std::vector<uint8_t>& o, uint64_t v) {
  size_t n = 0;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    o.push_back(v ? (b | 0x80) : b);
    ++n;
  } while (v);
  return n;
}
inline size_t leb128_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Sequential reader over a byte span; every read is bounds-checked.
class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> b, const char* what) : b_(b), what_(what) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }
  Status need(size_t n) const;
  Status u8(uint8_t* v);
  Status u16(uint16_t* v);
  Status u32(uint32_t* v);
  Status u64(uint64_t* v);
  Status bytes(size_t n, const uint8_t** p);
  // Unsigned LEB128 of at most `max_bits` significant bits; rejects overlong and overflowing forms.
  Status leb128(uint64_t* v, int max_bits = 64);

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  const char* what_;
};

// LSB-first bit writer.
class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>& out) : out_(out) {}
  void put(uint64_t bits, int n) {  // n <= 56
    acc_ |= (bits & ((1ull << n) - 1)) << fill_;
    fill_ += n;
    while (fill_ >= 8) {
      out_.push_back(uint8_t(acc_));
      acc_ >>= 8;
      fill_ -= 8;
    }
  }
  void put_zeros(uint64_t n) {
    while (n > 32) {
      put(0, 32);
      n -= 32;
    }
    put(0, int(n));
  }
  void flush() {  // pads the last byte with zero bits
    if (fill_ > 0) out_.push_back(uint8_t(acc_));
    acc_ = 0;
    fill_ = 0;
  }

 private:
  std::vector<uint8_t>& out_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// LSB-first bit reader; reading past the end is reported, never performed.
class BitReader {
 public:
  explicit BitReader(std::span<const uint8_t> b) : b_(b), total_(uint64_t(b.size()) * 8) {}
  uint64_t bits_left() const { return total_ - pos_; }
  // Peeks up to 57 bits (zero-filled past the end).
  uint64_t peek57() const {
    size_t byte = pos_ >> 3;
    uint64_t w = 0;
    if (byte + 8 <= b_.size()) {
      memcpy(&w, b_.data() + byte, 8);
    } else {
      for (size_t i = 0; byte + i < b_.size(); ++i) w |= uint64_t(b_[byte + i]) << (8 * i);
    }
    return w >> (pos_ & 7);
  }
  bool get(int n, uint64_t* v) {
    if (uint64_t(n) > bits_left()) return false;
    *v = n == 0 ? 0 : peek57() & ((1ull << n) - 1);
    pos_ += n;
    return true;
  }
  // Counts zero bits up to and including the next one bit; false when no one bit follows or the
  // count would exceed `limit`.
  bool unary(uint64_t limit, uint64_t* q) {
    uint64_t count = 0;
    while (true) {
      if (bits_left() == 0) return false;
      uint64_t w = peek57();
      int avail = int(std::min<uint64_t>(57, bits_left()));
      uint64_t masked = avail == 64 ? w : (w & ((1ull << avail) - 1));
      if (masked) {
        int z = __builtin_ctzll(masked);
        count += z;
        pos_ += z + 1;
        if (count > limit) return false;
        *q = count;
        return true;
      }
      count += avail;
      pos_ += avail;
      if (count > limit) return false;
    }
  }
  uint64_t pos() const { return pos_; }
  // Moves to bit `bit` (at most the end): where a faster decoder that read ahead stopped.
  void seek(uint64_t bit) { pos_ = std::min(bit, total_); }

 private:
  std::span<const uint8_t> b_;
  uint64_t total_;
  uint64_t pos_ = 0;
};

}  // namespace sparrow::bits
