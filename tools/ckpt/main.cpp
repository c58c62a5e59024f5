// sparrow-ckpt: sparse delta checkpoints on disk, in the wire's format (docs/ckpt.md).
//
//   sparrow-ckpt diff OLD NEW -o STEP.spd     the step from OLD to NEW (safetensors files, or --raw)
//   sparrow-ckpt apply BASE STEP... -o OUT    BASE with a chain of steps applied, written atomically
//   sparrow-ckpt inspect STEP                 versions, tensors, codecs, sizes, digests, ratio
//   sparrow-ckpt verify STEP [--base BASE]    every checksum and structural rule; with a base, a full apply
//
// Exit status: 0 ok, 1 failed (bad or mismatched input, I/O), 2 usage.
#include <getopt.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "format/checkpoint.h"
#include "format/container.h"
#include "format/digest.h"
#include "kernels/cpu/delta.h"
#include "tools/ckpt/safetensors.h"
#include "core/args.h"

using namespace sparrow;
using kernels::cpu::TensorSpec;

namespace {

constexpr int kOk = 0, kFailed = 1, kUsage = 2;

void usage(FILE* f) {
  fprintf(f,
          "usage: sparrow-ckpt diff OLD NEW -o STEP.spd [--base-version N] [--codec auto|paper] [--chunk-elems N]\n"
          "                         [--threads N] [--raw DTYPE]\n"
          "       sparrow-ckpt apply BASE STEP.spd... -o OUT [--raw DTYPE] [--threads N]\n"
          "       sparrow-ckpt inspect STEP.spd [--json]\n"
          "       sparrow-ckpt verify STEP.spd [--base BASE] [--raw DTYPE]\n"
          "\n"
          "Files are safetensors (names, dtypes and shapes must match between OLD and NEW), or with\n"
          "--raw DTYPE one raw little-endian array of that sparrow dtype (bfloat16, float16, float32, ...).\n"
          "STEP.spd is a sparrow step file: a small container around the checkpoint exactly as it travels\n"
          "on the wire (docs/format.md). Outputs are written to a temporary file and renamed: never half-written.\n"
          "  -o, --output FILE     output file (diff, apply)\n"
          "  --base-version N      version number of OLD (default 1; the step goes N -> N+1), 1..2^62\n"
          "  --codec auto|paper    auto: smallest codec per chunk (default); paper: SparrowRL's leb128 + overwrite\n"
          "  --chunk-elems N       elements per chunk (default 1048576), 1024..2^30\n"
          "  --threads N           CPU threads (default 1: one core), 1..1024\n"
          "  --raw DTYPE           raw arrays instead of safetensors\n"
          "  --base FILE           (verify) also apply the step to FILE in memory and check the result\n"
          "  --json                (inspect) one JSON object\n"
          "  -q, --quiet           no progress lines on stderr\n");
}

struct Args {
  std::string cmd, out, codec = "auto", raw, base;
  uint8_t raw_dtype = 0;  // the sparrow dtype named by --raw
  std::vector<std::string> files;
  uint64_t base_version = 1;
  uint32_t chunk_elems = 0;
  int threads = 1;
  bool json = false, quiet = false;
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

bool parse_uint(const char* s, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (!s || !*s || *s == '-' || *s == '+') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// The command, its files and the options it needs, once parsed: kOk, or kUsage after a one-line reason.
int check_command(Args* a) {
  const std::map<std::string, std::pair<size_t, size_t>> arity = {
      {"diff", {2, 2}}, {"apply", {2, 1u << 20}}, {"inspect", {1, 1}}, {"verify", {1, 1}}};
  auto it = arity.find(a->cmd);
  if (it == arity.end()) {
    fprintf(stderr, "sparrow-ckpt: unknown command '%s' (diff, apply, inspect, verify; see --help)\n", a->cmd.c_str());
    return kUsage;
  }
  if (a->files.size() < it->second.first || a->files.size() > it->second.second) {
    fprintf(stderr, "sparrow-ckpt %s: wrong number of files (see --help)\n", a->cmd.c_str());
    return kUsage;
  }
  if ((a->cmd == "diff" || a->cmd == "apply") && a->out.empty()) {
    fprintf(stderr, "sparrow-ckpt %s: -o OUTPUT is required\n", a->cmd.c_str());
    return kUsage;
  }
  if (!a->raw.empty()) {
    bool known = false;
    for (uint8_t d = 0; d <= 9 && !known; ++d)
      if (a->raw == format::dtype_name(d)) {
        known = true;
        a->raw_dtype = d;
      }
    if (!known) {
      fprintf(stderr, "sparrow-ckpt: --raw '%s': expected a sparrow dtype (int8, uint8, int32, uint32, int64, uint64, "
                      "float16, float32, float64, bfloat16)\n", a->raw.c_str());
      return kUsage;
    }
  }
  return kOk;
}

// Parses argv; returns kOk, or kUsage after printing a one-line reason.
int parse_args(int argc, char** argv, Args* a) {
  if (argc < 2) {
    usage(stderr);
    return kUsage;
  }
  a->cmd = argv[1];
  if (a->cmd == "-h" || a->cmd == "--help" || a->cmd == "help") {
    usage(stdout);
    return -1;
  }
  static option opts[] = {{"output", 1, 0, 'o'}, {"base-version", 1, 0, 'B'}, {"codec", 1, 0, 'C'},
                          {"chunk-elems", 1, 0, 'E'}, {"threads", 1, 0, 'T'}, {"raw", 1, 0, 'R'},
                          {"base", 1, 0, 'b'}, {"json", 0, 0, 'J'}, {"quiet", 0, 0, 'q'}, {"help", 0, 0, 'h'},
                          {nullptr, 0, 0, 0}};
  optind = 2;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":o:qh", opts, nullptr)) != -1;) {
    uint64_t v = 0;
    switch (c) {
      case 'o': a->out = optarg; break;
      case 'B':
        if (!parse_uint(optarg, 1, uint64_t(1) << 62, &v)) {
          fprintf(stderr, "sparrow-ckpt: --base-version '%s': expected an integer in 1..2^62\n", optarg);
          return kUsage;
        }
        a->base_version = v;
        break;
      case 'C':
        a->codec = optarg;
        if (a->codec != "auto" && a->codec != "paper") {
          fprintf(stderr, "sparrow-ckpt: --codec '%s': expected auto or paper\n", optarg);
          return kUsage;
        }
        break;
      case 'E':
        if (!parse_uint(optarg, 1024, format::kMaxChunkElems, &v)) {
          fprintf(stderr, "sparrow-ckpt: --chunk-elems '%s': expected an integer in 1024..%u\n", optarg, format::kMaxChunkElems);
          return kUsage;
        }
        a->chunk_elems = uint32_t(v);
        break;
      case 'T':
        if (!parse_uint(optarg, 1, 1024, &v)) {
          fprintf(stderr, "sparrow-ckpt: --threads '%s': expected an integer in 1..1024\n", optarg);
          return kUsage;
        }
        a->threads = int(v);
        break;
      case 'R': a->raw = optarg; break;
      case 'b': a->base = optarg; break;
      case 'J': a->json = true; break;
      case 'q': a->quiet = true; break;
      case 'h': usage(stdout); return -1;
      case ':': fprintf(stderr, "sparrow-ckpt: %s needs a value\n", argv[optind - 1]); return kUsage;
      default: fprintf(stderr, "sparrow-ckpt: unknown option '%s' (see --help)\n", argv[optind - 1]); return kUsage;
    }
  }
  for (int i = optind; i < argc; ++i) a->files.push_back(argv[i]);
  return check_command(a);
}

