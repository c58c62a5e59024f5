// sparrow-info: what this build of sparrow is and how it is configured.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/args.h"
#include "api/api_internal.h"
#include "core/parallel.h"
#include "core/affinity.h"
#include "core/params.h"
#include "core/strings.h"
#include "kernels/cpu/extract.h"
#include "sparrow/sparrow.h"
#include "topology/algorithms/registry.h"
#include "topology/host.h"
#include "topology/affinity.h"
#include "topology/nic.h"
#include "topology/tree.h"
#include "bootstrap/secret.h"
#include "transport/seal.h"
#include "transport/socket.h"
#include "transport/transport.h"

using namespace sparrow;

static void usage(FILE* f) {
  fprintf(f,
          "usage: sparrow-info [-c|--config] [-v|--version] [-t|--transports] [--topo [--json]] [--probe [N]] [-h|--help]\n"
          "  -c, --config      every SPARROW_* parameter with its value and where it came from\n"
          "  -v, --version     library version and CPU kernels in use\n"
          "  -t, --transports  transport backends by priority, and the one SPARROW_TRANSPORT selects\n"
          "  --topo [--json]   the host's packages, NUMA nodes, NICs and this process's CPUs as hwloc sees\n"
          "                    them (SPARROW_TOPO_FILE: an hwloc XML instead), and what sparrow uses: the\n"
          "                    address it listens on, that interface's NUMA node, its worker threads\n"
          "  --probe [N]       start N ranks (default 4) in this process on this host and print the\n"
          "                    RTT/bandwidth table measured at communicator creation (SPARROW_PROBE_MS)\n"
          "  --probe N: 2..64; --tree N: 1..4096 ranks\n"
          "  --tree [N]        the broadcast tree SPARROW_ALGO picks for N ranks (default 8), with\n"
          "                    --root R, --regions a,a,b,b,... --hosts h0,h0,h1,... --bytes M (message size)\n"
          "                    --rtt-ms x,y,... and --gbps x,y,... (root -> rank; default: unmeasured)\n");
}

static int probe(int n) {
  if (n < 2) {
    fprintf(stderr, "sparrow-info: --probe needs at least 2 ranks\n");
    return 2;
  }
  setenv("SPARROW_SOCKET_IFNAME", getenv("SPARROW_SOCKET_IFNAME") ? getenv("SPARROW_SOCKET_IFNAME") : "lo", 1);
  sparrowUniqueId id;
  if (sparrowGetUniqueId(&id) != sparrowSuccess) {
    fprintf(stderr, "sparrow-info: %s\n", sparrowGetLastError(nullptr));
    return 1;
  }
  std::vector<sparrowComm_t> comms(n, nullptr);
  std::vector<sparrowResult_t> rc(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { rc[r] = sparrowCommInitRank(&comms[r], n, id, r); });
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r)
    if (rc[r] != sparrowSuccess) {
      fprintf(stderr, "sparrow-info: rank %d: %s\n", r, sparrowGetErrorString(rc[r]));
      return 1;
    }
  Comm* c = comm_impl(comms[0]);
  printf("%d ranks on %s over %s, %d stream(s) per peer\n", n, c->ranks()[0].host.c_str(), c->net().backend_name(),
         c->net().nstreams());
  printf("%s", c->probe().format().c_str());
  for (auto cm : comms) sparrowCommDestroy(cm);
  return 0;
}

constexpr const char* P = "sparrow-info";

// Whether argv[i] is the optional number after --probe/--tree (a negative number is one, to be refused).
bool value_at(int argc, char** argv, int i) {
  return i < argc && (argv[i][0] != '-' || (argv[i][1] >= '0' && argv[i][1] <= '9'));
}

// Per-rank numbers of a comma list (--rtt-ms, --gbps): each validated, as many as ranks or none.
std::vector<double> per_rank(const char* flag, const std::vector<std::string>& v, int nranks, double lo, double hi) {
  std::vector<double> out;
  if (v.empty()) return out;
  if (int(v.size()) != nranks)
    args::bad(P, flag, "", "one value per rank (" + std::to_string(nranks) + "), got " + std::to_string(v.size()));
  for (auto& x : v) out.push_back(args::number(P, flag, x.c_str(), lo, hi));
  return out;
}

