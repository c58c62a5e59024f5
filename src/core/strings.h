// Small string helpers shared by tools.
#pragma once

#include <string>
#include <vector>

namespace sparrow {

// "a,b,,c" -> {"a", "b", "", "c"}; "" -> {""}.
inline std::vector<std::string> split(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  size_t b = 0;
  while (true) {
    size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) return out;
    b = e + 1;
  }
}

}  // namespace sparrow
