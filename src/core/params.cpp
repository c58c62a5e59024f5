#include "core/params.h"

#include <strings.h>

#include "core/strings.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

namespace sparrow::params {
namespace {

struct State {
  std::mutex mu;
  std::vector<ParamBase*> params;
  std::map<std::string, std::string> overrides;
  bool file_loaded = false;
  std::map<std::string, std::string> file_values;
  std::string file_path;
};

State& state() {
  static State* s = new State();  // never destroyed: params may be read during static destruction
  return *s;
}

void load_file_locked(State& st) {
  if (st.file_loaded) return;
  st.file_loaded = true;
  const char* p = getenv("SPARROW_CONF_FILE");
  std::string path;
  if (p && *p) {
    path = p;
  } else if (const char* home = getenv("HOME")) {
    path = std::string(home) + "/.sparrow.conf";
  }
  if (path.empty()) return;
  std::ifstream in(path);
  if (!in) return;
  st.file_path = path;
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line.substr(0, line.find('#')));
    size_t eq = line.find('=');
    if (line.empty() || eq == std::string::npos) continue;
    std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (k.rfind("SPARROW_", 0) == 0) k = k.substr(8);
    st.file_values[k] = v;
  }
}

}  // namespace

const char* source_name(Source s) {
  switch (s) {
    case Source::kDefault: return "default";
    case Source::kConfigFile: return "config file";
    case Source::kEnv: return "environment";
    case Source::kOverride: return "override";
  }
  return "?";
}

ParamBase::ParamBase(const char* name, const char* type, std::string default_value, const char* doc)
    : name_(name), type_(type), default_(std::move(default_value)), doc_(doc) {
  State& st = state();
  std::lock_guard<std::mutex> lk(st.mu);
  st.params.push_back(this);
}

void ParamBase::resolve() const {
  // Caller holds state().mu.
  State& st = state();
  if (resolved_) return;
  resolved_ = true;
  error_.clear();
  std::string candidate;
  Source src = Source::kDefault;
  std::string env_name = std::string("SPARROW_") + name_;
  if (auto it = st.overrides.find(name_); it != st.overrides.end()) {
    candidate = it->second;
    src = Source::kOverride;
  } else if (const char* e = getenv(env_name.c_str()); e != nullptr) {
    candidate = e;
    src = Source::kEnv;
  } else {
    load_file_locked(st);
    if (auto f = st.file_values.find(name_); f != st.file_values.end()) {
      candidate = f->second;
      src = Source::kConfigFile;
    }
  }
  if (src != Source::kDefault) {
    std::string err = check(candidate);
    if (err.empty()) {
      value_ = candidate;
      source_ = src;
      return;
    }
    error_ = env_name + "='" + candidate + "' (from " + source_name(src) + "): " + err;
  }
  value_ = default_;
  source_ = Source::kDefault;
}

std::string ParamBase::text() const {
  State& st = state();
  std::lock_guard<std::mutex> lk(st.mu);
  resolve();
  return value_;
}

Info ParamBase::info() const {
  State& st = state();
  std::lock_guard<std::mutex> lk(st.mu);
  resolve();
  return Info{name_, type_, value_, default_, doc_, source_, error_};
}

static bool parse_int(const std::string& t, int64_t* out) {
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(t.c_str(), &end, 0);
  if (errno != 0 || end == t.c_str()) return false;
  // Optional binary suffixes K, M, G for sizes.
  std::string suffix = end;
  int64_t mul = 1;
  if (suffix == "K" || suffix == "k") mul = 1LL << 10;
  else if (suffix == "M" || suffix == "m") mul = 1LL << 20;
  else if (suffix == "G" || suffix == "g") mul = 1LL << 30;
  else if (!suffix.empty()) return false;
  if (v > INT64_MAX / mul || v < INT64_MIN / mul) return false;
  *out = v * mul;
  return true;
}

IntParam::IntParam(const char* name, int64_t def, const char* doc, int64_t min, int64_t max)
    : ParamBase(name, "int", std::to_string(def), doc), def_(def), min_(min), max_(max) {}

