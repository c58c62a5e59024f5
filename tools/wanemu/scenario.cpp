#include "tools/wanemu/scenario.h"

#include "core/strings.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace sparrow::wanemu {

namespace {
bool parse_seconds(const std::string& v, double lo, double hi, double* out) {
  char* end = nullptr;
  double x = strtod(v.c_str(), &end);
  if (v.empty() || end == v.c_str() || *end || !(x >= lo && x <= hi)) return false;
  *out = x;
  return true;
}

}  // namespace

const char* fault_kind_name(Fault::Kind k) {
  switch (k) {
    case Fault::Kind::kKill: return "kill";
    case Fault::Kind::kStop: return "stop";
    case Fault::Kind::kPartition: return "partition";
    case Fault::Kind::kStall: return "stall";
  }
  return "?";
}

Result<Fault> parse_fault(const std::vector<std::string>& words) {
  const std::string usage =
      " (expected: kill TARGET [--leaves] | stop TARGET [--for S] [--leaves] | partition TARGET [PEER] [--for S] | "
      "stall TARGET [PEER] --for S)";
  if (words.empty()) return InvalidArgument("fault: nothing given" + usage);
  Fault f;
  const std::string& k = words[0];
  if (k == "kill") f.kind = Fault::Kind::kKill;
  else if (k == "stop") f.kind = Fault::Kind::kStop;
  else if (k == "partition") f.kind = Fault::Kind::kPartition;
  else if (k == "stall") f.kind = Fault::Kind::kStall;
  else return InvalidArgument("fault: unknown kind '" + k + "'" + usage);
  std::vector<std::string> pos;
  bool has_for = false;
  for (size_t i = 1; i < words.size(); ++i) {
    if (words[i] == "--for") {
      if (i + 1 >= words.size() || !parse_seconds(words[i + 1], 0.001, 86400, &f.for_s))
        return InvalidArgument("fault: --for needs seconds in [0.001, 86400], got '" +
                               (i + 1 < words.size() ? words[i + 1] : std::string()) + "'");
      has_for = true;
      ++i;
    } else if (words[i] == "--leaves") {
      f.leaves = true;
    } else if (!words[i].empty() && words[i][0] == '-') {
      return InvalidArgument("fault: unknown option '" + words[i] + "'" + usage);
    } else {
      pos.push_back(words[i]);
    }
  }
  const bool net = f.kind == Fault::Kind::kPartition || f.kind == Fault::Kind::kStall;
  if (pos.empty()) return InvalidArgument("fault: " + k + " needs a TARGET (a region, host name or host index)");
  if (pos.size() > (net ? 2u : 1u)) return InvalidArgument("fault: too many targets for " + k + usage);
  f.target = pos[0];
  if (pos.size() == 2) f.peer = pos[1];
  if (f.kind == Fault::Kind::kKill && has_for) return InvalidArgument("fault: kill takes no --for (it is for good)");
  if (f.kind == Fault::Kind::kStall && !has_for)
    return InvalidArgument("fault: stall needs --for S (held packets are delivered when it ends)");
  if (net && f.leaves) return InvalidArgument("fault: --leaves is for kill and stop");
  return f;
}

std::string describe(const Fault& f) {
  std::string d = std::string(fault_kind_name(f.kind)) + " " + f.target;
  if (f.kind == Fault::Kind::kPartition || f.kind == Fault::Kind::kStall)
    d += f.peer.empty() ? " from the rest" : " <-> " + f.peer;
  if (f.leaves) d += " (processes without children)";
  if (f.for_s > 0) {
    char b[48];
    snprintf(b, sizeof b, " for %.3g s", f.for_s);
    d += b;
  } else if (f.kind != Fault::Kind::kKill) {
    d += " until the end";
  }
  return d;
}

Result<std::vector<int>> Scenario::resolve(const std::string& target) const {
  std::vector<int> out;
  auto by_region = [&](const std::string& r) {
    for (size_t i = 0; i < hosts.size(); ++i)
      if (hosts[i].region == r) out.push_back(int(i));
  };
  auto by_name = [&](const std::string& n) {
    for (size_t i = 0; i < hosts.size(); ++i)
      if (hosts[i].name == n) out.push_back(int(i));
  };
  if (target.rfind("region:", 0) == 0) by_region(target.substr(7));
  else if (target.rfind("host:", 0) == 0) by_name(target.substr(5));
  else {
    by_region(target);
    if (out.empty()) by_name(target);
    if (out.empty() && !target.empty() && target.find_first_not_of("0123456789") == std::string::npos &&
        target.size() < 9 && size_t(std::stoi(target)) < hosts.size())
      out.push_back(std::stoi(target));
  }
  if (out.empty())
    return InvalidArgument("fault: '" + target + "' names no region, host or host index of the scenario (" +
                           std::to_string(hosts.size()) + " hosts)");
  return out;
}

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

