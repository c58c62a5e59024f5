#include "format/index_codec.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/bits.h"

namespace sparrow::format {
using namespace bits;  // the byte and bit primitives (core/bits.h)

const char* index_codec_name(IndexCodec c) {
  switch (c) {
    case IndexCodec::kDense: return "dense";
    case IndexCodec::kLeb128: return "leb128";
    case IndexCodec::kGolomb: return "golomb";
    case IndexCodec::kBitmap: return "bitmap";
  }
  return "?";
}

namespace {

inline uint32_t gap_at(const uint32_t* pos, size_t i) { return i == 0 ? pos[0] : pos[i] - pos[i - 1] - 1; }

struct TruncBin {
  int b;       // ceil(log2 m)
  uint32_t u;  // 2^b - m: remainders below u take b-1 bits
  explicit TruncBin(uint32_t m) {
    b = m <= 1 ? 0 : 64 - __builtin_clzll(uint64_t(m) - 1);
    u = uint32_t((1ull << b) - m);
  }
  int len(uint32_t r) const { return r < u ? b - 1 : b; }
};

// Lemire's fast division for 32-bit numerators: exact for all a < 2^32.
struct FastDiv {
  uint64_t M;
  uint32_t d;
  explicit FastDiv(uint32_t div) : M(~0ull / div + 1), d(div) {}
  uint32_t div(uint32_t a) const { return d == 1 ? a : uint32_t((__uint128_t(M) * a) >> 64); }
};

}  // namespace

size_t leb128_index_size(const uint32_t* pos, size_t k) {
  size_t s = 0;
  for (size_t i = 0; i < k; ++i) {
    uint32_t g = gap_at(pos, i);
    s += 1 + (g >= (1u << 7)) + (g >= (1u << 14)) + (g >= (1u << 21)) + (g >= (1u << 28));
  }
  return s;
}

uint32_t golomb_parameter(const uint32_t* pos, size_t k) {
  if (k == 0) return 1;
  // Sum of gaps = last position + 1 - k.
  double mean = (double(pos[k - 1]) + 1.0 - double(k)) / double(k);
  double p = 1.0 / (mean + 1.0);  // probability that the next element is a change
  if (p >= 0.5) return 1;
  double m = std::ceil(std::log(2.0 - p) / -std::log1p(-p));
  if (!(m >= 1.0)) return 1;
  return m > 2147483648.0 ? 2147483648u : uint32_t(m);
}

size_t golomb_index_size(const uint32_t* pos, size_t k, uint32_t m) {
  TruncBin tb(m);
  FastDiv fd(m);
  uint64_t bits = 0;
  for (size_t i = 0; i < k; ++i) {
    uint32_t g = gap_at(pos, i);
    uint32_t q = fd.div(g);
    bits += q + 1 + tb.len(g - q * m);
  }
  return leb128_size(m) + (bits + 7) / 8;
}

namespace {
// A long truncated-binary remainder v (b bits) is written as its high b - 1 bits, then its low bit:
// LSB first, that is (v >> 1) in the low b - 1 bits and (v & 1) above them.
inline uint64_t reverse_low_bit(uint64_t v, int b) { return (v >> 1) | ((v & 1) << (b - 1)); }
}  // namespace

void encode_index(IndexCodec c, const uint32_t* pos, size_t k, uint32_t n, uint32_t golomb_m,
                  std::vector<uint8_t>& out) {
  switch (c) {
    case IndexCodec::kDense: return;
    case IndexCodec::kLeb128:
      for (size_t i = 0; i < k; ++i) put_leb128(out, gap_at(pos, i));
      return;
    case IndexCodec::kBitmap: {
      size_t base = out.size();
      out.resize(base + bitmap_index_size(n), 0);
      for (size_t i = 0; i < k; ++i) out[base + (pos[i] >> 3)] |= uint8_t(1u << (pos[i] & 7));
      return;
    }
    case IndexCodec::kGolomb: {
      uint32_t m = golomb_m;
      put_leb128(out, m);
      TruncBin tb(m);
      FastDiv fd(m);
      BitWriter bw(out);
      for (size_t i = 0; i < k; ++i) {
        uint32_t g = gap_at(pos, i);
        uint32_t q = fd.div(g);
        uint32_t r = g - q * m;
        if (q + 1 + tb.b <= 56) {  // the whole codeword in one put (LSB first: q zeros, a one, the remainder)
          uint64_t bits = uint64_t(1) << q;
          int len = int(q) + 1;
          if (tb.b > 0) {
            const uint64_t rem = r < tb.u ? r : reverse_low_bit(r + tb.u, tb.b);
            bits |= rem << len;
            len += r < tb.u ? tb.b - 1 : tb.b;
          }
          bw.put(bits, len);
          continue;
        }
        bw.put_zeros(q);
        bw.put(1, 1);
        if (tb.b == 0) continue;  // m = 1: the remainder is always 0 and takes no bits
        if (r < tb.u) {
          bw.put(r, tb.b - 1);
        } else {
          uint32_t v = r + tb.u;
          bw.put(v >> 1, tb.b - 1);
          bw.put(v & 1, 1);
        }
      }
      bw.flush();
      return;
    }
  }
}

static Status bad(const char* codec, const std::string& what) {
  return CorruptData(std::string(codec) + " index: " + what);
}

static Status decode_leb128(std::span<const uint8_t> in, uint32_t n, uint32_t k, uint32_t* pos) {
  const uint8_t* p = in.data();
  const uint8_t* end = p + in.size();
  uint64_t next = 0;  // smallest position the next gap may produce
  for (uint32_t i = 0; i < k; ++i) {
    uint64_t g = 0;
    int shift = 0;
    while (true) {
      if (p == end) return bad("leb128", "truncated");
      uint8_t b = *p++;
      if (shift == 28 && (b & 0xf0)) return bad("leb128", "gap exceeds 32 bits");
      g |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        if (b == 0 && shift > 0) return bad("leb128", "overlong gap");
        break;
      }
      shift += 7;
    }
    uint64_t q = next + g;
    if (q >= n) return bad("leb128", "position beyond chunk end");
    pos[i] = uint32_t(q);
    next = q + 1;
  }
  if (p != end) return bad("leb128", "trailing bytes");
  return Status::Ok();
}

