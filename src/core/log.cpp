#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

std::atomic<int> g_level{-1};
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

void write(Level l, const char* file, int line, const char* fmt, ...) {
  static const char* kNames[] = {"NONE", "WARN", "INFO", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
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

}  // namespace sparrow::log
