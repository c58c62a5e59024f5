// sparrow-sim: the schedule simulator (topology/simulate.h) on a wanemu scenario. For every broadcast
// tree (or one, or a given one) it predicts each rank's completion of one step and prints it beside
// the lower bound; bench/calibrate_sim.py compares it with measured runs.
//
//   sparrow-sim --scenario FILE --wire SIZE [--ranks N] [--algo NAME|all] [--parents P0,P1,...]
//               [--dense SIZE] [--frames N] [--streams N] [--cold] [--initial-window SIZE] [--window SIZE]
//               [--cc bbr|cubic]
//               [--root-start-s S] [--encode-s S | --encode-mbps R] [--tail-s S[,S...] | --tail-mbps R] [--json]
#include <getopt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/args.h"
#include "tools/wanemu/scenario.h"
#include "topology/algorithms/registry.h"
#include "topology/simulate.h"

using namespace sparrow;

namespace {

constexpr const char* kProg = "sparrow-sim";

struct Opts {
  std::string scenario, algo = "all", parents;
  int ranks = 0, root = 0, streams = 4;
  double wire = 0, dense = 0, frames = 0;
  bool cold = false, bbr = true, json = false;
  double root_start = 0, encode_s = -1, encode_mbps = 0, tail_mbps = 0, window = 16 << 20, initial = 0;
  std::vector<double> tails;
};

void usage(FILE* f) {
  fprintf(f,
          "usage: %s --scenario FILE --wire SIZE [options]\n"
          "Predicts one sparse_bcast step on a wanemu scenario (one rank per host, in host order).\n"
          "  --scenario FILE   the network (bench/scenarios/*.toml)\n"
          "  --wire SIZE       bytes every receiver gets (e.g. 16M)\n"
          "  --ranks N         ranks (default: every host of the scenario)\n"
          "  --root R          the root rank (0)\n"
          "  --algo NAME|all   the tree: one of %s, or all of them (default)\n"
          "  --parents LIST    a given tree instead: every rank's parent, -1 for the root (e.g. -1,0,0,1)\n"
          "  --dense SIZE      the step's dense bytes; frames are one per 2 MiB of it (1M bf16 elements)\n"
          "  --frames N        frames the wire bytes travel in (relays forward whole frames; default from\n"
          "                    --dense, else one per 64 KiB of wire)\n"
          "  --streams N       TCP connections per tree edge (4, SPARROW_NSTREAMS)\n"
          "  --cold            windows start at 10 segments (slow start) instead of open\n"
          "  --initial-window SIZE  --cold, from this many bytes per stream instead\n"
          "  --window SIZE     the most a stream keeps in flight (16M: socket buffers; less where the\n"
          "                    receive window or the sender's buffer holds it back)\n"
          "  --cc bbr|cubic    congestion control under loss (bbr)\n"
          "  --root-start-s S  the root's time before encoding (extraction)\n"
          "  --encode-s S      the root's encode time; or --encode-mbps R: wire MB/s it encodes at\n"
          "  --tail-s S[,...]  receivers' CPU after the last byte (one value, or one per rank);\n"
          "                    or --tail-mbps R: wire MB/s they verify, decode and commit at\n"
          "  --json            one JSON object per tree\n",
          kProg, topology::algorithm_names().c_str());
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  size_t a = 0;
  while (a <= s.size()) {
    size_t b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    v.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return v;
}

Opts parse(int argc, char** argv) {
  Opts o;
  static const option lo[] = {{"scenario", 1, 0, 'S'}, {"wire", 1, 0, 'w'},        {"ranks", 1, 0, 'n'},
                              {"root", 1, 0, 'r'},     {"algo", 1, 0, 'a'},        {"parents", 1, 0, 'p'},
                              {"dense", 1, 0, 'd'},    {"frames", 1, 0, 'f'},      {"streams", 1, 0, 's'},
                              {"cold", 0, 0, 'c'},     {"cc", 1, 0, 'C'},          {"root-start-s", 1, 0, 'R'},
                              {"encode-s", 1, 0, 'e'}, {"encode-mbps", 1, 0, 'E'}, {"tail-s", 1, 0, 't'},
                              {"tail-mbps", 1, 0, 'T'}, {"json", 0, 0, 'J'},       {"help", 0, 0, 'h'},
                              {"window", 1, 0, 'W'},   {"initial-window", 1, 0, 'I'},
                              {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", lo, nullptr)) != -1) {
    switch (c) {
      case 'S': o.scenario = optarg; break;
      case 'w': o.wire = double(args::size(kProg, "--wire", optarg, 1, uint64_t(1) << 44)); break;
      case 'n': o.ranks = int(args::integer(kProg, "--ranks", optarg, 1, 100000)); break;
      case 'r': o.root = int(args::integer(kProg, "--root", optarg, 0, 99999)); break;
      case 'a': o.algo = optarg; break;
      case 'p': o.parents = optarg; break;
      case 'd': o.dense = double(args::size(kProg, "--dense", optarg, 1, uint64_t(1) << 46)); break;
      case 'f': o.frames = double(args::integer(kProg, "--frames", optarg, 1, int64_t(1) << 32)); break;
      case 's': o.streams = int(args::integer(kProg, "--streams", optarg, 1, 64)); break;
      case 'c': o.cold = true; break;
      case 'I':
        o.initial = double(args::size(kProg, "--initial-window", optarg, 1 << 10, uint64_t(1) << 34));
        o.cold = true;
        break;
      case 'W': o.window = double(args::size(kProg, "--window", optarg, 1 << 12, uint64_t(1) << 34)); break;
      case 'C': o.bbr = args::choice(kProg, "--cc", optarg, {"bbr", "cubic"}) == "bbr"; break;
      case 'R': o.root_start = args::number(kProg, "--root-start-s", optarg, 0, 3600); break;
      case 'e': o.encode_s = args::number(kProg, "--encode-s", optarg, 0, 3600); break;
      case 'E': o.encode_mbps = args::number(kProg, "--encode-mbps", optarg, 1e-3, 1e7); break;
      case 't':
        for (const auto& x : split(optarg)) o.tails.push_back(args::number(kProg, "--tail-s", x.c_str(), 0, 3600));
        break;
      case 'T': o.tail_mbps = args::number(kProg, "--tail-mbps", optarg, 1e-3, 1e7); break;
      case 'J': o.json = true; break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); exit(args::kUsage);
    }
  }
  if (optind < argc) args::bad(kProg, "argument", argv[optind], "no positional arguments");
  if (o.scenario.empty()) args::bad(kProg, "--scenario", "", "a scenario file");
  if (o.wire <= 0) args::bad(kProg, "--wire", "", "the wire bytes of the step (e.g. 16M)");
  if (o.encode_s >= 0 && o.encode_mbps > 0) args::bad(kProg, "--encode-mbps", "", "either --encode-s or --encode-mbps");
  if (!o.tails.empty() && o.tail_mbps > 0) args::bad(kProg, "--tail-mbps", "", "either --tail-s or --tail-mbps");
  if (o.algo != "all" && o.algo != "auto" && !topology::find_algorithm(o.algo))
    args::bad(kProg, "--algo", o.algo.c_str(), topology::algorithm_names() + " or all");
  return o;
}

// One rank per host, in host order; delays and loss from the region pairs' links.
topology::SimNet net_of(const wanemu::Scenario& s, int ranks) {
  topology::SimNet net;
  for (const auto& h : s.hosts) net.hosts.push_back({h.name, h.region, h.up_mbit * 1e6 / 8, h.down_mbit * 1e6 / 8});
  const size_t nh = s.hosts.size();
  net.delay_s.assign(nh, std::vector<double>(nh, 0));
  net.loss.assign(nh, std::vector<double>(nh, 0));
  for (size_t a = 0; a < nh; ++a)
    for (size_t b = 0; b < nh; ++b) {
      if (a == b) continue;
      const auto* l = s.link(s.hosts[a].region, s.hosts[b].region);
      const bool same = s.hosts[a].region == s.hosts[b].region;
      net.delay_s[a][b] = (l ? l->delay_ms + l->jitter_ms / 2 : same ? s.default_delay_ms : 0) / 1e3;
      if (l) {
        const double ge = l->ge_p > 0 ? l->ge_p / (l->ge_p + l->ge_r) * l->ge_loss : 0;  // Gilbert-Elliott's mean
        net.loss[a][b] = std::min(0.5, l->loss + ge);
      }
    }
  for (int r = 0; r < ranks; ++r) net.host_of.push_back(r);
  return net;
}

// What `auto` would be told by the probe: regions, RTTs to the root, rates from the root.
topology::TreeInput tree_input(const wanemu::Scenario& s, const topology::SimNet& net, int root, double bytes) {
  topology::TreeInput in;
  in.nranks = net.nranks();
  in.root = root;
  in.message_bytes = bytes;
  const double up = net.hosts[root].up_Bps > 0 ? net.hosts[root].up_Bps : 1e12;
  for (int r = 0; r < in.nranks; ++r) {
    in.places.push_back({s.hosts[r].name, s.hosts[r].region});
    in.rtt_s.push_back(r == root ? 0 : 2 * net.delay(root, r));
    const double down = net.hosts[r].down_Bps > 0 ? net.hosts[r].down_Bps : 1e12;
    in.bw_Bps.push_back(r == root ? 0 : std::min(up, down));
  }
  return in;
}

Result<topology::Tree> given_tree(const std::string& list, int n) {
  const auto words = split(list);
  if (int(words.size()) != n) return InvalidArgument("--parents: " + std::to_string(n) + " entries expected, got " + std::to_string(words.size()));
  topology::Tree t;
  t.algo = "given";
  t.root = -1;
  t.parent.assign(n, -1);
  t.children.assign(n, {});
  for (int r = 0; r < n; ++r) {
    t.parent[r] = int(args::integer(kProg, "--parents", words[r].c_str(), -1, n - 1));
    if (t.parent[r] == r) return InvalidArgument("--parents: rank " + std::to_string(r) + " is its own parent");
    if (t.parent[r] < 0) {
      if (t.root >= 0) return InvalidArgument("--parents: two roots");
      t.root = r;
    }
  }
  if (t.root < 0) return InvalidArgument("--parents: no root (-1)");
  for (int r = 0; r < n; ++r)
    if (t.parent[r] >= 0) t.children[t.parent[r]].push_back(r);
  for (int r = 0; r < n; ++r) {  // every rank reaches the root
    int x = r, hops = 0;
    while (t.parent[x] >= 0 && hops <= n) x = t.parent[x], ++hops;
    if (hops > n) return InvalidArgument("--parents: a cycle through rank " + std::to_string(r));
  }
  return t;
}

void print(const Opts& o, const topology::Tree& t, const topology::SimResult& r) {
  if (o.json) {
    printf("{\"tool\": \"sparrow-sim\", \"scenario\": \"%s\", \"algo\": \"%s\", \"ranks\": %zu, \"wire_bytes\": %.0f, "
           "\"step_s\": %.6f, \"bound_s\": %.6f, \"vs_bound\": %.3f, \"done_s\": [",
           o.scenario.c_str(), t.algo.c_str(), r.done_s.size(), o.wire, r.step_s, r.bound_s, r.step_s / r.bound_s);
    for (size_t i = 0; i < r.done_s.size(); ++i) printf("%s%.6f", i ? ", " : "", r.done_s[i]);
    printf("], \"last_byte_s\": [");
    for (size_t i = 0; i < r.last_byte_s.size(); ++i) printf("%s%.6f", i ? ", " : "", std::max(0.0, r.last_byte_s[i]));
    printf("]}\n");
    return;
  }
  printf("%-16s step %9.1f ms  (%5.2fx the bound)  per rank (ms):", t.algo.c_str(), r.step_s * 1e3, r.step_s / r.bound_s);
  for (double d : r.done_s) printf(" %.0f", d * 1e3);
  printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  Opts o = parse(argc, argv);
  auto sc = wanemu::load_scenario(o.scenario);
  if (!sc.ok()) {
    fprintf(stderr, "%s: %s\n", kProg, sc.status().to_string().c_str());
    return sparrow::args::kUsage;  // a scenario that cannot be read or parsed is a bad argument
  }
  const int hosts = int(sc->hosts.size());
  const int n = o.ranks ? o.ranks : hosts;
  if (n > hosts) args::bad(kProg, "--ranks", std::to_string(n).c_str(), "at most the scenario's " + std::to_string(hosts) + " hosts");
  if (o.root >= n) args::bad(kProg, "--root", std::to_string(o.root).c_str(), "a rank below --ranks");
  if (!o.tails.empty() && o.tails.size() != 1 && int(o.tails.size()) != n)
    args::bad(kProg, "--tail-s", "", "one value or one per rank (" + std::to_string(n) + ")");
  const topology::SimNet net = net_of(*sc, n);

  topology::SimStep step;
  step.wire_bytes = o.wire;
  const double frames = o.frames > 0 ? o.frames : o.dense > 0 ? std::ceil(o.dense / (2 << 20)) : std::ceil(o.wire / (64 << 10));
  step.frame_bytes = o.wire / frames;
  step.streams = o.streams;
  step.warm = !o.cold;
  step.window_bytes = o.window;
  step.initial_window = o.initial;
  step.bbr = o.bbr;
  step.root_start_s = o.root_start;
  step.encode_s = o.encode_mbps > 0 ? o.wire / (o.encode_mbps * 1e6) : std::max(0.0, o.encode_s);
  if (o.tail_mbps > 0) step.tail_s.assign(n, o.wire / (o.tail_mbps * 1e6));
  else if (o.tails.size() == 1) step.tail_s.assign(n, o.tails[0]);
  else step.tail_s = o.tails;

  std::vector<topology::Tree> trees;
  if (!o.parents.empty()) {
    auto t = given_tree(o.parents, n);
    if (!t.ok()) args::bad(kProg, "--parents", o.parents.c_str(), t.status().message());
    trees.push_back(std::move(t.value()));
  } else {
    std::vector<std::string> names;
    if (o.algo == "all") {
      for (const auto& a : topology::algorithm_table()) names.push_back(a.name);
      names.push_back("auto");
    } else {
      names.push_back(o.algo);
    }
    for (const auto& name : names) {
      auto t = topology::build_tree(name, tree_input(*sc, net, o.root, o.wire));
      if (!t.ok()) {
        fprintf(stderr, "%s: %s\n", kProg, t.status().to_string().c_str());
        return 1;
      }
      trees.push_back(std::move(t.value()));
    }
  }
  if (!o.json)
    printf("# %s: %d ranks, %.1f MB on the wire in %.0f frames, %d stream(s) per edge, %s windows; lower bound %.1f ms\n",
           o.scenario.c_str(), n, o.wire / 1e6, frames, o.streams, o.cold ? "cold" : "warm",
           topology::lower_bound_s(net, trees[0].root, o.wire) * 1e3);
  double best = 1e300;
  std::string best_algo;
  for (const auto& t : trees) {
    auto r = topology::simulate(net, t, step);
    if (!r.ok()) {
      fprintf(stderr, "%s: %s: %s\n", kProg, t.algo.c_str(), r.status().to_string().c_str());
      return 1;
    }
    print(o, t, *r);
    if (r->step_s < best) best = r->step_s, best_algo = t.algo;
  }
  if (!o.json && trees.size() > 1) printf("# best: %s, %.1f ms\n", best_algo.c_str(), best * 1e3);
  return 0;
}