static Status decode_bitmap(std::span<const uint8_t> in, uint32_t n, uint32_t k, uint32_t* pos) {
  if (in.size() != bitmap_index_size(n)) return bad("bitmap", "size does not match element count");
  if (n % 8 && (in.back() >> (n % 8)) != 0) return bad("bitmap", "bits set beyond chunk end");
  uint32_t j = 0;
  for (size_t byte = 0; byte < in.size(); ++byte) {
    uint32_t b = in[byte];
    while (b) {
      if (j == k) return bad("bitmap", "more bits set than changes");
      pos[j++] = uint32_t(byte * 8 + __builtin_ctz(b));
      b &= b - 1;
    }
  }
  if (j != k) return bad("bitmap", "fewer bits set than changes");
  return Status::Ok();
}

namespace {

// What every Golomb symbol of one stream shares: the parameter and its truncated-binary split.
struct GolombDec {
  uint32_t n, m;
  TruncBin tb;
  int rb;              // bits of a short remainder (b - 1; 0 when m = 1)
  uint64_t rmask;      // (1 << rb) - 1
  uint64_t long_from;  // remainders from here take one more bit (none when m = 1)
  uint64_t qlimit;     // no valid quotient exceeds n / m
  GolombDec(uint32_t n_, uint32_t m_)
      : n(n_), m(m_), tb(m_), rb(tb.b > 0 ? tb.b - 1 : 0), rmask((1ull << rb) - 1),
        long_from(tb.b > 0 ? tb.u : ~0ull), qlimit(n_ / m_) {}
};

// The bulk of a stream, from bit *bit on: while 8 bytes can be loaded ahead, a 64-bit buffer refilled
// before every symbol (without a branch: whole bytes are added to fill it to 56-63 bits) holds the
// whole codeword almost always, and the remainder's short or long form is picked without a branch.
// Stops at the first symbol it cannot take whole (a quotient of more than ~50 bits, the last bytes) or
// after k symbols; *done and *bit say how far it got. Its checks are the slow path's, so both reject
// the same streams.
Status golomb_bulk(std::span<const uint8_t> in, const GolombDec& g, uint32_t k, uint32_t* pos, uint32_t* done,
                   uint64_t* bit, uint64_t* next) {
  const uint8_t* const begin = in.data();
  const uint8_t* const end = begin + in.size();
  const uint8_t* ptr = begin + (*bit >> 3);
  uint64_t buf = 0, at = *next;
  int have = 0;  // invariant: buf's low `have` bits are the stream's next bits, up to byte ptr
  if (ptr + 8 > end || k == 0) {
    *done = 0;
    return Status::Ok();
  }
  memcpy(&buf, ptr, 8);  // the first load starts inside a byte: drop the bits already read
  ptr += 7;
  buf >>= (*bit & 7);
  have = 56 - int(*bit & 7);
  uint32_t i = 0;
  for (; i < k && ptr + 8 <= end; ++i) {
    uint64_t w;
    memcpy(&w, ptr, 8);
    buf |= w << have;
    ptr += (63 - have) >> 3;
    have |= 56;
    if (buf == 0) break;
    const int z = __builtin_ctzll(buf);
    if (z + g.rb + 2 > have) break;
    uint64_t r = (buf >> (z + 1)) & g.rmask;
    const int lng = r >= g.long_from;
    const uint64_t low = (buf >> (z + 1 + g.rb)) & 1;
    r = lng ? ((r << 1) | low) - g.tb.u : r;
    if (uint64_t(z) > g.qlimit) return bad("golomb", "truncated or oversized quotient");
    const uint64_t p = at + uint64_t(z) * g.m + r;
    if (p >= g.n) return bad("golomb", "position beyond chunk end");
    pos[i] = uint32_t(p);
    at = p + 1;
    const int used = z + 1 + g.rb + lng;
    buf >>= used;
    have -= used;
  }
  *done = i;
  *bit = uint64_t(ptr - begin) * 8 - uint64_t(have);
  *next = at;
  return Status::Ok();
}

}  // namespace

