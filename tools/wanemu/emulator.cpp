#include "tools/wanemu/emulator.h"

#include "core/strings.h"

#include <fcntl.h>
#include <pthread.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <queue>
#include <random>

namespace sparrow::wanemu {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

namespace {


// Runs a command and waits; argv[0] is looked up in PATH. Output is discarded unless it fails.
Status sh(const std::vector<std::string>& argv) {
  pid_t p = fork();
  if (p == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    exec_or_exit(argv, "wanemu");
  }
  int st = 0;
  waitpid(p, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::string cmd;
    for (auto& s : argv) cmd += s + " ";
    return Error(Code::kSystemError, "wanemu: command failed: " + cmd);
  }
  return Status::Ok();
}

Status in_ns(pid_t holder, std::vector<std::string> argv) {
  std::vector<std::string> full = {"nsenter", "-t", std::to_string(holder), "-n"};
  full.insert(full.end(), argv.begin(), argv.end());
  return sh(full);
}

constexpr int kTunQueuePackets = 20000;

struct Access {
  double bps = 0;       // bits per second (0: unlimited)
  int64_t busy = 0;     // time the link finishes its current backlog
  double queue_ms = 100;
};

struct Path {
  const Link* link = nullptr;
  int64_t last_arrival = 0;
  bool ge_bad = false;
};

struct Packet {
  std::vector<uint8_t> data;
  int src, dst;
};

struct Event {
  int64_t t;
  uint64_t order;
  int kind;  // 0 arrive at destination's downlink, 1 deliver
  std::shared_ptr<Packet> p;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : order > o.order; }
};

struct Cut {
  std::vector<bool> a, b;  // by host
  int64_t until;
  bool hold;
};

// Whether a packet from src to dst entering at t is dropped by a fault; a stall only moves
// *held_until (the latest end of the stalls on its path). Expired faults are forgotten.
bool cut_path(std::vector<Cut>& cuts, int src, int dst, int64_t t, int64_t* held_until) {
  std::erase_if(cuts, [t](const Cut& c) { return c.until <= t; });
  bool drop = false;
  for (const Cut& c : cuts) {
    if (!((c.a[size_t(src)] && c.b[size_t(dst)]) || (c.b[size_t(src)] && c.a[size_t(dst)]))) continue;
    if (c.hold) *held_until = std::max(*held_until, c.until);
    else drop = true;
  }
  return drop;
}

}  // namespace

struct Emulator::Impl {
  std::vector<Cut> cuts;
  std::vector<Access> up, down;
  std::vector<std::vector<Path>> paths;  // [src][dst]
  std::map<uint32_t, int> by_addr;       // IPv4 (host order) -> host
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q;
  uint64_t order = 0;
  std::mt19937_64 rng;
  mutable std::mutex mu;
  std::vector<Counters> ctr;
};

void Emulator::cut(std::vector<int> a, std::vector<int> b, int64_t until_ns, bool hold) {
  const size_t n = rt_.size();
  Cut c{std::vector<bool>(n), std::vector<bool>(n), until_ns, hold};
  for (int h : a) c.a[size_t(h)] = true;
  for (int h : b) c.b[size_t(h)] = true;
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->cuts.push_back(std::move(c));
}

uint64_t Emulator::netns_inode(int host) const {
  struct stat st{};
  return fstat(rt_[size_t(host)].nsfd, &st) == 0 ? uint64_t(st.st_ino) : 0;
}

bool can_emulate(std::string* why) {
  if (geteuid() != 0) {
    *why = "not root";
    return false;
  }
  int fd = open("/dev/net/tun", O_RDWR);
  if (fd < 0) {
    *why = std::string("/dev/net/tun: ") + strerror(errno);
    return false;
  }
  close(fd);
  return true;
}

