#include "gen/generator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "format/checkpoint.h"

namespace sparrow::gen {
namespace {

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// 65536 standard normal quantiles: four table lookups per 64-bit random number.
const float* normal_table() {
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    for (int i = 0; i < 65536; ++i) {
      double p = (i + 0.5) / 65536.0;
      // Inverse normal CDF (Acklam's rational approximation).
      static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                 1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
      static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01, -1.328068155288572e+01};
      static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
      static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
      double q, r, x;
      if (p < 0.02425) {
        q = std::sqrt(-2 * std::log(p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
      } else if (p > 1 - 0.02425) {
        q = std::sqrt(-2 * std::log(1 - p));
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
      } else {
        q = p - 0.5;
        r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
      }
      v[i] = float(x);
    }
    return v;
  }();
  return t.data();
}

constexpr uint64_t kBlock = 1 << 16;

bool is_norm(const std::string& name) { return name.find("norm") != std::string::npos; }

}  // namespace

uint16_t float_to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  if ((b & 0x7fffffff) > 0x7f800000) return uint16_t((b >> 16) | 0x40);  // quiet NaN
  b += 0x7fff + ((b >> 16) & 1);
  return uint16_t(b >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t b = uint32_t(h) << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

Result<ModelRole> open_model(const GenOptions& opt, bool with_generator) {
  ModelRole r;
  if (with_generator) {
    SPARROW_ASSIGN_OR_RETURN(r.gen, UpdateGenerator::create(opt));
    r.tensors = r.gen->tensors();
  } else {
    SPARROW_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config(opt.model));
    r.tensors = model_tensors(cfg, opt.layers, opt.vocab);
  }
  return r;
}

Result<std::unique_ptr<UpdateGenerator>> UpdateGenerator::create(const GenOptions& opt) {
  if (!(opt.lr > 0) || !(opt.beta1 >= 0 && opt.beta1 < 1) || !(opt.beta2 > 0 && opt.beta2 < 1))
    return InvalidArgument("generator: lr must be > 0 and betas in [0, 1)");
  SPARROW_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config(opt.model));
  std::unique_ptr<UpdateGenerator> g(new UpdateGenerator());
  g->opt_ = opt;
  g->config_ = cfg;
  g->tensors_ = model_tensors(cfg, opt.layers, opt.vocab);
  const size_t nt = g->tensors_.size();
  g->master_.resize(nt);
  g->m_.resize(nt);
  g->v_.resize(nt);
  g->bf16_.resize(nt);
  const float* nt_tab = normal_table();
  int threads = opt.threads > 0 ? opt.threads : kernel_threads();
  for (size_t t = 0; t < nt; ++t) {
    uint64_t n = g->tensors_[t].count;
    g->master_[t].resize(n);
    g->m_[t].resize(n);
    g->v_[t].resize(n);
    g->bf16_[t].resize(n);
    const bool norm = is_norm(g->tensors_[t].name);
    uint64_t nb = (n + kBlock - 1) / kBlock;
    parallel_for(nb, threads, [&](size_t b, int) {
      uint64_t s = opt.seed * 0x9E3779B97F4A7C15ULL ^ (uint64_t(t) << 32) ^ b;
      uint64_t r = 0;
      // Gradient scale varies per 4096-element row group (log-normal), as gradients do per row.
      float gscale = 1.0f;
      for (uint64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
        if (i % 4096 == 0) {
          uint64_t x = splitmix64(s);
          gscale = std::exp(0.5f * nt_tab[x & 0xffff]);
        }
        if ((i & 3) == 0) r = splitmix64(s);
        float z1 = nt_tab[(r >> (16 * (i & 3))) & 0xffff];
        uint64_t r2 = splitmix64(s);
        float z2 = nt_tab[r2 & 0xffff];
        // Pretrained-like weights: matrices ~ N(0, 0.02), norm gains ~ 1 +- 0.1.
        float w = norm ? 1.0f + 0.1f * z1 : 0.02f * z1;
        g->master_[t][i] = w;
        g->bf16_[t][i] = float_to_bf16(w);
        // Stationary Adam moments for gradient noise of std gscale: v = gscale^2,
        // m ~ N(0, gscale^2 (1 - b1) / (1 + b1)).
        g->v_[t][i] = gscale * gscale;
        g->m_[t][i] = gscale * float(std::sqrt((1 - opt.beta1) / (1 + opt.beta1))) * z2;
      }
    });
  }
  return g;
}

std::vector<const void*> UpdateGenerator::buffers() const {
  std::vector<const void*> v;
  for (auto& b : bf16_) v.push_back(b.data());
  return v;
}

std::vector<void*> UpdateGenerator::mutable_buffers() {
  std::vector<void*> v;
  for (auto& b : bf16_) v.push_back(b.data());
  return v;
}

