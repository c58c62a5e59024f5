#include "tools/wanemu/proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits.h>
#include <list>
#include <mutex>

namespace sparrow::wanemu {
namespace {

double mono_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

void nonblock(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

struct Seg {
  double release;
  std::vector<uint8_t> data;
  size_t off = 0;
};

// One direction of a relayed connection: bytes read from `src` (host `from`) are written to `dst`
// (host `to`) when the link model releases them.
struct Dir {
  int src = -1, dst = -1, from = 0, to = 0;
  std::deque<Seg> q;
  size_t queued = 0;
  bool eof = false, shut = false, want_out = false;
};

struct Pair {
  int a = -1, b = -1;  // a: the connecting side, b: the destination
  Dir ab, ba;
  bool dead = false;
  uint32_t ev_a = 0, ev_b = 0;  // registered epoll interest
};

constexpr size_t kMaxQueued = 8u << 20;  // per direction, bounds memory when the receiver is slow

}  // namespace

struct Proxy::Impl {
  std::mutex mu;  // counters
  std::vector<Counters> counters;
  std::vector<double> up_free, down_free, up_bps, down_bps, queue_s;
  std::vector<std::vector<double>> delay_s;
  std::list<Pair> pairs;
  int ep = -1, tfd = -1;
  std::vector<uint8_t> buf = std::vector<uint8_t>(64 << 10);  // the relay thread's reads

  void accept_one(int listen_fd, const std::vector<std::string>& addrs);
  void add_pair(int c, int d, int from, int to);
  double read_allowed_at(const Dir& d, double now) const;
  void read_one(Dir& d, double now, double& next, bool& dead, bool& progress);
  double write_due(Dir& d, double now, bool& dead);
  double service(Dir& d, double now, bool& dead, bool& progress);
  double service_all(double now);
  void set_interest(Pair& p, int fd, uint32_t& cur, uint32_t want);
  void update_interest(double now);
  void arm_timer(double next, double now);
};

std::string find_preload() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return {};
  exe[n] = 0;
  std::string dir(exe);
  dir = dir.substr(0, dir.rfind('/'));
  for (std::string c : {dir + "/../lib/libwanemu_preload.so", dir + "/libwanemu_preload.so"})
    if (access(c.c_str(), R_OK) == 0) {
      char real[PATH_MAX];
      return realpath(c.c_str(), real) ? std::string(real) : c;
    }
  return {};
}

Result<std::unique_ptr<Proxy>> Proxy::start(const Scenario& s, const std::string& preload) {
  if (preload.empty() || access(preload.c_str(), R_OK) != 0)
    return Error(Code::kInvalidArgument, "libwanemu_preload.so not found (expected in build/lib next to wanemu)");
  if (s.hosts.size() > 254) return InvalidArgument("the proxy fallback supports at most 254 hosts");
  std::unique_ptr<Proxy> p(new Proxy());
  p->s_ = s;
  p->preload_ = preload;
  auto regions = s.regions();
  for (size_t i = 0; i < s.hosts.size(); ++i) {
    size_t ri = std::find(regions.begin(), regions.end(), s.hosts[i].region) - regions.begin();
    p->addrs_.push_back("127.77." + std::to_string(ri + 1) + "." + std::to_string(i + 1));
  }
  auto im = std::make_shared<Impl>();
  const size_t n = s.hosts.size();
  im->counters.resize(n);
  im->up_free.assign(n, 0);
  im->down_free.assign(n, 0);
  im->delay_s.assign(n, std::vector<double>(n, 0));
  for (size_t i = 0; i < n; ++i) {
    im->up_bps.push_back(s.hosts[i].up_mbit * 1e6);
    im->down_bps.push_back(s.hosts[i].down_mbit * 1e6);
    im->queue_s.push_back(std::max(1.0, s.hosts[i].queue_ms) * 1e-3);
    for (size_t j = 0; j < n; ++j) {
      const Link* l = s.link(s.hosts[i].region, s.hosts[j].region);
      im->delay_s[i][j] = (l ? l->delay_ms : (s.hosts[i].region == s.hosts[j].region ? s.default_delay_ms : 0)) * 1e-3;
    }
  }
  p->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->listen_fd_ < 0) return SystemError("socket", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(p->listen_fd_, 1024) != 0 ||
      getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&a), &al) != 0)
    return SystemError("proxy listen", errno);
  p->port_ = ntohs(a.sin_port);
  im->ep = epoll_create1(EPOLL_CLOEXEC);
  im->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (im->ep < 0 || im->tfd < 0) return SystemError("epoll/timerfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // listener
  epoll_ctl(im->ep, EPOLL_CTL_ADD, p->listen_fd_, &ev);
  ev.data.ptr = &im->tfd;  // timer
  epoll_ctl(im->ep, EPOLL_CTL_ADD, im->tfd, &ev);
  p->impl_ = im;
  p->thread_ = std::thread([raw = p.get()] { raw->loop(); });
  return p;
}

