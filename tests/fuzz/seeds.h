// `TARGET --write-seeds DIR`: a fuzz target's seed corpus written as DIR/seed0, seed1, ... and the
// process ended (scripts/fuzz.sh calls it before fuzzing). Shared by every target.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace sparrow::fuzz {

// Writes the seeds `make()` returns and exits, when the arguments ask for it; else returns.
template <class MakeSeeds>
void write_seeds_if_asked(int argc, char** argv, MakeSeeds make) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) != "--write-seeds") continue;
    int n = 0;
    for (const std::vector<uint8_t>& s : make()) {
      std::string path = std::string(argv[i + 1]) + "/seed" + std::to_string(n++);
      FILE* f = fopen(path.c_str(), "wb");
      if (!f || fwrite(s.data(), 1, s.size(), f) != s.size()) abort();
      fclose(f);
    }
    exit(0);
  }
}

}  // namespace sparrow::fuzz