static int tree(int argc, char** argv, int i) {
  topology::TreeInput in;
  in.nranks = value_at(argc, argv, i + 1) ? int(args::integer(P, "--tree", argv[++i], 1, 4096)) : 8;
  in.message_bytes = 1e8;
  std::vector<std::string> regions, hosts, rtts, gbps;
  for (++i; i < argc; i += 2) {
    std::string k = argv[i];
    if (i + 1 >= argc) args::unknown(P, argv[i]);
    const char* v = argv[i + 1];
    if (k == "--root") in.root = int(args::integer(P, "--root", v, 0, in.nranks - 1));
    else if (k == "--regions") regions = split(v);
    else if (k == "--hosts") hosts = split(v);
    else if (k == "--bytes") in.message_bytes = double(args::size(P, "--bytes", v, 1, uint64_t(1) << 44));
    else if (k == "--rtt-ms") rtts = split(v);
    else if (k == "--gbps") gbps = split(v);
    else args::unknown(P, argv[i]);
  }
  for (auto [flag, list] : {std::pair{"--regions", &regions}, std::pair{"--hosts", &hosts}})
    if (!list->empty() && int(list->size()) != in.nranks)
      args::bad(P, flag, join(*list).c_str(),
                "one name per rank (" + std::to_string(in.nranks) + "), got " + std::to_string(list->size()));
  auto rtt = per_rank("--rtt-ms", rtts, in.nranks, 0, 1e6);
  auto bw = per_rank("--gbps", gbps, in.nranks, 1e-6, 1e6);
  for (int r = 0; r < in.nranks; ++r) {
    in.places.push_back({hosts.empty() ? "host" + std::to_string(r) : hosts[r], regions.empty() ? "" : regions[r]});
    in.rtt_s.push_back(rtt.empty() ? -1 : rtt[r] / 1e3);
    in.bw_Bps.push_back(bw.empty() ? -1 : bw[r] * 1e9 / 8);
  }
  for (const auto& a : topology::algorithm_table()) {
    auto t = topology::build_tree(a.name, in);
    if (t.ok())
      printf("%-14s estimate %9.3f ms%s  %s\n", a.name, t->est_seconds * 1e3, a.in_auto ? "" : " (not in auto)",
             a.description);
  }
  auto t = topology::build_tree(topology::configured_algo(), in);
  if (!t.ok()) {
    fprintf(stderr, "sparrow-info: %s\n", t.status().to_string().c_str());
    return 1;
  }
  printf("SPARROW_ALGO=%s:\n%s", topology::configured_algo().c_str(), t->format().c_str());
  return 0;
}