namespace {

using Table = std::map<std::string, std::string>;

// The scenario's text as key = value tables: the top level, then each [[host]], [[link]], [[fault]].
struct Tables {
  Table top, prices;
  std::vector<Table> hosts, links, faults;
};

// One line without its comment (a '#' outside a string starts one), trimmed.
std::string strip_comment(std::string line) {
  bool q = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '"') q = !q;
    if (line[i] == '#' && !q) {
      line = line.substr(0, i);
      break;
    }
  }
  return trim(line);
}

Result<Tables> read_tables(const std::string& text) {
  Tables tb;
  std::istringstream in(text);
  std::string line;
  Table* t = &tb.top;
  int lineno = 0;
  auto err = [&](const std::string& m) { return InvalidArgument("scenario line " + std::to_string(lineno) + ": " + m); };
  while (std::getline(in, line)) {
    ++lineno;
    line = strip_comment(line);
    if (line.empty()) continue;
    std::vector<Table>* next = line == "[[host]]" || line == "[[hosts]]"     ? &tb.hosts
                               : line == "[[link]]" || line == "[[links]]"   ? &tb.links
                               : line == "[[fault]]" || line == "[[faults]]" ? &tb.faults
                                                                             : nullptr;
    if (next) {
      t = &next->emplace_back();
      continue;
    }
    if (line == "[prices]") {
      t = &tb.prices;
      continue;
    }
    if (line[0] == '[') return err("unknown table " + line + " (expected [[host]], [[link]], [[fault]] or [prices])");
    size_t eq = line.find('=');
    if (eq == std::string::npos) return err("expected key = value");
    std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    (*t)[k] = v;
  }
  return tb;
}

// Takes key k out of t as a number in [lo, hi] into *out (left as is when absent).
Status take_num(Table& t, const char* k, double* out, double lo, double hi) {
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
}

Status read_top(Table top, Scenario& s) {
  double seed = 1, mtu = 1500;
  SPARROW_RETURN_IF_ERROR(take_num(top, "seed", &seed, 0, 1e18));
  SPARROW_RETURN_IF_ERROR(take_num(top, "mtu", &mtu, 576, 65000));
  SPARROW_RETURN_IF_ERROR(take_num(top, "default_delay_ms", &s.default_delay_ms, 0, 10000));
  top.erase("name");
  top.erase("description");
  if (!top.empty()) return InvalidArgument("scenario: unknown top-level key '" + top.begin()->first + "'");
  s.seed = uint64_t(seed);
  s.mtu = int(mtu);
  return Status::Ok();
}

Status read_host(Table t, Scenario& s) {
  Host h;
  h.name = t.count("name") ? t["name"] : "host";
  h.region = t.count("region") ? t["region"] : "default";
  t.erase("name");
  t.erase("region");
  double count = 1;
  SPARROW_RETURN_IF_ERROR(take_num(t, "count", &count, 1, 4096));
  SPARROW_RETURN_IF_ERROR(take_num(t, "up_mbit", &h.up_mbit, 0, 1e6));
  SPARROW_RETURN_IF_ERROR(take_num(t, "down_mbit", &h.down_mbit, 0, 1e6));
  SPARROW_RETURN_IF_ERROR(take_num(t, "queue_ms", &h.queue_ms, 0.1, 100000));
  if (!t.empty()) return InvalidArgument("scenario: unknown host key '" + t.begin()->first + "'");
  for (int i = 0; i < int(count); ++i) {
    Host c = h;
    if (count > 1) c.name += "-" + std::to_string(i);
    s.hosts.push_back(c);
  }
  return Status::Ok();
}