namespace {

// Host i's network namespace (owned by a holder process), its TUN device (the router keeps the fd)
// with the host's address in region ri, and the host's TCP settings.
Status open_host(const Scenario& s, int i, int ri, HostRuntime& h) {
  // A holder process owns the namespace; it dies with us, and the namespace with it.
  int pfd[2];
  if (pipe(pfd) != 0) return SystemError("pipe", errno);
  pid_t holder = fork();
  if (holder == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (unshare(CLONE_NEWNET) != 0) _exit(1);
    char ok = 1;
    (void)!write(pfd[1], &ok, 1);
    while (true) pause();
  }
  close(pfd[1]);
  char ok = 0;
  bool up = read(pfd[0], &ok, 1) == 1;
  close(pfd[0]);
  h.holder = holder;
  if (!up) return Error(Code::kSystemError, "wanemu: could not create a network namespace");
  h.nsfd = open(("/proc/" + std::to_string(holder) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC);
  h.addr = "10.77." + std::to_string(ri + 1) + "." + std::to_string(i + 1);  // private, inside our namespaces only
  h.ifname = "swe" + std::to_string(getpid() % 100000) + "h" + std::to_string(i);
  // The TUN device is created here (the router keeps its fd) and moved into the namespace.
  h.tunfd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  strncpy(ifr.ifr_name, h.ifname.c_str(), IFNAMSIZ - 1);
  if (h.tunfd < 0 || ioctl(h.tunfd, TUNSETIFF, &ifr) != 0) return SystemError("wanemu: TUNSETIFF " + h.ifname, errno);
  fcntl(h.tunfd, F_SETFL, fcntl(h.tunfd, F_GETFL) | O_NONBLOCK);
  SPARROW_RETURN_IF_ERROR(sh({"ip", "link", "set", "dev", h.ifname, "netns", std::to_string(holder)}));
  SPARROW_RETURN_IF_ERROR(in_ns(holder, {"ip", "link", "set", "lo", "up"}));
  SPARROW_RETURN_IF_ERROR(in_ns(holder, {"ip", "addr", "add", h.addr + "/16", "dev", h.ifname}));
  // The TUN ring (txqueuelen packets) is what the kernel fills while the router is off the CPU; at
  // the default 500 a few milliseconds' delay at 1 Gbit/s overflowed it and dropped packets the
  // scenario never lost (8% of a root's packets, seen on the 2-core VMs). 20,000 holds ~240 ms.
  SPARROW_RETURN_IF_ERROR(in_ns(holder, {"ip", "link", "set", h.ifname, "mtu", std::to_string(s.mtu), "txqueuelen",
                                         std::to_string(kTunQueuePackets), "up"}));
  (void)in_ns(holder, {"sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"});
  // Hosts on a WAN tune their TCP buffers for the bandwidth-delay product: let autotuning reach 32 MiB.
  (void)in_ns(holder, {"sysctl", "-q", "-w", "net.ipv4.tcp_rmem=4096 131072 33554432"});
  (void)in_ns(holder, {"sysctl", "-q", "-w", "net.ipv4.tcp_wmem=4096 16384 33554432"});
  // ... and keep their congestion window across idle periods between training steps (the kernel
  // default drops it back to 10 segments after one RTO of idleness, costing round trips per step).
  (void)in_ns(holder, {"sysctl", "-q", "-w", "net.ipv4.tcp_slow_start_after_idle=0"});
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Emulator>> Emulator::start(const Scenario& s) {
  std::string why;
  if (!can_emulate(&why)) return Error(Code::kInvalidUsage, "wanemu needs root and /dev/net/tun (" + why + ")");
  std::unique_ptr<Emulator> e(new Emulator());
  e->s_ = s;
  e->impl_ = std::make_shared<Impl>();
  auto& im = *e->impl_;
  im.rng.seed(s.seed);
  const int n = int(s.hosts.size());
  auto regions = s.regions();
  e->rt_.resize(n);
  for (int i = 0; i < n; ++i) {
    auto& h = e->rt_[i];
    const int ri = int(std::find(regions.begin(), regions.end(), s.hosts[i].region) - regions.begin());
    SPARROW_RETURN_IF_ERROR(open_host(s, i, ri, h));
    uint32_t a = (10u << 24) | (77u << 16) | (uint32_t(ri + 1) << 8) | uint32_t(i + 1);
    im.by_addr[a] = i;
    Access up_l, down_l;
    up_l.bps = s.hosts[i].up_mbit * 1e6;
    down_l.bps = s.hosts[i].down_mbit * 1e6;
    up_l.queue_ms = down_l.queue_ms = s.hosts[i].queue_ms;
    im.up.push_back(up_l);
    im.down.push_back(down_l);
  }
  im.paths.assign(n, std::vector<Path>(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) im.paths[i][j].link = s.link(s.hosts[i].region, s.hosts[j].region);
  im.ctr.resize(n);
  e->ep_ = epoll_create1(EPOLL_CLOEXEC);
  e->timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = uint32_t(n);
  epoll_ctl(e->ep_, EPOLL_CTL_ADD, e->timer_fd_, &ev);
  for (int i = 0; i < n; ++i) {
    ev.data.u32 = uint32_t(i);
    epoll_ctl(e->ep_, EPOLL_CTL_ADD, e->rt_[i].tunfd, &ev);
  }
  Emulator* raw = e.get();
  e->router_ = std::thread([raw] { raw->route(); });
  return e;
}

namespace {

// Queues `bytes` entering link l at t: false (a tail drop) when its backlog exceeds the queue; else
// *done is when the last bit leaves.
bool enqueue_link(Access& l, int64_t t, size_t bytes, int64_t* done) {
  if (l.bps <= 0) {
    *done = t;
    return true;
  }
  int64_t start = std::max(t, l.busy);
  double backlog_s = double(start - t) / 1e9;
  if (backlog_s * 1e3 > l.queue_ms) return false;
  l.busy = start + int64_t(double(bytes) * 8e9 / l.bps);
  *done = l.busy;
  return true;
}

// Whether the path loses a packet entering it now (Bernoulli loss and the Gilbert-Elliott state).
bool path_loses(Path& path, std::mt19937_64& rng) {
  if (!path.link) return false;
  std::uniform_real_distribution<double> U(0, 1);
  const Link& l = *path.link;
  bool lost = false;
  if (l.ge_p > 0 || l.ge_r > 0) {
    if (path.ge_bad) path.ge_bad = U(rng) >= l.ge_r;
    else path.ge_bad = U(rng) < l.ge_p;
    if (path.ge_bad && U(rng) < l.ge_loss) lost = true;
  }
  if (l.loss > 0 && U(rng) < l.loss) lost = true;
  return lost;
}

}  // namespace

void Emulator::route() {
  // The router is the network: ranks that keep every core busy must not hold it off the CPU (the
  // TUN rings would fill and drop, or packets would wait past their delay). It sleeps in epoll
  // between packets, so a real-time priority costs the ranks only the routing itself; the kernel's
  // real-time throttling still bounds it. Without the privilege it runs at the normal priority.
  sched_param sp{};
  sp.sched_priority = 10;
  realtime_ = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0;
  const int n = int(rt_.size());
  std::vector<uint8_t> buf(65536);
  epoll_event evs[64];
  while (!stop_) {
    arm_timer();
    int k = epoll_wait(ep_, evs, 64, 100);
    for (int x = 0; x < k; ++x) {
      uint32_t src = evs[x].data.u32;
      if (int(src) == n) {
        uint64_t v;
        (void)!read(timer_fd_, &v, sizeof v);
        continue;
      }
      for (ssize_t r; (r = read(rt_[src].tunfd, buf.data(), buf.size())) > 0;) admit(int(src), buf.data(), size_t(r));
    }
    deliver_due();
  }
}

// Arms the timer for the next event (nanosecond precision through timerfd).
void Emulator::arm_timer() {
  auto& im = *impl_;
  if (im.q.empty()) return;
  itimerspec it{};
  int64_t t = std::max<int64_t>(im.q.top().t, 1);
  it.it_value.tv_sec = t / 1000000000;
  it.it_value.tv_nsec = t % 1000000000;
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &it, nullptr);
}

// A packet host src sent: lost on its path, dropped or held by a fault, dropped at its uplink's
// queue, or scheduled to reach the destination's downlink after the path's delay.
void Emulator::admit(int src, const uint8_t* pkt, size_t len) {
  auto& im = *impl_;
  if (len < 20 || (pkt[0] >> 4) != 4) return;  // IPv4 only
  uint32_t dst_ip = uint32_t(pkt[16]) << 24 | uint32_t(pkt[17]) << 16 | uint32_t(pkt[18]) << 8 | pkt[19];
  auto it = im.by_addr.find(dst_ip);
  if (it == im.by_addr.end()) return;  // nowhere to go: nothing leaves the emulator
  const int dst = it->second;
  const int64_t t = now_ns();
  Path& path = im.paths[size_t(src)][size_t(dst)];
  std::lock_guard<std::mutex> lk(im.mu);
  im.ctr[size_t(src)].packets++;
  im.ctr[size_t(src)].bytes += len;
  if (path_loses(path, im.rng)) {  // decided when the packet enters the path
    im.ctr[size_t(src)].loss_drops++;
    return;
  }
  int64_t held_until = 0;
  if (cut_path(im.cuts, src, dst, t, &held_until)) {
    im.ctr[size_t(src)].fault_drops++;
    return;
  }
  int64_t departed;
  if (!enqueue_link(im.up[size_t(src)], t, len, &departed)) {
    im.ctr[size_t(src)].queue_drops++;
    return;
  }
  const auto& hs = s_.hosts;
  double delay_ms = path.link ? path.link->delay_ms : (hs[size_t(src)].region == hs[size_t(dst)].region ? s_.default_delay_ms : 0);
  double jitter_ms = path.link ? path.link->jitter_ms : 0;
  std::uniform_real_distribution<double> U(0, 1);
  int64_t arrive = departed + int64_t(delay_ms * 1e6 + (jitter_ms > 0 ? U(im.rng) * jitter_ms * 1e6 : 0));
  arrive = std::max({arrive, held_until, path.last_arrival});  // jitter never reorders a path
  path.last_arrival = arrive;
  auto p = std::make_shared<Packet>();
  p->data.assign(pkt, pkt + len);
  p->src = src;
  p->dst = dst;
  im.q.push(Event{arrive, im.order++, 0, p});
}

// The events that are due: a packet reaching its destination's downlink queues there; one through
// it is written to the destination's TUN device.
void Emulator::deliver_due() {
  auto& im = *impl_;
  const int64_t t = now_ns();
  while (!im.q.empty() && im.q.top().t <= t) {
    Event e = im.q.top();
    im.q.pop();
    if (e.kind == 0) {
      int64_t done;
      std::lock_guard<std::mutex> lk(im.mu);
      if (!enqueue_link(im.down[size_t(e.p->dst)], e.t, e.p->data.size(), &done)) {
        im.ctr[size_t(e.p->dst)].queue_drops++;
        continue;
      }
      im.q.push(Event{done, im.order++, 1, e.p});
    } else {
      (void)!write(rt_[size_t(e.p->dst)].tunfd, e.p->data.data(), e.p->data.size());
    }
  }
}

// The transmit drops of interface `ifname` in /proc/PID/net/dev (PID's network namespace): packets
// the kernel could not queue on the TUN device because the router had not read the ones before.
uint64_t tun_tx_drops(pid_t holder, const std::string& ifname) {
  FILE* f = fopen(("/proc/" + std::to_string(holder) + "/net/dev").c_str(), "r");
  if (!f) return 0;
  char line[512];
  uint64_t drops = 0;
  while (fgets(line, sizeof line, f)) {
    char* colon = strchr(line, ':');
    if (!colon) continue;
    *colon = 0;
    if (trim(line) != ifname) continue;
    unsigned long long v[12] = {};  // receive: 8 fields; transmit: bytes, packets, errs, drop
    if (sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11]) == 12)
      drops = v[11];
  }
  fclose(f);
  return drops;
}

std::vector<Counters> Emulator::counters() const {
  std::vector<Counters> c;
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    c = impl_->ctr;
  }
  for (size_t i = 0; i < c.size() && i < rt_.size(); ++i) c[i].emu_drops = tun_tx_drops(rt_[i].holder, rt_[i].ifname);
  return c;
}