std::vector<std::pair<std::string, std::string>> Proxy::env_for(int host) const {
  std::string all;
  for (auto& x : addrs_) all += (all.empty() ? "" : ",") + x;
  std::string pre = preload_;
  if (const char* old = getenv("LD_PRELOAD"); old && *old) pre += std::string(":") + old;
  return {{"WANEMU_RANK", std::to_string(host)},
          {"WANEMU_NRANKS", std::to_string(addrs_.size())},
          {"WANEMU_HOST", s_.hosts[host].name},
          {"WANEMU_REGION", s_.hosts[host].region},
          {"WANEMU_ADDR", addrs_[host]},
          {"WANEMU_ADDRS", all},
          {"WANEMU_IFNAME", "lo"},
          {"WANEMU_MODE", "proxy"},
          {"WANEMU_PROXY_PORT", std::to_string(port_)},
          {"LD_PRELOAD", pre},
          {"SPARROW_SOCKET_IFNAME", "lo"},
          {"SPARROW_SOCKET_ADDR", addrs_[host]},
          {"SPARROW_REGION", s_.hosts[host].region}};
}

Result<pid_t> Proxy::spawn(int host, const std::vector<std::string>& argv, bool quiet) const {
  auto env = env_for(host);
  pid_t p = fork();
  if (p < 0) return SystemError("fork", errno);
  if (p == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (quiet) {
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
    }
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    exec_or_exit(argv, "wanemu");
  }
  return p;
}

std::vector<Counters> Proxy::counters() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->counters;
}

namespace {

// The emulated host with address ip (network byte order), or -1.
int host_of(const std::vector<std::string>& addrs, uint32_t ip_net) {
  char buf[INET_ADDRSTRLEN];
  in_addr a{ip_net};
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  for (size_t i = 0; i < addrs.size(); ++i)
    if (addrs[i] == buf) return int(i);
  return -1;
}

// Connects to the real destination of a relayed connection; -1 with *status the errno when it cannot.
int dial(uint32_t dip, uint16_t dport, const timeval& tv, uint8_t* status) {
  int d = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in da{};
  da.sin_family = AF_INET;
  da.sin_addr.s_addr = dip;
  da.sin_port = dport;
  setsockopt(d, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(d, reinterpret_cast<sockaddr*>(&da), sizeof da) != 0) {
    *status = uint8_t(errno > 255 ? ECONNREFUSED : errno);
    close(d);
    return -1;
  }
  return d;
}

}  // namespace

