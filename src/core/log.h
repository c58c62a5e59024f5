// Logging in the manner of NCCL_DEBUG: SPARROW_DEBUG=WARN|INFO|TRACE (default WARN), to stderr, or to
// the file named by SPARROW_DEBUG_FILE. Logging never fails an operation.
#pragma once

#include <string>

#include <cstdarg>

namespace sparrow::log {

enum class Level : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

Level level();
void set_level(Level l);  // tests and tools
// SPARROW_DEBUG_FILE's pattern with %h (host name) and %p (process id) replaced.
std::string expand_log_path(const std::string& pattern, const std::string& host, int pid);
void write(Level l, const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 4, 5)));

}  // namespace sparrow::log

#define SPARROW_LOG(lvl, ...)                                                        \
  do {                                                                               \
    if (::sparrow::log::level() >= ::sparrow::log::Level::lvl)                       \
      ::sparrow::log::write(::sparrow::log::Level::lvl, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define SPARROW_WARN(...) SPARROW_LOG(kWarn, __VA_ARGS__)
#define SPARROW_INFO(...) SPARROW_LOG(kInfo, __VA_ARGS__)
#define SPARROW_TRACE(...) SPARROW_LOG(kTrace, __VA_ARGS__)
