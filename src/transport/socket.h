// Small POSIX socket helpers (IPv4 and IPv6) with deadlines; all calls are non-blocking underneath.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "core/status.h"
#include "transport/transport.h"

namespace sparrow::transport::net {

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  std::string str() const;
};

// "host:port" or "[v6]:port".
Result<SockAddr> parse_address(const std::string& s);
// Whether "host:port" names this host's loopback (127.0.0.0/8, ::1, ::ffff:127.x); false for
// anything that does not parse.
bool is_loopback(const std::string& address);
// Whether SPARROW_SOCKET_ADDR or SPARROW_SOCKET_IFNAME names the address (local_host() then follows it).
bool address_named();
// The address to listen on and advertise: SPARROW_SOCKET_IFNAME's first IPv4 address, else the first
// non-loopback IPv4 interface that is up, else 127.0.0.1.
Result<std::string> local_host();
// The interfaces that are up with an IPv4 address, in getifaddrs order.
struct Interface {
  std::string name, address;
  bool loopback = false;
};
Result<std::vector<Interface>> ipv4_interfaces();

// Listening socket on host, kernel-chosen port (port 0). Returns the fd; *bound gets "host:port".
Result<int> listen_on(const std::string& host, std::string* bound);
Result<int> connect_to(const std::string& address, Deadline d);
// Reads/writes exactly n bytes before the deadline (the fd may be non-blocking).
Status read_exact(int fd, void* buf, size_t n, Deadline d, const std::string& peer);
Status write_exact(int fd, const void* buf, size_t n, Deadline d, const std::string& peer);
void set_nonblocking(int fd, bool on);
// TCP_NODELAY, SPARROW_TCP_CONGESTION (falls back quietly), SPARROW_SOCKET_BUF_BYTES.
void tune_stream(int fd);
std::string peer_of(int fd);

}  // namespace sparrow::transport::net