// Handshake of a new connection (blocking, bounded: the client sends its header at once): the
// preload's 16-byte header names the destination and the source; the answer is one status byte.
void Proxy::Impl::accept_one(int listen_fd, const std::vector<std::string>& addrs) {
  int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (c < 0) return;
  timeval tv{5, 0};
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  uint8_t h[16];
  size_t got = 0;
  while (got < sizeof h) {
    ssize_t r = recv(c, h + got, sizeof h - got, 0);
    if (r <= 0) break;
    got += size_t(r);
  }
  if (got != sizeof h || memcmp(h, "WEP1", 4) != 0) {
    close(c);  // not one of ours
    return;
  }
  uint32_t dip, sip;
  uint16_t dport;
  memcpy(&dip, h + 4, 4);
  memcpy(&dport, h + 8, 2);
  memcpy(&sip, h + 12, 4);
  int to = host_of(addrs, dip), from = host_of(addrs, sip);
  uint8_t status = 0;
  int d = -1;
  if (to < 0 || from < 0) status = ENETUNREACH;
  else d = dial(dip, dport, tv, &status);
  if (send(c, &status, 1, MSG_NOSIGNAL) != 1 || status != 0) {
    close(c);
    if (d >= 0) close(d);
    return;
  }
  add_pair(c, d, from, to);
}

void Proxy::Impl::add_pair(int c, int d, int from, int to) {
  int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(d, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  nonblock(c, true);
  nonblock(d, true);
  Pair& p = pairs.emplace_back();
  p.a = c;
  p.b = d;
  p.ab.src = p.ba.dst = c;
  p.ab.dst = p.ba.src = d;
  p.ab.from = p.ba.to = from;
  p.ab.to = p.ba.from = to;
  epoll_event ev{};
  ev.events = 0;
  ev.data.ptr = &p;
  epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
  epoll_ctl(ep, EPOLL_CTL_ADD, d, &ev);
}

// When direction `d` may read next (now or later): the uplink and downlink backlogs are bounded.
double Proxy::Impl::read_allowed_at(const Dir& d, double now) const {
  if (d.from == d.to) return now;
  double t = std::max(up_free[d.from] - queue_s[d.from], down_free[d.to] - delay_s[d.from][d.to] - queue_s[d.to]);
  return std::max(now, t);
}

// Reads at most once from d's sender if the link model allows it now; otherwise says when it will.
void Proxy::Impl::read_one(Dir& d, double now, double& next, bool& dead, bool& progress) {
  if (d.eof || d.queued >= kMaxQueued) return;
  double at = read_allowed_at(d, now);
  if (at > now) {
    next = std::min(next, at);
    return;
  }
  size_t want = buf.size();
  if (d.from != d.to && up_bps[d.from] > 0)  // about 2 ms of the uplink per read: smooth pacing
    want = std::clamp(size_t(up_bps[d.from] / 8 * 2e-3), size_t(1500), buf.size());
  ssize_t r = recv(d.src, buf.data(), want, 0);
  if (r == 0) {
    d.eof = true;
    return;
  }
  if (r < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) dead = true;
    return;
  }
  double release = now;
  if (d.from != d.to) {
    double tx_up = up_bps[d.from] > 0 ? r * 8.0 / up_bps[d.from] : 0;
    up_free[d.from] = std::max(now, up_free[d.from]) + tx_up;
    double arrive = up_free[d.from] + delay_s[d.from][d.to];
    double tx_down = down_bps[d.to] > 0 ? r * 8.0 / down_bps[d.to] : 0;
    down_free[d.to] = std::max(arrive, down_free[d.to]) + tx_down;
    release = down_free[d.to];
  }
  d.q.push_back(Seg{release, std::vector<uint8_t>(buf.begin(), buf.begin() + r)});
  d.queued += size_t(r);
  progress = true;
  std::lock_guard<std::mutex> lk(mu);
  counters[d.from].packets++;
  counters[d.from].bytes += uint64_t(r);
}

// Writes what is due; returns when the next segment is (INFINITY: none waiting).
double Proxy::Impl::write_due(Dir& d, double now, bool& dead) {
  double next = INFINITY;
  d.want_out = false;
  while (!d.q.empty()) {
    Seg& s = d.q.front();
    if (s.release > now) {
      next = std::min(next, s.release);
      break;
    }
    ssize_t w = send(d.dst, s.data.data() + s.off, s.data.size() - s.off, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        d.want_out = true;
        break;
      }
      dead = true;
      return INFINITY;
    }
    s.off += size_t(w);
    d.queued -= size_t(w);
    if (s.off == s.data.size()) d.q.pop_front();
  }
  if (d.eof && d.q.empty() && !d.shut) {
    shutdown(d.dst, SHUT_WR);
    d.shut = true;
  }
  return next;
}

