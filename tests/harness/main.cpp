// Test main: keeps all test traffic on loopback unless the caller chose an interface.
#include <gtest/gtest.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  setenv("SPARROW_SOCKET_IFNAME", "lo", 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