Result<pid_t> Emulator::spawn(int host, const std::vector<std::string>& argv, bool quiet) const {
  const auto& h = rt_[host];
  pid_t p = fork();
  if (p < 0) return SystemError("fork", errno);
  if (p == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (setns(h.nsfd, CLONE_NEWNET) != 0) _exit(126);
    if (quiet) {
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
    }
    setenv("WANEMU_RANK", std::to_string(host).c_str(), 1);
    setenv("WANEMU_NRANKS", std::to_string(rt_.size()).c_str(), 1);
    setenv("WANEMU_HOST", s_.hosts[host].name.c_str(), 1);
    setenv("WANEMU_REGION", s_.hosts[host].region.c_str(), 1);
    setenv("WANEMU_ADDR", h.addr.c_str(), 1);
    setenv("WANEMU_IFNAME", h.ifname.c_str(), 1);
    setenv("WANEMU_ADDRS", [&] {
      std::string a;
      for (auto& r : rt_) a += (a.empty() ? "" : ",") + r.addr;
      return a;
    }().c_str(), 1);
    setenv("SPARROW_SOCKET_IFNAME", h.ifname.c_str(), 1);
    setenv("SPARROW_REGION", s_.hosts[host].region.c_str(), 1);
    exec_or_exit(argv, "wanemu");
  }
  return p;
}

