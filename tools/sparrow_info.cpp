// sparrow-info: what this build of sparrow is and how it is configured.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "api/api_internal.h"
#include "core/params.h"
#include "core/strings.h"
#include "kernels/cpu/extract.h"
#include "sparrow/sparrow.h"
#include "topology/tree.h"
#include "transport/transport.h"

using namespace sparrow;

static void usage(FILE* f) {
  fprintf(f,
          "usage: sparrow-info [-c|--config] [-v|--version] [-t|--transports] [--probe [N]] [-h|--help]\n"
          "  -c, --config      every SPARROW_* parameter with its value and where it came from\n"
          "  -v, --version     library version and CPU kernels in use\n"
          "  -t, --transports  transport backends by priority, and the one SPARROW_TRANSPORT selects\n"
          "  --probe [N]       start N ranks (default 4) in this process on this host and print the\n"
          "                    RTT/bandwidth table measured at communicator creation (SPARROW_PROBE_MS)\n"
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

static int tree(int argc, char** argv, int i) {
  topology::TreeInput in;
  in.nranks = (i + 1 < argc && argv[i + 1][0] != '-') ? atoi(argv[++i]) : 8;
  in.message_bytes = 1e8;
  std::vector<std::string> regions, hosts, rtts, gbps;
  for (++i; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--root") in.root = atoi(v.c_str());
    else if (k == "--regions") regions = split(v);
    else if (k == "--hosts") hosts = split(v);
    else if (k == "--bytes") {
      char* end = nullptr;
      double b = strtod(v.c_str(), &end);
      if (end && (*end == 'K' || *end == 'k')) b *= 1024;
      else if (end && (*end == 'M' || *end == 'm')) b *= 1024 * 1024;
      else if (end && (*end == 'G' || *end == 'g')) b *= 1024.0 * 1024 * 1024;
      in.message_bytes = b;
    }
    else if (k == "--rtt-ms") rtts = split(v);
    else if (k == "--gbps") gbps = split(v);
    else {
      fprintf(stderr, "sparrow-info: unknown --tree option '%s'\n", k.c_str());
      return 2;
    }
  }
  if (in.nranks < 1 || in.root < 0 || in.root >= in.nranks) {
    fprintf(stderr, "sparrow-info: --tree needs 1 <= ranks and 0 <= root < ranks\n");
    return 2;
  }
  for (int r = 0; r < in.nranks; ++r) {
    in.places.push_back({r < int(hosts.size()) ? hosts[r] : "host" + std::to_string(r),
                         r < int(regions.size()) ? regions[r] : ""});
    in.rtt_s.push_back(r < int(rtts.size()) ? atof(rtts[r].c_str()) / 1e3 : -1);
    in.bw_Bps.push_back(r < int(gbps.size()) ? atof(gbps[r].c_str()) * 1e9 / 8 : -1);
  }
  for (const auto& a : topology::algorithms()) {
    auto t = topology::build_tree(a, in);
    if (t.ok()) printf("%-12s estimate %9.3f ms\n", a.c_str(), t->est_seconds * 1e3);
  }
  auto t = topology::build_tree(topology::configured_algo(), in);
  if (!t.ok()) {
    fprintf(stderr, "sparrow-info: %s\n", t.status().to_string().c_str());
    return 1;
  }
  printf("SPARROW_ALGO=%s:\n%s", topology::configured_algo().c_str(), t->format().c_str());
  return 0;
}

int main(int argc, char** argv) {
  bool config = false, version = argc == 1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--tree")) return tree(argc, argv, i);
    if (!strcmp(argv[i], "--probe")) {
      int n = (i + 1 < argc && argv[i + 1][0] != '-') ? atoi(argv[++i]) : 4;
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
    else { fprintf(stderr, "sparrow-info: unknown option '%s'\n", argv[i]); usage(stderr); return 2; }
  }
  if (version) {
    int v = 0;
    (void)sparrowGetVersion(&v);
    printf("sparrow %d.%d.%d; CPU extraction kernel: %s\n", v / 10000, (v / 100) % 100, v % 100,
           kernels::cpu::isa_name(kernels::cpu::best_isa()));
  }
  if (config) {
    for (const auto& p : params::all()) {
      printf("SPARROW_%-16s = %-10s (%s; %s, default %s)%s%s\n", p.name.c_str(), p.value.c_str(),
             params::source_name(p.source), p.type.c_str(), p.default_value.c_str(), p.doc.empty() ? "" : "  ",
             p.doc.c_str());
      if (!p.error.empty()) printf("  rejected: %s\n", p.error.c_str());
    }
    Status s = params::validate_all();
    if (!s.ok()) return 1;
  }
  return 0;
}
