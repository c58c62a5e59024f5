// sparrow-info: what this build of sparrow is and how it is configured.
#include <cstdio>
#include <cstring>

#include "core/params.h"
#include "kernels/cpu/extract.h"
#include "sparrow/sparrow.h"

using namespace sparrow;

static void usage(FILE* f) {
  fprintf(f,
          "usage: sparrow-info [-c|--config] [-v|--version] [-h|--help]\n"
          "  -c, --config   every SPARROW_* parameter with its value and where it came from\n"
          "  -v, --version  library version and CPU kernels in use\n");
}

int main(int argc, char** argv) {
  bool config = false, version = argc == 1;
  for (int i = 1; i < argc; ++i) {
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
