// Logging in the manner of NCCL_DEBUG: SPARROW_DEBUG=WARN|INFO|TRACE (default WARN), to stderr, or to
// the file named by SPARROW_DEBUG_FILE; SPARROW_DEBUG_SUBSYS selects subsystems for INFO and TRACE
// (INIT, NET, COLL, TREE, CODEC, STEP; a leading ^ excludes; ALL), as NCCL_DEBUG_SUBSYS does. A line's
// subsystem is its source directory's (SPARROW_STEP's is STEP: one line per step on every rank, off
// unless asked for). Warnings are always shown. Logging never fails an operation.
#pragma once

#include <string>

#include <cstdarg>

namespace sparrow::log {

enum class Level : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };
enum Subsys : unsigned { kInit = 1, kNet = 2, kColl = 4, kTree = 8, kCodec = 16, kStep = 32 };

Level level();
void set_level(Level l);  // tests and tools
// SPARROW_DEBUG_FILE's pattern with %h (host name) and %p (process id) replaced.
std::string expand_log_path(const std::string& pattern, const std::string& host, int pid);
// The subsystems SPARROW_DEBUG_SUBSYS selects (default: all but STEP), and the one of a source file.
unsigned subsystems();
unsigned parse_subsystems(std::string spec);  // SPARROW_DEBUG_SUBSYS's syntax, in any case
unsigned subsystem_of(const char* file);
// `sub` 0: the file's subsystem.
void write(Level l, const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
void write_sub(Level l, unsigned sub, const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 5, 6)));

}  // namespace sparrow::log

#define SPARROW_LOG(lvl, ...)                                                        \
  do {                                                                               \
    if (::sparrow::log::level() >= ::sparrow::log::Level::lvl)                       \
      ::sparrow::log::write(::sparrow::log::Level::lvl, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define SPARROW_WARN(...) SPARROW_LOG(kWarn, __VA_ARGS__)
#define SPARROW_INFO(...) SPARROW_LOG(kInfo, __VA_ARGS__)
#define SPARROW_TRACE(...) SPARROW_LOG(kTrace, __VA_ARGS__)
// One line per step (INFO, subsystem STEP).
#define SPARROW_STEP(...)                                                                   \
  do {                                                                                      \
    if (::sparrow::log::level() >= ::sparrow::log::Level::kInfo && (::sparrow::log::subsystems() & ::sparrow::log::kStep)) \
      ::sparrow::log::write_sub(::sparrow::log::Level::kInfo, ::sparrow::log::kStep, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