Status read_link(Table t, Scenario& s) {
  Link l;
  l.a = t["a"];
  l.b = t.count("b") ? t["b"] : l.a;
  t.erase("a");
  t.erase("b");
  SPARROW_RETURN_IF_ERROR(take_num(t, "delay_ms", &l.delay_ms, 0, 100000));
  SPARROW_RETURN_IF_ERROR(take_num(t, "jitter_ms", &l.jitter_ms, 0, 100000));
  SPARROW_RETURN_IF_ERROR(take_num(t, "loss", &l.loss, 0, 1));
  SPARROW_RETURN_IF_ERROR(take_num(t, "ge_p", &l.ge_p, 0, 1));
  SPARROW_RETURN_IF_ERROR(take_num(t, "ge_r", &l.ge_r, 0, 1));
  SPARROW_RETURN_IF_ERROR(take_num(t, "ge_loss", &l.ge_loss, 0, 1));
  if (!t.empty()) return InvalidArgument("scenario: unknown link key '" + t.begin()->first + "'");
  if (l.a.empty()) return InvalidArgument("scenario: a [[link]] needs a = \"region\"");
  s.links.push_back(l);
  return Status::Ok();
}

Status read_fault(Table t, Scenario& s) {
  // The same words as `wanemu fault`, so both are checked alike.
  std::vector<std::string> words = {t["kind"], t["target"]};
  if (t.count("peer")) words.push_back(t["peer"]);
  if (t.count("for_s")) words.insert(words.end(), {"--for", t["for_s"]});
  if (t.count("leaves") && t["leaves"] != "false") {
    if (t["leaves"] != "true") return InvalidArgument("scenario: fault leaves = " + t["leaves"] + " (true or false)");
    words.push_back("--leaves");
  }
  double at = -1;
  if (!t.count("at_s") || !parse_seconds(t["at_s"], 0, 86400, &at))
    return InvalidArgument("scenario: a [[fault]] needs at_s = seconds in [0, 86400]");
  for (const char* k : {"kind", "target", "peer", "for_s", "leaves", "at_s"}) t.erase(k);
  if (!t.empty()) return InvalidArgument("scenario: unknown fault key '" + t.begin()->first + "'");
  auto f = parse_fault(words);
  if (!f.ok()) return std::move(f).take_status().context("scenario");
  f->at_s = at;
  s.faults.push_back(*f);
  return Status::Ok();
}

Status read_prices(Table t, Scenario& s) {
  Prices& p = s.prices;
  SPARROW_RETURN_IF_ERROR(take_num(t, "gpu_hour_on_demand", &p.gpu_hour_on_demand, 0, 1e6));
  SPARROW_RETURN_IF_ERROR(take_num(t, "gpu_hour_reserved", &p.gpu_hour_reserved, 0, 1e6));
  SPARROW_RETURN_IF_ERROR(take_num(t, "egress_per_gb", &p.egress_per_gb, 0, 1e6));
  SPARROW_RETURN_IF_ERROR(take_num(t, "gpus_per_host", &p.gpus_per_host, 0, 4096));
  if (!t.empty()) return InvalidArgument("scenario: unknown prices key '" + t.begin()->first + "'");
  return Status::Ok();
}

// Hosts exist, and the regions and hosts that links and faults name are among them.
Status check_names(const Scenario& s) {
  if (s.hosts.empty()) return InvalidArgument("scenario: no [[host]]");
  if (s.hosts.size() > 250 * 250) return InvalidArgument("scenario: too many hosts");
  auto regs = s.regions();
  for (auto& l : s.links)
    for (auto* r : {&l.a, &l.b})
      if (std::find(regs.begin(), regs.end(), *r) == regs.end())
        return InvalidArgument("scenario: link names region '" + *r + "', which has no host");
  for (auto& f : s.faults)
    for (auto* t : {&f.target, &f.peer})
      if (!t->empty())
        if (auto r = s.resolve(*t); !r.ok()) return std::move(r).take_status().context("scenario");
  return Status::Ok();
}

}  // namespace

Result<Scenario> parse_scenario(const std::string& text) {
  SPARROW_ASSIGN_OR_RETURN(Tables tb, read_tables(text));
  Scenario s;
  SPARROW_RETURN_IF_ERROR(read_top(std::move(tb.top), s));
  for (auto& t : tb.hosts) SPARROW_RETURN_IF_ERROR(read_host(std::move(t), s));
  for (auto& t : tb.links) SPARROW_RETURN_IF_ERROR(read_link(std::move(t), s));
  for (auto& t : tb.faults) SPARROW_RETURN_IF_ERROR(read_fault(std::move(t), s));
  SPARROW_RETURN_IF_ERROR(read_prices(std::move(tb.prices), s));
  std::stable_sort(s.faults.begin(), s.faults.end(), [](const Fault& a, const Fault& b) { return a.at_s < b.at_s; });
  SPARROW_RETURN_IF_ERROR(check_names(s));
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