// `text` in lines of at most `width` columns (a longer word stands alone), each after `indent`.
void print_wrapped(const std::string& text, const char* indent, size_t width) {
  std::string line;
  for (const std::string& word : split(text, ' ')) {
    if (word.empty()) continue;
    if (!line.empty() && strlen(indent) + line.size() + 1 + word.size() > width) {
      printf("%s%s\n", indent, line.c_str());
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) printf("%s%s\n", indent, line.c_str());
}

// The interface that holds `addr` (an IPv4 address sparrow listens on), empty when none does.
static std::string interface_of(const std::string& addr) {
  auto ifs = transport::net::ipv4_interfaces();
  if (ifs.ok())
    for (const auto& i : ifs.value())
      if (i.address == addr) return i.name;
  return "";
}

static int print_topology(bool json) {
  auto t = topo::discover();
  if (!t.ok()) {
    fprintf(stderr, "sparrow-info: %s\n", t.status().message().c_str());
    return 1;
  }
  std::string why;
  std::optional<topo::NicChoice> nic;
  auto host = topo::listen_address(&why, &nic);
  const std::string addr = host.ok() ? host.value() : "", ifname = interface_of(addr);
  int numa = -1;
  for (const auto& n : t.value().nics)
    if (n.name == ifname) numa = n.numa;
  auto cpus = topo::choose_thread_cpus(t.value().allowed, nic, topo::cpu_affinity_setting());
  if (cpus.ok()) affinity::set_cpus(cpus->cpus);  // as a communicator would: kernel_threads() counts them
  if (json) {
    printf("{\"topology\":%s,\"address\":\"%s\",\"interface\":\"%s\",\"interface_numa\":%d,\"gpu\":\"%s\","
           "\"threads\":%d,\"thread_cpus\":\"%s\",\"buffer_numa\":%d}\n",
           topo::to_json(t.value()).c_str(), addr.c_str(), ifname.c_str(), numa, nic ? nic->gpu.c_str() : "", kernel_threads(),
           cpus.ok() ? topo::cpu_list(cpus->cpus).c_str() : "", cpus.ok() ? cpus->numa : -1);
    return 0;
  }
  printf("%s", topo::describe(t.value()).c_str());
  if (!host.ok()) printf("sparrow cannot pick an address: %s\n", host.status().message().c_str());
  else
    printf("sparrow listens on %s (interface %s%s): %s\n", addr.c_str(), ifname.empty() ? "?" : ifname.c_str(),
           numa >= 0 ? (", NUMA node " + std::to_string(numa)).c_str() : "", why.c_str());
  printf("sparrow's threads (SPARROW_CPU_AFFINITY=%s): %s\n", topo::cpu_affinity_setting().c_str(),
         cpus.ok() ? cpus->why.c_str() : cpus.status().message().c_str());
  printf("worker threads: %d (SPARROW_THREADS, else the CPUs sparrow's threads are bound to, else those this process "
         "may run on)\n", kernel_threads());
  return 0;
}

// What protects connections with these settings: the frames' mode off the host and on loopback, and
// where the secret comes from. False when the settings ask for what cannot be given.
bool print_protection() {
  auto off_host = transport::seal::wanted_for(false), loop = transport::seal::wanted_for(true);
  printf("\nframes after the handshake (SPARROW_ENCRYPT=%s; this build %s seal):\n", transport::seal::setting().c_str(),
         transport::seal::available() ? "can" : "cannot");
  if (!off_host.ok()) {
    printf("  refused at init: %s\n", off_host.status().message().c_str());
    return false;
  }
  auto name = [](transport::seal::Mode m) {
    return m == transport::seal::Mode::kEncrypt ? "on (AES-256-GCM)" : m == transport::seal::Mode::kIntegrity ? "integrity (GMAC tags, bytes in the clear)" : "off";
  };
  printf("  connections off this host:  %s\n  loopback connections:       %s\n  (tcp and ucx alike)\n",
         name(off_host.value()), name(loop.value()));
  auto secret = bootstrap::secret_from_file();
  if (!secret.ok()) {
    printf("communicator secret: refused: %s\n", secret.status().message().c_str());
    return false;
  }
  printf("communicator secret: %s\n", secret->has_value() ? "from SPARROW_SECRET_FILE (unique ids carry none)"
                                                            : "random, inside each unique id (treat the id as a credential)");
  return true;
}

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  bool config = false, version = argc == 1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--tree")) return tree(argc, argv, i);
    if (!strcmp(argv[i], "--topo")) {
      if (i + 2 < argc || (i + 1 < argc && strcmp(argv[i + 1], "--json"))) args::unknown(P, argv[i + 1]);
      return print_topology(i + 1 < argc);
    }
    if (!strcmp(argv[i], "--probe")) {
      int n = value_at(argc, argv, i + 1) ? int(args::integer(P, "--probe", argv[++i], 2, 64)) : 4;
      return probe(n);
    }
    if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--transports")) {
      printf("transports by priority:");
      for (auto& n : transport::backend_names()) printf(" %s", n.c_str());
      printf("\nSPARROW_TRANSPORT=%s\n", transport::configured_transport().c_str());
      continue;
    }
    if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) config = true;
    else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--version")) version = true;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
    else args::unknown(P, argv[i]);
  }
  if (version) {
    int v = 0;
    (void)sparrowGetVersion(&v);
    printf("sparrow %d.%d.%d; CPU extraction kernel: %s\n", v / 10000, (v / 100) % 100, v % 100,
           kernels::cpu::isa_name(kernels::cpu::best_isa()));
  }
  if (config) {
    for (const auto& p : params::all()) {
      printf("SPARROW_%-16s = %-10s (%s; %s, default %s)\n", p.name.c_str(), p.value.c_str(),
             params::source_name(p.source), p.type.c_str(), p.default_value.c_str());
      print_wrapped(p.doc, "    ", 100);
      if (!p.error.empty()) printf("  rejected: %s\n", p.error.c_str());
    }
    Status s = params::validate_all();
    if (!s.ok()) return 1;
    if (!print_protection()) return 1;
  }
  return 0;
}
