#include "transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "core/params.h"

namespace sparrow::transport::net {
namespace {
params::StringParam kAddr("SOCKET_ADDR", "",
                          "Numeric address to listen on and advertise; overrides SOCKET_IFNAME (multi-homed hosts, "
                          "wanemu's loopback fallback).");
params::StringParam kIfname("SOCKET_IFNAME", "", "Network interface to listen on and advertise (like NCCL_SOCKET_IFNAME; empty: first non-loopback interface).");
params::StringParam kCongestion("TCP_CONGESTION", "bbr", "TCP congestion control for data streams (falls back to the kernel default if unavailable).");
params::IntParam kSockBuf("SOCKET_BUF_BYTES", 0, "SO_SNDBUF/SO_RCVBUF for data streams (0: kernel autotuning).", 0, 1 << 30);

int remaining_ms(Deadline d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  return ms < 0 ? 0 : ms > 1000000 ? 1000000 : int(ms);
}
}  // namespace

std::string SockAddr::str() const {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
  inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
  port = ntohs(a->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

Result<SockAddr> parse_address(const std::string& s) {
  std::string host, port;
  if (!s.empty() && s[0] == '[') {
    size_t e = s.find("]:");
    if (e == std::string::npos) return InvalidArgument("bad address '" + s + "' (expected [v6]:port)");
    host = s.substr(1, e - 1);
    port = s.substr(e + 2);
  } else {
    size_t c = s.rfind(':');
    if (c == std::string::npos) return InvalidArgument("bad address '" + s + "' (expected host:port)");
    host = s.substr(0, c);
    port = s.substr(c + 1);
  }
  char* end = nullptr;
  long p = strtol(port.c_str(), &end, 10);
  if (port.empty() || *end || p < 0 || p > 65535) return InvalidArgument("bad port in address '" + s + "'");
  SockAddr a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(uint16_t(p));
    a.len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(uint16_t(p));
    a.len = sizeof(sockaddr_in6);
  } else {
    return InvalidArgument("bad host in address '" + s + "' (numeric IPv4 or IPv6 expected)");
  }
  return a;
}

bool is_loopback(const std::string& address) {
  auto a = parse_address(address);
  if (!a.ok()) return false;
  if (a->ss.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&a->ss)->sin_addr.s_addr) >> 24) == 127;
  const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(&a->ss)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
}

bool address_named() { return !kAddr.get().empty() || !kIfname.get().empty(); }

Result<std::string> local_host() {
  if (std::string a = kAddr.get(); !a.empty()) {
    in_addr v4;
    in6_addr v6;
    if (inet_pton(AF_INET, a.c_str(), &v4) != 1 && inet_pton(AF_INET6, a.c_str(), &v6) != 1)
      return InvalidArgument("SPARROW_SOCKET_ADDR='" + a + "': not a numeric IPv4 or IPv6 address");
    return a;
  }
  std::string want = kIfname.get();
  SPARROW_ASSIGN_OR_RETURN(std::vector<Interface> ifs, ipv4_interfaces());
  for (const Interface& i : ifs)
    if (want.empty() ? !i.loopback : want == i.name) return i.address;
  if (!want.empty()) return InvalidArgument("SPARROW_SOCKET_IFNAME='" + want + "': no such interface with an IPv4 address");
  return std::string("127.0.0.1");
}

Result<std::vector<Interface>> ipv4_interfaces() {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return SystemError("getifaddrs", errno);
  std::vector<Interface> v;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, host, sizeof host);
    v.push_back({i->ifa_name, host, (i->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(ifs);
  return v;
}

void set_nonblocking(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void tune_stream(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::string cc = kCongestion.get();
  if (!cc.empty() && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.c_str(), socklen_t(cc.size())) != 0) {
    static bool warned = false;
    if (!warned) {
      warned = true;
      SPARROW_INFO("TCP congestion control '%s' unavailable (%s); using the kernel default", cc.c_str(), strerror(errno));
    }
  }
  if (int b = int(kSockBuf.get()); b > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
  }
}

std::string peer_of(int fd) {
  SockAddr a;
  a.len = sizeof a.ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) return "?";
  return a.str();
}

Result<int> listen_on(const std::string& host, std::string* bound) {
  SPARROW_ASSIGN_OR_RETURN(SockAddr a, parse_address(host.find(':') != std::string::npos && host[0] != '[' ? "[" + host + "]:0" : host + ":0"));
  int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return SystemError("socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a.ss), a.len) != 0 || listen(fd, 1024) != 0) {
    int e = errno;
    close(fd);
    return SystemError("listen on " + host, e);
  }
  SockAddr b;
  b.len = sizeof b.ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&b.ss), &b.len);
  *bound = b.str();
  return fd;
}

Result<int> connect_to(const std::string& address, Deadline d) {
  SPARROW_ASSIGN_OR_RETURN(SockAddr a, parse_address(address));
  while (true) {
    int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return SystemError("socket", errno);
    int r = connect(fd, reinterpret_cast<sockaddr*>(&a.ss), a.len);
    int err = r == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int n = poll(&p, 1, remaining_ms(d));
      if (n == 0) {
        close(fd);
        return Error(Code::kTimeout, "connect to " + address + " timed out");
      }
      socklen_t l = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
    }
    if (err == 0) return fd;
    close(fd);
    // The peer may not be listening yet (it publishes its address before every rank is up): retry
    // refused connections until the deadline.
    if ((err == ECONNREFUSED || err == ETIMEDOUT) && Clock::now() + std::chrono::milliseconds(20) < d) {
      pollfd none{-1, 0, 0};
      poll(&none, 0, 20);
      continue;
    }
    return Error(err == ECONNREFUSED ? Code::kPeerLost : Code::kSystemError,
                 "connect to " + address + ": " + strerror(err));
  }
}

Status read_exact(int fd, void* buf, size_t n, Deadline d, const std::string& peer) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= size_t(r);
      continue;
    }
    if (r == 0) return Error(Code::kPeerLost, peer + " closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return SystemError("recv from " + peer, errno);
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, remaining_ms(d)) == 0) return Error(Code::kTimeout, "no answer from " + peer + " before the timeout");
  }
  return Status::Ok();
}

Status write_exact(int fd, const void* buf, size_t n, Deadline d, const std::string& peer) {
  const uint8_t* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r > 0) {
      p += r;
      n -= size_t(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return SystemError("send to " + peer, errno);
    pollfd pf{fd, POLLOUT, 0};
    if (poll(&pf, 1, remaining_ms(d)) == 0) return Error(Code::kTimeout, "send to " + peer + " timed out");
  }
  return Status::Ok();
}

}  // namespace sparrow::transport::net
