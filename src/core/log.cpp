#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <mutex>

#include "core/params.h"

namespace sparrow::log {
namespace {

params::StringParam kDebug("DEBUG", "WARN", "Log level: NONE, WARN, INFO or TRACE (like NCCL_DEBUG).",
                           {"NONE", "WARN", "INFO", "TRACE"});
params::StringParam kDebugFile("DEBUG_FILE", "",
                               "Write the log to this file instead of stderr; %h is replaced by the host name, %p by "
                               "the process id (like NCCL_DEBUG_FILE).");

params::StringParam kDebugSubsys("DEBUG_SUBSYS", "ALL",
                                  "Subsystems logged at INFO and TRACE: a comma list of INIT, NET, COLL, TREE, CODEC, "
                                  "STEP (a line per step on every rank), ALL; a leading ^ logs all but those. ALL "
                                  "excludes STEP unless it is named.");

std::atomic<int> g_level{-1};
std::atomic<int64_t> g_subsys{-1};
std::mutex g_mu;
FILE* g_out = nullptr;

Level parse_level() {
  std::string v = kDebug.get();
  if (v == "NONE") return Level::kNone;
  if (v == "INFO") return Level::kInfo;
  if (v == "TRACE") return Level::kTrace;
  return Level::kWarn;
}

}  // namespace

unsigned parse_subsystems(std::string v) {
  for (auto& ch : v) ch = char(toupper(static_cast<unsigned char>(ch)));
  const bool invert = !v.empty() && v[0] == '^';
  if (invert) v.erase(0, 1);
  unsigned set = 0;
  bool all = false;
  size_t i = 0;
  while (i <= v.size()) {
    size_t j = v.find(',', i);
    if (j == std::string::npos) j = v.size();
    const std::string w = v.substr(i, j - i);
    if (w == "INIT") set |= kInit;
    else if (w == "NET") set |= kNet;
    else if (w == "COLL") set |= kColl;
    else if (w == "TREE") set |= kTree;
    else if (w == "CODEC") set |= kCodec;
    else if (w == "STEP") set |= kStep;
    else if (w == "ALL") all = true;
    i = j + 1;
  }
  const unsigned every = kInit | kNet | kColl | kTree | kCodec | kStep;
  if (invert) return every & ~set;
  return all ? (every & ~kStep) | set : set;
}

unsigned subsystems() {
  int64_t s = g_subsys.load(std::memory_order_relaxed);
  if (s < 0) {
    s = parse_subsystems(kDebugSubsys.get());
    g_subsys.store(s, std::memory_order_relaxed);
  }
  return unsigned(s);
}

unsigned subsystem_of(const char* file) {
  if (strstr(file, "/transport/")) return kNet;
  if (strstr(file, "/collectives/")) return kColl;
  if (strstr(file, "topology/")) return kTree;
  if (strstr(file, "/kernels/") || strstr(file, "/format/")) return kCodec;
  return kInit;  // api, bootstrap, core, tools
}

std::string expand_log_path(const std::string& pattern, const std::string& host, int pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'h' || pattern[i + 1] == 'p')) {
      out += pattern[i + 1] == 'h' ? host : std::to_string(pid);
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

Level level() {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    l = static_cast<int>(parse_level());
    g_level.store(l, std::memory_order_relaxed);
  }
  return static_cast<Level>(l);
}

void set_level(Level l) { g_level.store(static_cast<int>(l)); }

namespace {
void vwrite(Level l, unsigned sub, const char* file, int line, const char* fmt, va_list ap) {
  static const char* kNames[] = {"NONE", "WARN", "INFO", "TRACE"};
  if (l > Level::kWarn && !(subsystems() & (sub ? sub : subsystem_of(file)))) return;
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  char host[64] = {0};
  gethostname(host, sizeof host - 1);
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_out) {
    std::string path = expand_log_path(kDebugFile.get(), host, getpid());
    g_out = path.empty() ? stderr : fopen(path.c_str(), "a");
    if (!g_out) g_out = stderr;
  }
  // Wall-clock time with microseconds and the thread id on every line, as NCCL does.
  auto now = std::chrono::system_clock::now();
  const time_t secs = std::chrono::system_clock::to_time_t(now);
  const long us = long(std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000);
  struct tm tmv;
  localtime_r(&secs, &tmv);
  char ts[32];
  strftime(ts, sizeof ts, "%H:%M:%S", &tmv);
  fprintf(g_out, "%s.%06ld %s:%d:%d sparrow %s %s:%d %s\n", ts, us, host, static_cast<int>(getpid()),
          static_cast<int>(gettid()), kNames[static_cast<int>(l)], base, line, msg);
  fflush(g_out);
}
}  // namespace

void write(Level l, const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite(l, 0, file, line, fmt, ap);
  va_end(ap);
}

void write_sub(Level l, unsigned sub, const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite(l, sub, file, line, fmt, ap);
  va_end(ap);
}

}  // namespace sparrow::log
