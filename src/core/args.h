// Command-line values for the tools, validated: an integer, a number or a size (64M, 1G) within a
// range, or one of a set of words. A bad value prints one line naming the flag and what it accepts,
// and exits with status 2 (usage), so no tool runs with a silently replaced or wrapped value.
#pragma once

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>

#include <unistd.h>

namespace sparrow::args {

constexpr int kUsage = 2;

// Running out of memory ends a tool with one line naming it and exit status 1, never an abort with
// a backtrace: operator new's failures through the new-handler, a std::bad_alloc thrown elsewhere
// (the mmap path of large buffers) and not caught, on any thread, through the terminate handler.
inline const char*& oom_prog() {
  static const char* prog = "sparrow";
  return prog;
}
[[noreturn]] inline void out_of_memory() {
  fprintf(stderr, "%s: out of memory (use smaller sizes, or raise the limit: ulimit -v)\n", oom_prog());
  fflush(stdout);
  fflush(stderr);
  _exit(1);
}
inline void exit_on_out_of_memory(const char* prog) {
  const char* slash = strrchr(prog, '/');
  oom_prog() = slash ? slash + 1 : prog;
  std::set_new_handler(out_of_memory);
  std::set_terminate([] {
    if (std::exception_ptr e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::bad_alloc&) {
        out_of_memory();
      } catch (...) {
      }
    }
    std::abort();
  });
}

[[noreturn]] inline void bad(const char* prog, const char* flag, const char* value, const std::string& expected) {
  fprintf(stderr, "%s: %s '%s': expected %s\n", prog, flag, value ? value : "", expected.c_str());
  exit(kUsage);
}

// A whole decimal (or 0x hex) integer in [lo, hi].
inline int64_t integer(const char* prog, const char* flag, const char* v, int64_t lo, int64_t hi) {
  std::string range = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  if (!v || !*v) bad(prog, flag, v, range);
  char* end = nullptr;
  errno = 0;
  long long x = strtoll(v, &end, 0);
  if (errno || *end || x < lo || x > hi) bad(prog, flag, v, range);
  return x;
}

// A finite number in [lo, hi].
inline double number(const char* prog, const char* flag, const char* v, double lo, double hi) {
  char r[128];
  snprintf(r, sizeof r, "a number in %g..%g", lo, hi);
  if (!v || !*v) bad(prog, flag, v, r);
  char* end = nullptr;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || *end || !std::isfinite(x) || x < lo || x > hi) bad(prog, flag, v, r);
  return x;
}

// A byte count with an optional binary suffix (K, M, G, T; e.g. 64M, 1G, 4096) in [lo, hi].
inline uint64_t size(const char* prog, const char* flag, const char* v, uint64_t lo, uint64_t hi) {
  std::string range = "a size in bytes (suffixes K, M, G, T) from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (!v || !*v || *v == '-') bad(prog, flag, v, range);
  char* end = nullptr;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || !std::isfinite(x) || x < 0) bad(prog, flag, v, range);
  double mul = 1;
  if (*end) {
    switch (*end) {
      case 'K': case 'k': mul = 1024.0; break;
      case 'M': case 'm': mul = 1048576.0; break;
      case 'G': case 'g': mul = 1073741824.0; break;
      case 'T': case 't': mul = 1099511627776.0; break;
      default: bad(prog, flag, v, range);
    }
    ++end;
    if (*end == 'B' || *end == 'b' || *end == 'i') ++end;  // 64MB, 64MiB
    if (*end == 'B') ++end;
    if (*end) bad(prog, flag, v, range);
  }
  x *= mul;
  if (x < double(lo) || x > double(hi) || x != std::floor(x)) bad(prog, flag, v, range);
  return uint64_t(x);
}

// One of `words`.
inline std::string choice(const char* prog, const char* flag, const char* v, std::initializer_list<const char*> words) {
  std::string list;
  for (const char* w : words) {
    if (v && strcmp(v, w) == 0) return v;
    list += std::string(list.empty() ? "" : ", ") + w;
  }
  bad(prog, flag, v, "one of " + list);
}

// getopt's verdict on an unknown flag or a missing value: one line and status 2.
[[noreturn]] inline void unknown(const char* prog, const char* arg) {
  fprintf(stderr, "%s: unknown option or missing value: '%s' (see --help)\n", prog, arg ? arg : "");
  exit(kUsage);
}

}  // namespace sparrow::args