std::string IntParam::check(const std::string& t) const {
  int64_t v;
  if (!parse_int(t, &v)) return "not an integer (optional suffix K, M or G)";
  if (v < min_ || v > max_) return "out of range [" + std::to_string(min_) + ", " + std::to_string(max_) + "]";
  return "";
}

int64_t IntParam::get() const {
  int64_t v = def_;
  parse_int(text(), &v);
  return v;
}

BoolParam::BoolParam(const char* name, bool def, const char* doc) : ParamBase(name, "bool", def ? "1" : "0", doc) {}

static int parse_bool(const std::string& t) {
  std::string l = t;
  std::transform(l.begin(), l.end(), l.begin(), ::tolower);
  if (l == "1" || l == "true" || l == "yes" || l == "on") return 1;
  if (l == "0" || l == "false" || l == "no" || l == "off") return 0;
  return -1;
}

std::string BoolParam::check(const std::string& t) const {
  return parse_bool(t) < 0 ? "not a boolean (1/0, true/false, yes/no, on/off)" : "";
}

bool BoolParam::get() const { return parse_bool(text()) == 1; }

StringParam::StringParam(const char* name, const char* def, const char* doc, std::initializer_list<const char*> choices)
    : ParamBase(name, "string", def, doc) {
  for (const char* c : choices) choices_.emplace_back(c);
}

StringParam::StringParam(const char* name, const char* def, const char* doc, std::vector<std::string> choices)
    : ParamBase(name, "string", def, doc), choices_(std::move(choices)) {}

namespace {
// Enumerated values are matched without regard to case (SPARROW_DEBUG=info, like NCCL_DEBUG).
const std::string* find_choice(const std::vector<std::string>& choices, const std::string& t) {
  for (auto& c : choices)
    if (c.size() == t.size() && strncasecmp(c.c_str(), t.c_str(), c.size()) == 0) return &c;
  return nullptr;
}
}  // namespace

std::string StringParam::check(const std::string& t) const {
  if (choices_.empty() || find_choice(choices_, t)) return "";
  std::string msg = "must be one of";
  for (auto& c : choices_) msg += " " + c;
  return msg + " (any case)";
}

std::string StringParam::get() const {
  std::string t = text();
  if (const std::string* c = find_choice(choices_, t)) return *c;  // the canonical spelling
  return t;
}

std::vector<Info> all() {
  std::vector<ParamBase*> ps;
  {
    std::lock_guard<std::mutex> lk(state().mu);
    ps = state().params;
  }
  std::vector<Info> out;
  for (auto* p : ps) out.push_back(p->info());
  std::sort(out.begin(), out.end(), [](const Info& a, const Info& b) { return a.name < b.name; });
  return out;
}

Status validate_all() {
  for (const Info& i : all())
    if (!i.error.empty()) return InvalidArgument(i.error);
  return Status::Ok();
}

Result<std::string> value_of(const std::string& name) {
  for (const Info& i : all()) {
    if (i.name != name) continue;
    if (!i.error.empty()) return InvalidArgument(i.error);
    if (i.type == "int") {
      int64_t v = 0;
      parse_int(i.value, &v);
      return std::to_string(v);
    }
    if (i.type == "bool") return std::string(parse_bool(i.value) == 1 ? "1" : "0");
    return i.value;
  }
  return InvalidArgument("unknown setting SPARROW_" + name);
}

Status set_override(const std::string& name, const std::string& value) {
  State& st = state();
  std::lock_guard<std::mutex> lk(st.mu);
  for (ParamBase* p : st.params) {
    if (name == p->name()) {
      std::string err = p->check(value);
      if (!err.empty()) return InvalidArgument("SPARROW_" + name + "='" + value + "': " + err);
      st.overrides[name] = value;
      p->invalidate();
      return Status::Ok();
    }
  }
  return InvalidArgument("unknown parameter SPARROW_" + name);
}

void clear_overrides() {
  State& st = state();
  std::lock_guard<std::mutex> lk(st.mu);
  st.overrides.clear();
  for (ParamBase* p : st.params) p->invalidate();
}

}  // namespace sparrow::params