void progress(const Args& a, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void progress(const Args& a, const char* fmt, ...) {
  if (a.quiet) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "sparrow-ckpt: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

Status in_context(const Status& s, const std::string& where) {
  Status c = s;
  c.context(where);
  return c;
}

int fail(const Status& s) {
  fprintf(stderr, "sparrow-ckpt: %s\n", s.to_string().c_str());
  return kFailed;
}

// One input: a safetensors file (mapped) or a raw array (read).
struct Input {
  std::unique_ptr<ckpt::SafetensorsFile> st;
  std::vector<uint8_t> raw;
  std::vector<TensorSpec> layout;
  std::vector<const uint8_t*> ptrs;
  uint64_t bytes = 0;
};

Result<Input> load(const Args& a, const std::string& path) {
  Input in;
  if (!a.raw.empty()) {
    SPARROW_ASSIGN_OR_RETURN(in.raw, format::read_file(path));
    const uint8_t d = a.raw_dtype;
    const uint32_t es = format::dtype_size(d);
    if (in.raw.size() % es)
      return InvalidArgument(path + ": " + std::to_string(in.raw.size()) + " bytes is not a whole number of " + a.raw);
    in.layout = {{"data", d, in.raw.size() / es}};
    in.ptrs = {in.raw.data()};
    in.bytes = in.raw.size();
    return in;
  }
  SPARROW_ASSIGN_OR_RETURN(in.st, ckpt::SafetensorsFile::open(path));
  in.layout = in.st->layout();
  for (auto& t : in.st->tensors()) {
    in.ptrs.push_back(in.st->data(t));
    in.bytes += t.end - t.begin;
  }
  return in;
}

Status same_layout(const Input& x, const Input& y, const std::string& xp, const std::string& yp) {
  if (x.st && y.st) return ckpt::check_same_layout(*x.st, *y.st);
  if (x.layout.size() != y.layout.size() || (x.layout.size() && x.layout[0].count != y.layout[0].count))
    return Error(Code::kInvalidUsage, xp + " and " + yp + " differ in size");
  return Status::Ok();
}

std::string iso_now() {
  char b[64];
  time_t t = time(nullptr);
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
  return b;
}

std::string basename_of(const std::string& p) { return p.substr(p.find_last_of('/') + 1); }

// The output's folder must exist and be writable before any work is done.
Status check_output(const std::string& out) {
  const size_t slash = out.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : out.substr(0, slash);
  if (access(dir.c_str(), W_OK) != 0)
    return InvalidArgument("cannot write '" + out + "': folder '" + dir + "': " + strerror(errno));
  return Status::Ok();
}

int cmd_diff(const Args& a) {
  if (Status s = check_output(a.out); !s.ok()) return fail(s);
  double t0 = now_s();
  auto oldf = load(a, a.files[0]);
  if (!oldf.ok()) return fail(oldf.status());
  auto newf = load(a, a.files[1]);
  if (!newf.ok()) return fail(newf.status());
  if (Status s = same_layout(*oldf, *newf, a.files[0], a.files[1]); !s.ok()) return fail(s);
  progress(a, "%s and %s: %zu tensors, %.2f GB each", a.files[0].c_str(), a.files[1].c_str(), oldf->layout.size(),
           oldf->bytes / 1e9);
  kernels::cpu::DeltaEncoder enc(oldf->layout);
  std::vector<const void*> base(oldf->ptrs.begin(), oldf->ptrs.end()), cur(newf->ptrs.begin(), newf->ptrs.end());
  // The mapped base is the encoder's shadow as it is (no copy); its digests come out of the encode.
  if (Status s = enc.adopt_view(base, a.base_version); !s.ok()) return fail(s);
  kernels::cpu::EncodeOptions eo;
  eo.threads = a.threads;
  eo.chunk_elems = a.chunk_elems;
  eo.paper_format = a.codec == "paper";
  kernels::cpu::EncodeStats es;
  double t2 = now_s();
  auto ck = enc.encode(cur, eo, &es);
  if (!ck.ok()) return fail(ck.status());
  const double enc_s = now_s() - t2;
  progress(a, "compared %s (version %llu) with %s: %llu of %llu elements changed (%.3f%%), %.2f GB -> %.3f MB (%.1fx) in %.2f s (%.2f GB/s dense)",
           a.files[0].c_str(), (unsigned long long)a.base_version,
           a.files[1].c_str(), (unsigned long long)es.changes, (unsigned long long)es.elements, 100 * es.density(),
           es.dense_bytes / 1e9, es.wire_bytes / 1e6, double(es.dense_bytes) / std::max<uint64_t>(1, es.wire_bytes), enc_s,
           es.dense_bytes / std::max(1e-9, enc_s) / 1e9);
  nlohmann::json meta = {{"tool", "sparrow-ckpt"}, {"old", basename_of(a.files[0])}, {"new", basename_of(a.files[1])},
                         {"created", iso_now()}, {"codec", a.codec}};
  if (oldf->st) {
    nlohmann::json dt = nlohmann::json::object();
    for (auto& t : oldf->st->tensors()) dt[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}};
    meta["safetensors"] = dt;
  }
  auto file = format::encode_step_file(ck.value(), meta.dump());
  if (Status s = format::write_file_atomic(a.out, file); !s.ok()) return fail(s);
  progress(a, "wrote %s (%zu bytes) in %.2f s total", a.out.c_str(), file.size(), now_s() - t0);
  return kOk;
}

Result<format::StepFile> load_step(const std::string& path) {
  SPARROW_ASSIGN_OR_RETURN(auto bytes, format::read_file(path));
  auto f = format::decode_step_file(bytes);
  if (!f.ok()) return in_context(f.status(), path);
  return f;
}

// A step file with its checkpoint parsed (every checksum and structural rule); the view points into
// `file.payload`, whose heap buffer stays put when the struct moves.
struct ParsedStep {
  format::StepFile file;
  format::CheckpointView cv;
};
Result<ParsedStep> parse_step(const std::string& path) {
  ParsedStep p;
  SPARROW_ASSIGN_OR_RETURN(p.file, load_step(path));
  auto cv = format::parse_checkpoint(p.file.payload);
  if (!cv.ok()) return in_context(cv.status(), path);
  p.cv = std::move(cv.value());
  return p;
}

// Applies `steps` in order to `bufs` (copies of the base); the first step's base version is taken
// as the base's, after its content digests are computed from the buffers themselves.
Status apply_chain(const Args& a, std::vector<TensorSpec>& layout, std::vector<std::vector<uint8_t>>& bufs,
                   const std::vector<std::string>& steps) {
  std::vector<void*> dst;
  for (auto& b : bufs) dst.push_back(b.data());
  kernels::cpu::ReceiverState st;
  kernels::cpu::ApplyOptions ao;
  ao.threads = a.threads;
  ao.verify_base = false;  // the digests below are computed from these very buffers
  for (size_t i = 0; i < steps.size(); ++i) {
    SPARROW_ASSIGN_OR_RETURN(auto f, load_step(steps[i]));
    size_t used = 0;
    auto h = format::parse_header(f.payload, &used);
    if (!h.ok()) return in_context(h.status(), steps[i]);
    if (i == 0) {
      st.version = h->base_version;
      for (size_t t = 0; t < layout.size(); ++t)
        st.digests.push_back(format::digest_tensor(uint32_t(t), bufs[t].data(), layout[t].count, layout[t].elem_size(), a.threads));
    }
    kernels::cpu::ApplyStats as;
    double t0 = now_s();
    Status s = kernels::cpu::apply_checkpoint(f.payload, dst, layout, st, ao, &as);
    if (!s.ok()) {
      if (s.code() == Code::kVersionMismatch && i == 0)
        s.context("the base file is not the version this step was made from");
      return std::move(s).context(steps[i]);
    }
    progress(a, "applied %s: version %llu -> %llu, %llu changes in %.2f s", steps[i].c_str(),
             (unsigned long long)h->base_version, (unsigned long long)h->new_version, (unsigned long long)as.changes,
             now_s() - t0);
  }
  return Status::Ok();
}

int cmd_apply(const Args& a) {
  if (Status s = check_output(a.out); !s.ok()) return fail(s);
  auto basef = load(a, a.files[0]);
  if (!basef.ok()) return fail(basef.status());
  std::vector<std::vector<uint8_t>> bufs;
  for (size_t t = 0; t < basef->ptrs.size(); ++t)
    bufs.emplace_back(basef->ptrs[t], basef->ptrs[t] + basef->layout[t].bytes());
  progress(a, "base %s: %zu tensors, %.2f GB", a.files[0].c_str(), bufs.size(), basef->bytes / 1e9);
  std::vector<std::string> steps(a.files.begin() + 1, a.files.end());
  if (Status s = apply_chain(a, basef->layout, bufs, steps); !s.ok()) return fail(s);
  Status w;
  if (basef->st) {
    std::vector<const uint8_t*> ptrs;
    for (auto& b : bufs) ptrs.push_back(b.data());
    w = ckpt::write_like(*basef->st, ptrs, a.out);
  } else {
    w = format::write_file_atomic(a.out, bufs[0]);
  }
  if (!w.ok()) return fail(w);
  progress(a, "wrote %s", a.out.c_str());
  return kOk;
}

int cmd_inspect(const Args& a) {
  auto ps = parse_step(a.files[0]);
  if (!ps.ok()) return fail(ps.status());
  const format::StepFile* f = &ps->file;
  const format::CheckpointView* cv = &ps->cv;
  const auto& h = cv->header;
  struct Per { uint64_t chunks = 0, changes = 0, bytes = 0; };
  std::vector<Per> per(h.tensors.size());
  std::map<std::string, uint64_t> codecs;
  uint64_t dense = 0;
  for (auto& t : h.tensors) dense += t.count * t.elem_size;
  for (auto& c : cv->chunks) {
    auto& p = per[c.h.tensor];
    p.chunks++;
    p.changes += c.h.change_count;
    p.bytes += 48 + c.h.index_bytes + c.h.value_bytes;
    codecs[std::string(format::index_codec_name(c.h.index_codec)) + "+" + format::value_codec_name(c.h.value_codec)]++;
  }
  nlohmann::json j;
  j["file"] = a.files[0];
  j["metadata"] = nlohmann::json::parse(f->metadata, nullptr, false);
  j["format_version"] = 1;
  j["full"] = h.full();
  j["base_version"] = h.base_version;
  j["new_version"] = h.new_version;
  j["chunk_elems"] = h.chunk_elems;
  j["dense_bytes"] = dense;
  j["wire_bytes"] = f->payload.size();
  j["ratio"] = f->payload.empty() ? 0.0 : double(dense) / double(f->payload.size());
  j["codecs"] = codecs;
  nlohmann::json ts = nlohmann::json::array();
  uint64_t changes = 0, elems = 0;
  for (size_t t = 0; t < h.tensors.size(); ++t) {
    const auto& e = h.tensors[t];
    char bd[32], nd[32];
    snprintf(bd, sizeof bd, "%016llx", (unsigned long long)e.base_digest);
    snprintf(nd, sizeof nd, "%016llx", (unsigned long long)cv->footer.new_digests[t]);
    ts.push_back({{"name", e.name}, {"dtype", format::dtype_name(e.dtype)}, {"count", e.count}, {"chunks", per[t].chunks},
                  {"changes", per[t].changes}, {"bytes", per[t].bytes}, {"base_digest", bd}, {"new_digest", nd}});
    changes += per[t].changes;
    elems += e.count;
  }
  j["changes"] = changes;
  j["density"] = elems ? double(changes) / double(elems) : 0.0;
  j["tensors"] = ts;
  if (a.json) {
    printf("%s\n", j.dump().c_str());
    return kOk;
  }
  printf("%s: %s, version %llu -> %llu, %zu tensors, chunks of %u elements\n", a.files[0].c_str(),
         h.full() ? "full snapshot" : "delta", (unsigned long long)h.base_version, (unsigned long long)h.new_version,
         h.tensors.size(), h.chunk_elems);
  printf("  %llu of %llu elements changed (%.3f%%); %.3f MB dense -> %.3f MB on the wire (%.1fx)\n",
         (unsigned long long)changes, (unsigned long long)elems, 100 * j["density"].get<double>(), dense / 1e6,
         f->payload.size() / 1e6, j["ratio"].get<double>());
  printf("  codecs (index+value: chunks):");
  for (auto& [k, v] : codecs) printf(" %s: %llu", k.c_str(), (unsigned long long)v);
  printf("\n  metadata: %s\n", f->metadata.c_str());
  printf("  %-40s %-9s %12s %7s %10s %10s %-16s %-16s\n", "tensor", "dtype", "elements", "chunks", "changes", "bytes",
         "base_digest", "new_digest");
  for (auto& t : ts)
    printf("  %-40s %-9s %12llu %7llu %10llu %10llu %-16s %-16s\n", t["name"].get<std::string>().c_str(),
           t["dtype"].get<std::string>().c_str(), (unsigned long long)t["count"].get<uint64_t>(),
           (unsigned long long)t["chunks"].get<uint64_t>(), (unsigned long long)t["changes"].get<uint64_t>(),
           (unsigned long long)t["bytes"].get<uint64_t>(), t["base_digest"].get<std::string>().c_str(),
           t["new_digest"].get<std::string>().c_str());
  return kOk;
}

// Says "valid" only once every check asked for passed (a step that does not apply to --base is not).
int cmd_verify(const Args& a) {
  auto ps = parse_step(a.files[0]);
  if (!ps.ok()) return fail(ps.status());
  if (!a.base.empty()) {
    auto basef = load(a, a.base);
    if (!basef.ok()) return fail(basef.status());
    std::vector<std::vector<uint8_t>> bufs;
    for (size_t t = 0; t < basef->ptrs.size(); ++t)
      bufs.emplace_back(basef->ptrs[t], basef->ptrs[t] + basef->layout[t].bytes());
    if (Status s = apply_chain(a, basef->layout, bufs, {a.files[0]}); !s.ok()) return fail(s);
  }
  printf("%s: container and checkpoint valid (%zu chunks, every checksum and structural rule checked)\n",
         a.files[0].c_str(), ps->cv.chunks.size());
  if (!a.base.empty())
    printf("%s: applies to %s; the result's content digests match the step's\n", a.files[0].c_str(), a.base.c_str());
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  Args a;
  int rc = parse_args(argc, argv, &a);
  if (rc == -1) return kOk;
  if (rc != kOk) return rc;
  if (a.cmd == "diff") return cmd_diff(a);
  if (a.cmd == "apply") return cmd_apply(a);
  if (a.cmd == "inspect") return cmd_inspect(a);
  return cmd_verify(a);
}