// One read (the caller round-robins over every connection, so flows that share a link interleave
// finely, as packets do, instead of one flow taking a whole queue's worth before the next), then
// every write that is due. Returns the next time something becomes possible (INFINITY: wait for I/O).
double Proxy::Impl::service(Dir& d, double now, bool& dead, bool& progress) {
  double next = INFINITY;
  read_one(d, now, next, dead, progress);
  if (dead) return INFINITY;
  const double w = write_due(d, now, dead);
  return dead ? INFINITY : std::min(next, w);
}

// Round-robin over every connection until nothing more moves; closes the finished and the broken.
double Proxy::Impl::service_all(double now) {
  double next = INFINITY;
  bool progress = true;
  for (int pass = 0; progress && pass < 4096; ++pass) {
    progress = false;
    next = INFINITY;
    for (auto it = pairs.begin(); it != pairs.end();) {
      Pair& p = *it;
      bool dead = false;
      next = std::min(next, service(p.ab, now, dead, progress));
      if (!dead) next = std::min(next, service(p.ba, now, dead, progress));
      if (dead || (p.ab.shut && p.ba.shut)) {
        close(p.a);
        close(p.b);
        it = pairs.erase(it);
        continue;
      }
      ++it;
    }
  }
  return next;
}

void Proxy::Impl::set_interest(Pair& p, int fd, uint32_t& cur, uint32_t want) {
  if (cur == want) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = &p;
  epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
  cur = want;
}

// Each socket waits for reading only when the link model lets its direction read now, and for
// writing only when a send would have blocked.
void Proxy::Impl::update_interest(double now) {
  for (Pair& p : pairs) {
    auto readable = [&](const Dir& d) { return !d.eof && d.queued < kMaxQueued && read_allowed_at(d, now) <= now; };
    const uint32_t in = EPOLLIN, out = EPOLLOUT, none = 0;
    set_interest(p, p.a, p.ev_a, (readable(p.ab) ? in : none) | (p.ba.want_out ? out : none));
    set_interest(p, p.b, p.ev_b, (readable(p.ba) ? in : none) | (p.ab.want_out ? out : none));
  }
}

void Proxy::Impl::arm_timer(double next, double now) {
  itimerspec ts{};
  double wake = std::isfinite(next) ? std::min(next, now + 0.2) : now + 0.2;  // 0.2 s: notice stop()
  ts.it_value.tv_sec = time_t(wake);
  ts.it_value.tv_nsec = long((wake - std::floor(wake)) * 1e9);
  if (ts.it_value.tv_sec == 0 && ts.it_value.tv_nsec == 0) ts.it_value.tv_nsec = 1;
  timerfd_settime(tfd, TFD_TIMER_ABSTIME, &ts, nullptr);
}

void Proxy::loop() {
  Impl& im = *impl_;
  std::vector<epoll_event> evs(256);
  while (!stop_.load()) {
    const double now = mono_now();
    const double next = im.service_all(now);
    im.update_interest(now);
    im.arm_timer(next, now);
    int n = epoll_wait(im.ep, evs.data(), int(evs.size()), -1);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.ptr == nullptr) im.accept_one(listen_fd_, addrs_);
      else if (evs[i].data.ptr == &im.tfd) {
        uint64_t x;
        (void)!read(im.tfd, &x, sizeof x);
      }
    }
  }
}

void Proxy::stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  if (impl_) {
    for (auto& p : impl_->pairs) {
      close(p.a);
      close(p.b);
    }
    impl_->pairs.clear();
    if (impl_->ep >= 0) close(impl_->ep);
    if (impl_->tfd >= 0) close(impl_->tfd);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

Proxy::~Proxy() { stop(); }

}  // namespace sparrow::wanemu