void Emulator::stop() {
  if (stop_.exchange(true)) return;
  if (router_.joinable()) router_.join();
  for (auto& h : rt_) {
    if (h.tunfd >= 0) close(h.tunfd);
    if (h.nsfd >= 0) close(h.nsfd);
    if (h.holder > 0) {
      kill(h.holder, SIGKILL);
      waitpid(h.holder, nullptr, 0);
    }
    h = HostRuntime{};
  }
  if (timer_fd_ >= 0) close(timer_fd_);
  if (ep_ >= 0) close(ep_);
  timer_fd_ = ep_ = -1;
}

Emulator::~Emulator() { stop(); }

void exec_or_exit(const std::vector<std::string>& argv, const char* who) {
  std::vector<char*> a;
  for (auto& x : argv) a.push_back(const_cast<char*>(x.c_str()));
  a.push_back(nullptr);
  if (!a.empty() && a[0]) execvp(a[0], a.data());
  fprintf(stderr, "%s: cannot run %s: %s\n", who, a[0] ? a[0] : "(nothing)", strerror(errno));
  _exit(127);
}

int enter_and_exec(const std::vector<std::string>& argv) {
  if (const char* mode = getenv("WANEMU_MODE"); mode && !strcmp(mode, "proxy")) {
    // The loopback-proxy fallback: no namespace to enter; become the rank's host by environment.
    const char* r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMIX_RANK");
    if (!r) r = getenv("WANEMU_RANK");
    auto addrs = split(getenv("WANEMU_ADDRS") ? getenv("WANEMU_ADDRS") : "");
    auto rg = split(getenv("WANEMU_REGIONS") ? getenv("WANEMU_REGIONS") : "");
    const char* pre = getenv("WANEMU_PRELOAD");
    int rank = r ? atoi(r) : -1;
    if (rank < 0 || rank >= int(addrs.size()) || argv.empty() || !pre || !*pre) {
      fprintf(stderr, "wanemu enter: rank %d, %zu hosts, preload '%s': run it under `wanemu run --launcher`\n", rank,
              addrs.size(), pre ? pre : "");
      return 2;
    }
    setenv("WANEMU_ADDR", addrs[rank].c_str(), 1);
    setenv("WANEMU_RANK", std::to_string(rank).c_str(), 1);
    setenv("SPARROW_SOCKET_IFNAME", "lo", 1);
    setenv("SPARROW_SOCKET_ADDR", addrs[rank].c_str(), 1);
    if (rank < int(rg.size())) setenv("SPARROW_REGION", rg[rank].c_str(), 1);
    std::string lp = pre;
    if (const char* old = getenv("LD_PRELOAD"); old && *old) lp += std::string(":") + old;
    setenv("LD_PRELOAD", lp.c_str(), 1);
    exec_or_exit(argv, "wanemu enter");
  }
  const char* ns = getenv("WANEMU_NS_PIDS");
  const char* ifs = getenv("WANEMU_IFNAMES");
  const char* regs = getenv("WANEMU_REGIONS");
  const char* rank_s = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank_s) rank_s = getenv("PMIX_RANK");
  if (!rank_s) rank_s = getenv("WANEMU_RANK");
  if (!ns || !ifs || !rank_s || argv.empty()) {
    fprintf(stderr, "wanemu enter: run it under `wanemu run SCENARIO --launcher -- mpirun ... wanemu enter -- prog`\n");
    return 2;
  }
  auto pids = split(ns), names = split(ifs), rg = split(regs ? regs : "");
  int rank = atoi(rank_s);
  if (rank < 0 || rank >= int(pids.size())) {
    fprintf(stderr, "wanemu enter: rank %d but the scenario has %zu hosts\n", rank, pids.size());
    return 2;
  }
  int fd = open(("/proc/" + pids[rank] + "/ns/net").c_str(), O_RDONLY);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    fprintf(stderr, "wanemu enter: cannot enter the namespace of host %d: %s\n", rank, strerror(errno));
    return 2;
  }
  setenv("SPARROW_SOCKET_IFNAME", names[rank].c_str(), 1);
  if (rank < int(rg.size())) setenv("SPARROW_REGION", rg[rank].c_str(), 1);
  setenv("WANEMU_RANK", std::to_string(rank).c_str(), 1);
  exec_or_exit(argv, "wanemu enter");
}

}  // namespace sparrow::wanemu