static Status decode_golomb(std::span<const uint8_t> in, uint32_t n, uint32_t k, uint32_t* pos) {
  ByteReader br(in, "golomb index");
  uint64_t m64;
  SPARROW_RETURN_IF_ERROR(br.leb128(&m64, 32));
  if (m64 == 0 || m64 > 2147483648ull) return bad("golomb", "parameter out of range");
  const GolombDec g(n, uint32_t(m64));
  const std::span<const uint8_t> bits = in.subspan(br.pos());
  BitReader rd(bits);
  uint64_t next = 0;
  uint32_t i = 0;
  while (i < k) {
    uint32_t done = 0;
    uint64_t at = rd.pos();
    SPARROW_RETURN_IF_ERROR(golomb_bulk(bits, g, k - i, pos + i, &done, &at, &next));
    rd.seek(at);
    i += done;
    // What the bulk could not take: one symbol of any length, then back to the bulk.
    if (i == k) break;
    uint64_t q, r;
    if (!rd.unary(g.qlimit, &q)) return bad("golomb", "truncated or oversized quotient");
    if (!rd.get(g.rb, &r)) return bad("golomb", "truncated remainder");
    if (r >= g.long_from) {
      uint64_t low;
      if (!rd.get(1, &low)) return bad("golomb", "truncated remainder");
      r = ((r << 1) | low) - g.tb.u;
    }
    uint64_t p = next + q * g.m + r;
    if (p >= n) return bad("golomb", "position beyond chunk end");
    pos[i++] = uint32_t(p);
    next = p + 1;
  }
  if (rd.bits_left() >= 8) return bad("golomb", "trailing bytes");
  uint64_t pad;
  if (!rd.get(int(rd.bits_left()), &pad) || pad != 0) return bad("golomb", "non-zero padding bits");
  return Status::Ok();
}

Status decode_index(IndexCodec c, std::span<const uint8_t> in, uint32_t n, uint32_t k, uint32_t* pos) {
  if (k > n) return bad(index_codec_name(c), "more changes than elements");
  switch (c) {
    case IndexCodec::kDense:
      if (!in.empty()) return bad("dense", "unexpected index bytes");
      if (k != n) return bad("dense", "change count differs from element count");
      for (uint32_t i = 0; i < n; ++i) pos[i] = i;
      return Status::Ok();
    case IndexCodec::kLeb128: return decode_leb128(in, n, k, pos);
    case IndexCodec::kBitmap: return decode_bitmap(in, n, k, pos);
    case IndexCodec::kGolomb: return decode_golomb(in, n, k, pos);
  }
  return bad("unknown", "codec id " + std::to_string(int(c)));
}

double index_entropy_bits(uint64_t n, uint64_t k) {
  if (k == 0 || k >= n) return 0.0;
  // lgamma_r: lgamma writes the global signgam, a data race when encoder threads call it together.
  int sign = 0;
  auto lg = [&](double x) { return lgamma_r(x, &sign); };
  return (lg(double(n) + 1) - lg(double(k) + 1) - lg(double(n - k) + 1)) / std::log(2.0);
}

}  // namespace sparrow::format
