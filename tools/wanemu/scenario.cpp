#include "tools/wanemu/scenario.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace sparrow::wanemu {

namespace {
std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}
}  // namespace

std::vector<std::string> Scenario::regions() const {
  std::vector<std::string> r;
  for (auto& h : hosts)
    if (std::find(r.begin(), r.end(), h.region) == r.end()) r.push_back(h.region);
  return r;
}

const Link* Scenario::link(const std::string& a, const std::string& b) const {
  for (auto& l : links)
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) return &l;
  return nullptr;
}

Result<Scenario> parse_scenario(const std::string& text) {
  Scenario s;
  std::istringstream in(text);
  std::string line, section;
  int lineno = 0;
  std::vector<std::map<std::string, std::string>> host_tables, link_tables;
  std::map<std::string, std::string> top;
  auto err = [&](const std::string& m) { return InvalidArgument("scenario line " + std::to_string(lineno) + ": " + m); };
  while (std::getline(in, line)) {
    ++lineno;
    // Strip comments outside strings.
    bool q = false;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '"') q = !q;
      if (line[i] == '#' && !q) {
        line = line.substr(0, i);
        break;
      }
    }
    line = trim(line);
    if (line.empty()) continue;
    if (line == "[[host]]" || line == "[[hosts]]") {
      section = "host";
      host_tables.emplace_back();
      continue;
    }
    if (line == "[[link]]" || line == "[[links]]") {
      section = "link";
      link_tables.emplace_back();
      continue;
    }
    if (line[0] == '[') return err("unknown table " + line + " (expected [[host]] or [[link]])");
    size_t eq = line.find('=');
    if (eq == std::string::npos) return err("expected key = value");
    std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    auto& t = section == "host" ? host_tables.back() : section == "link" ? link_tables.back() : top;
    t[k] = v;
  }
  auto num = [&](std::map<std::string, std::string>& t, const char* k, double* out, double lo, double hi) -> Status {
    auto it = t.find(k);
    if (it == t.end()) return Status::Ok();
    char* end = nullptr;
    double v = strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end || v < lo || v > hi)
      return InvalidArgument(std::string("scenario: ") + k + " = " + it->second + " is not a number in [" +
                             std::to_string(lo) + ", " + std::to_string(hi) + "]");
    *out = v;
    t.erase(it);
    return Status::Ok();
  };
  double seed = 1, mtu = 1500;
  SPARROW_RETURN_IF_ERROR(num(top, "seed", &seed, 0, 1e18));
  SPARROW_RETURN_IF_ERROR(num(top, "mtu", &mtu, 576, 65000));
  SPARROW_RETURN_IF_ERROR(num(top, "default_delay_ms", &s.default_delay_ms, 0, 10000));
  top.erase("name");
  top.erase("description");
  if (!top.empty()) return InvalidArgument("scenario: unknown top-level key '" + top.begin()->first + "'");
  s.seed = uint64_t(seed);
  s.mtu = int(mtu);
  for (auto& t : host_tables) {
    Host h;
    h.name = t.count("name") ? t["name"] : "host";
    h.region = t.count("region") ? t["region"] : "default";
    t.erase("name");
    t.erase("region");
    double count = 1;
    SPARROW_RETURN_IF_ERROR(num(t, "count", &count, 1, 4096));
    SPARROW_RETURN_IF_ERROR(num(t, "up_mbit", &h.up_mbit, 0, 1e6));
    SPARROW_RETURN_IF_ERROR(num(t, "down_mbit", &h.down_mbit, 0, 1e6));
    SPARROW_RETURN_IF_ERROR(num(t, "queue_ms", &h.queue_ms, 0.1, 100000));
    if (!t.empty()) return InvalidArgument("scenario: unknown host key '" + t.begin()->first + "'");
    for (int i = 0; i < int(count); ++i) {
      Host c = h;
      if (count > 1) c.name += "-" + std::to_string(i);
      s.hosts.push_back(c);
    }
  }
  for (auto& t : link_tables) {
    Link l;
    l.a = t["a"];
    l.b = t.count("b") ? t["b"] : l.a;
    t.erase("a");
    t.erase("b");
    SPARROW_RETURN_IF_ERROR(num(t, "delay_ms", &l.delay_ms, 0, 100000));
    SPARROW_RETURN_IF_ERROR(num(t, "jitter_ms", &l.jitter_ms, 0, 100000));
    SPARROW_RETURN_IF_ERROR(num(t, "loss", &l.loss, 0, 1));
    SPARROW_RETURN_IF_ERROR(num(t, "ge_p", &l.ge_p, 0, 1));
    SPARROW_RETURN_IF_ERROR(num(t, "ge_r", &l.ge_r, 0, 1));
    SPARROW_RETURN_IF_ERROR(num(t, "ge_loss", &l.ge_loss, 0, 1));
    if (!t.empty()) return InvalidArgument("scenario: unknown link key '" + t.begin()->first + "'");
    if (l.a.empty()) return InvalidArgument("scenario: a [[link]] needs a = \"region\"");
    s.links.push_back(l);
  }
  if (s.hosts.empty()) return InvalidArgument("scenario: no [[host]]");
  if (s.hosts.size() > 250 * 250) return InvalidArgument("scenario: too many hosts");
  auto regs = s.regions();
  for (auto& l : s.links)
    for (auto* r : {&l.a, &l.b})
      if (std::find(regs.begin(), regs.end(), *r) == regs.end())
        return InvalidArgument("scenario: link names region '" + *r + "', which has no host");
  return s;
}

Result<Scenario> load_scenario(const std::string& path) {
  std::ifstream f(path);
  if (!f) return InvalidArgument("cannot open scenario '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  auto r = parse_scenario(ss.str());
  if (!r.ok()) return std::move(r).take_status().context(path);
  return r;
}

}  // namespace sparrow::wanemu