uint64_t UpdateGenerator::step() {
  ++step_;
  const float* nt_tab = normal_table();
  const float b1 = float(opt_.beta1), b2 = float(opt_.beta2), lr = float(opt_.lr), eps = float(opt_.eps);
  int threads = opt_.threads > 0 ? opt_.threads : kernel_threads();
  std::atomic<uint64_t> changed{0};
  for (size_t t = 0; t < tensors_.size(); ++t) {
    uint64_t n = tensors_[t].count;
    uint64_t nb = (n + kBlock - 1) / kBlock;
    float* w = master_[t].data();
    float* m = m_[t].data();
    float* v = v_[t].data();
    uint16_t* out = bf16_[t].data();
    parallel_for(nb, threads, [&](size_t b, int) {
      uint64_t s = (opt_.seed + 0x1000 * step_) * 0xD1B54A32D192ED03ULL ^ (uint64_t(t) << 32) ^ b;
      uint64_t r = 0, ch = 0;
      float gscale = std::sqrt(v[b * kBlock]);
      for (uint64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
        if (i % 4096 == 0) gscale = std::sqrt(v[i]) + 1e-12f;  // noise level follows the row's history
        if ((i & 3) == 0) r = splitmix64(s);
        float g = gscale * nt_tab[(r >> (16 * (i & 3))) & 0xffff];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        w[i] -= lr * m[i] / (std::sqrt(v[i]) + eps);
        uint16_t nb16 = float_to_bf16(w[i]);
        ch += nb16 != out[i];
        out[i] = nb16;
      }
      changed.fetch_add(ch, std::memory_order_relaxed);
    });
  }
  return changed.load();
}

void fill_like_weights(void* buf, uint64_t n, uint8_t dtype, uint64_t seed, int threads) {
  constexpr uint8_t kF32 = 7, kF64 = 8, kBf16 = 9;
  const uint32_t es = format::dtype_size(dtype);
  if (n == 0 || es == 0) return;
  const float* z = normal_table();
  const uint64_t nb = (n + kBlock - 1) / kBlock;
  uint8_t* p = static_cast<uint8_t*>(buf);
  parallel_for(nb, threads > 0 ? threads : kernel_threads(), [&](size_t b, int) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL ^ (uint64_t(b) << 20), r = 0;
    for (uint64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
      if ((i & 3) == 0) r = splitmix64(s);
      const float w = 0.02f * z[(r >> (16 * (i & 3))) & 0xffff];
      if (dtype == kBf16) {
        const uint16_t v = float_to_bf16(w);
        std::memcpy(p + i * 2, &v, 2);
      } else if (dtype == kF32) {
        std::memcpy(p + i * 4, &w, 4);
      } else if (dtype == kF64) {
        const double d = w;
        std::memcpy(p + i * 8, &d, 8);
      } else {
        const uint64_t x = splitmix64(s);
        std::memcpy(p + i * es, &x, es);
      }
    }
  });
}

namespace {

// A uniform value in [0, n) (n > 0; the modulo's bias is below 2^-20 for the n used here).
uint64_t below(uint64_t& s, uint64_t n) { return splitmix64(s) % n; }

// Exactly k of [0, n) positions, every k-subset equally likely, in O(k) rather than O(n): each position
// is kept with probability k/n, drawn as geometric gaps; the few too many or too few then drop out or
// come in uniformly (a uniform subset of a uniform k'-subset is a uniform k-subset, and so is one with
// uniform others added). Unordered.
std::vector<uint64_t> exact_positions(uint64_t n, uint64_t k, uint64_t& s) {
  std::vector<uint64_t> v;
  if (k == 0) return v;
  if (k >= n) {
    v.resize(n);
    for (uint64_t i = 0; i < n; ++i) v[i] = i;
    return v;
  }
  v.reserve(size_t(k + 8 * std::sqrt(double(k)) + 16));
  const double log_q = std::log1p(-double(k) / double(n));
  for (uint64_t at = 0;;) {
    const double u = double((splitmix64(s) >> 11) + 1) * 0x1.0p-53;  // (0, 1]
    const double gap = std::floor(std::log(u) / log_q);
    if (!(gap < double(n - at))) break;
    at += uint64_t(gap);
    v.push_back(at++);
    if (at >= n) break;
  }
  if (v.size() > k) {  // drop a uniform subset of the surplus (a partial shuffle)
    const size_t drop = v.size() - k;
    for (size_t i = 0; i < drop; ++i) std::swap(v[i], v[i + below(s, v.size() - i)]);
    v.erase(v.begin(), v.begin() + ptrdiff_t(drop));
    return v;
  }
  const size_t drawn = v.size();  // v[0, drawn) is ascending: the gaps only move forward
  while (v.size() < k) {           // add uniform others (rejection: they are few)
    const uint64_t p = below(s, n);
    if (std::binary_search(v.begin(), v.begin() + ptrdiff_t(drawn), p) ||
        std::find(v.begin() + ptrdiff_t(drawn), v.end(), p) != v.end())
      continue;
    v.push_back(p);
  }
  return v;
}

}  // namespace

uint64_t mutate_exact(void* buf, uint64_t n, uint32_t es, double density, uint64_t seed) {
  if (n == 0) return 0;
  const double d = std::min(1.0, std::max(0.0, density));
  const uint64_t k = uint64_t(std::llround(d * double(n)));
  uint64_t s = seed ^ 0x5851F42D4C957F2DULL;
  uint8_t* p = static_cast<uint8_t*>(buf);
  const uint64_t mask = es == 8 ? ~0ull : ((1ull << (8 * es)) - 1);
  for (uint64_t i : exact_positions(n, k, s)) {
    uint64_t flip = splitmix64(s) & mask;
    if (flip == 0) flip = 1;
    for (uint32_t j = 0; j < es; ++j) p[i * es + j] ^= uint8_t(flip >> (8 * j));
  }
  return k;
}

}  // namespace sparrow::gen
