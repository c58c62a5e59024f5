// The one typed registry of SPARROW_* settings.
//
// Each setting is a static object (`IntParam kChunk("CHUNK_ELEMS", ...)`) in the file that uses it; it
// registers itself at load time. Its value is resolved once, on first use, from (in priority order) a
// programmatic override, the environment variable SPARROW_<NAME>, the config file (SPARROW_CONF_FILE,
// else ~/.sparrow.conf; lines `NAME=value` or `SPARROW_NAME=value`, `#` comments), then the default.
// A value that does not parse is reported by validate_all() (called at communicator creation) and the
// default is used meanwhile. Thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/status.h"

namespace sparrow::params {

enum class Source { kDefault, kConfigFile, kEnv, kOverride };
const char* source_name(Source s);

struct Info {
  std::string name;  // without the SPARROW_ prefix
  std::string type;  // "int", "bool", "string"
  std::string value;
  std::string default_value;
  std::string doc;
  Source source = Source::kDefault;
  std::string error;  // non-empty when the configured value was rejected
};

class ParamBase {
 public:
  ParamBase(const char* name, const char* type, std::string default_value, const char* doc);
  virtual ~ParamBase() = default;
  const char* name() const { return name_; }
  Info info() const;
  // Validates text for this type; returns an error message or "" when accepted.
  virtual std::string check(const std::string& text) const = 0;
  void invalidate() const { resolved_ = false; }  // caller holds the registry lock

 protected:
  // The resolved text (override > env > file > default), resolved once.
  std::string text() const;

 private:
  void resolve() const;
  const char* name_;
  const char* type_;
  std::string default_;
  const char* doc_;
  mutable bool resolved_ = false;
  mutable std::string value_;
  mutable Source source_ = Source::kDefault;
  mutable std::string error_;
};

class IntParam : public ParamBase {
 public:
  IntParam(const char* name, int64_t def, const char* doc, int64_t min = INT64_MIN, int64_t max = INT64_MAX);
  int64_t get() const;

 public:
  std::string check(const std::string& text) const override;

 private:
  int64_t def_, min_, max_;
};

class BoolParam : public ParamBase {
 public:
  BoolParam(const char* name, bool def, const char* doc);
  bool get() const;

 public:
  std::string check(const std::string& text) const override;
};

class StringParam : public ParamBase {
 public:
  // `choices` empty: any string; otherwise the value must be one of them (case-sensitive).
  StringParam(const char* name, const char* def, const char* doc, std::initializer_list<const char*> choices = {});
  StringParam(const char* name, const char* def, const char* doc, std::vector<std::string> choices);
  std::string get() const;

 public:
  std::string check(const std::string& text) const override;

 private:
  std::vector<std::string> choices_;
};

// Every registered parameter, sorted by name, with value and source.
std::vector<Info> all();
// First rejected value among all registered parameters, as kInvalidArgument naming the variable.
Status validate_all();
// The value of setting `name` (without SPARROW_) as this process resolves it, in canonical form: an
// int in decimal (suffixes applied), a bool as 0 or 1, a string as given. kInvalidArgument for an
// unknown name or a configured value that was rejected (saying why).
Result<std::string> value_of(const std::string& name);
// Overrides (tests, tools): take precedence over the environment. Re-resolves on next use.
Status set_override(const std::string& name, const std::string& value);
void clear_overrides();

}  // namespace sparrow::params
