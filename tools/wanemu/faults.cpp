#include "tools/wanemu/faults.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>

#include "core/strings.h"

namespace sparrow::wanemu {

std::map<pid_t, pid_t> process_parents() {
  std::map<pid_t, pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t rp = stat.rfind(')');  // the command name may contain spaces and parentheses
    char state = 0;
    long ppid = 0;
    if (rp != std::string::npos && sscanf(stat.c_str() + rp + 1, " %c %ld", &state, &ppid) == 2)
      out[pid_t(pid)] = pid_t(ppid);
  }
  closedir(d);
  return out;
}

namespace {

bool descends_from(pid_t p, pid_t ancestor, const std::map<pid_t, pid_t>& par) {
  for (int depth = 0; depth < 256 && p > 1; ++depth) {
    auto it = par.find(p);
    if (it == par.end()) return false;
    p = it->second;
    if (p == ancestor) return true;
  }
  return false;
}

std::string hosts_text(const Scenario& s, const std::vector<int>& hs) {
  std::string t;
  for (int h : hs) t += (t.empty() ? "" : ",") + s.hosts[size_t(h)].name;
  return t;
}

}  // namespace

std::vector<pid_t> host_processes(const Emulator& e, int host, bool leaves) {
  const uint64_t ns = e.netns_inode(host);
  const auto par = process_parents();
  std::vector<pid_t> out;
  for (auto [pid, ppid] : par) {
    if (pid == e.hosts()[size_t(host)].holder || pid == getpid()) continue;
    struct stat st{};
    if (stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &st) != 0 || uint64_t(st.st_ino) != ns) continue;
    if (!descends_from(pid, getpid(), par)) continue;
    if (leaves && std::any_of(par.begin(), par.end(), [p = pid](auto& kv) { return kv.second == p; })) continue;
    out.push_back(pid);
  }
  return out;
}

Result<std::unique_ptr<FaultControl>> FaultControl::start(Emulator& e) {
  std::unique_ptr<FaultControl> fc(new FaultControl(e));
  static std::atomic<int> serial{0};
  const char* tmp = getenv("TMPDIR");
  fc->path_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/wanemu-" + std::to_string(getpid()) + "-" +
              std::to_string(serial++) + ".ctl";
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (fc->path_.size() >= sizeof a.sun_path) return InvalidArgument("wanemu: control socket path too long: " + fc->path_);
  memcpy(a.sun_path, fc->path_.c_str(), fc->path_.size());
  unlink(fc->path_.c_str());
  fc->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fc->listen_fd_ < 0 || bind(fc->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      chmod(fc->path_.c_str(), 0600) != 0 || listen(fc->listen_fd_, 16) != 0)
    return SystemError("wanemu: control socket " + fc->path_, errno);
  if (pipe2(fc->wake_, O_CLOEXEC | O_NONBLOCK) != 0) return SystemError("pipe", errno);
  fc->started_ns_ = now_ns();
  FaultControl* raw = fc.get();
  fc->thread_ = std::thread([raw] { raw->serve(); });
  return fc;
}

FaultControl::~FaultControl() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  resume_due(true);
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) close(fd);
  if (!path_.empty()) unlink(path_.c_str());
}

Result<std::string> FaultControl::apply(const Fault& f) {
  const Scenario& s = e_.scenario();
  SPARROW_ASSIGN_OR_RETURN(auto a, s.resolve(f.target));
  std::vector<int> b;
  if (!f.peer.empty()) {
    SPARROW_ASSIGN_OR_RETURN(b, s.resolve(f.peer));
  } else {
    for (int h = 0; h < int(s.hosts.size()); ++h)
      if (std::find(a.begin(), a.end(), h) == a.end()) b.push_back(h);
  }
  const int64_t now = now_ns();
  const int64_t until = f.for_s > 0 ? now + int64_t(f.for_s * 1e9) : INT64_MAX;
  std::string what;
  if (f.kind == Fault::Kind::kKill || f.kind == Fault::Kind::kStop) {
    std::vector<pid_t> pids;
    for (int h : a)
      for (pid_t p : host_processes(e_, h, f.leaves)) pids.push_back(p);
    const int sig = f.kind == Fault::Kind::kKill ? SIGKILL : SIGSTOP;
    for (pid_t p : pids) kill(p, sig);
    if (f.kind == Fault::Kind::kStop) {
      std::lock_guard<std::mutex> lk(mu_);
      resumes_.push_back(Resume{until, pids});
    }
    what = std::to_string(pids.size()) + (pids.size() == 1 ? " process" : " processes") + " on " + hosts_text(s, a);
  } else {
    if (b.empty()) return InvalidArgument("fault: " + describe(f) + " leaves nothing on the other side");
    e_.cut(a, b, until, f.kind == Fault::Kind::kStall);
    what = hosts_text(s, a) + " <-> " + hosts_text(s, b);
  }
  (void)!write(wake_[1], "x", 1);  // the schedule may have a new resume time
  char when[32];
  snprintf(when, sizeof when, "%.3f", double(now - started_ns_) / 1e9);
  std::string line = describe(f) + ": " + what;
  fprintf(stderr, "wanemu: fault at +%s s: %s\n", when, line.c_str());
  return line;
}

void FaultControl::resume_due(bool all) {
  std::lock_guard<std::mutex> lk(mu_);
  const int64_t now = now_ns();
  std::erase_if(resumes_, [&](const Resume& r) {
    if (!all && r.at_ns > now) return false;
    for (pid_t p : r.pids) kill(p, SIGCONT);
    return true;
  });
}

void FaultControl::answer(int client) {
  timeval tv{2, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string line;
  char c;
  while (line.size() < 4096 && recv(client, &c, 1, 0) == 1 && c != '\n') line += c;
  std::vector<std::string> words;
  for (auto& w : split(line, ' '))
    if (!w.empty()) words.push_back(w);
  auto f = parse_fault(words);
  std::string reply;
  if (!f.ok()) {
    reply = "error: " + f.status().message() + "\n";
  } else {
    auto r = apply(*f);
    reply = r.ok() ? "ok: " + *r + "\n" : "error: " + r.status().message() + "\n";
  }
  (void)!send(client, reply.data(), reply.size(), MSG_NOSIGNAL);
  close(client);
}

void FaultControl::serve() {
  const auto& schedule = e_.scenario().faults;
  size_t next = 0;
  while (true) {
    int64_t deadline = next < schedule.size() ? started_ns_ + int64_t(schedule[next].at_s * 1e9) : INT64_MAX;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
      for (auto& r : resumes_) deadline = std::min(deadline, r.at_ns);
    }
    const int64_t now = now_ns();
    int timeout = deadline == INT64_MAX ? -1 : int(std::clamp<int64_t>((deadline - now + 999999) / 1000000, 0, 60000));
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    int k = poll(p, 2, timeout);
    if (k < 0 && errno != EINTR) return;
    if (p[1].revents & POLLIN) {
      char drain[64];
      while (read(wake_[0], drain, sizeof drain) > 0) {
      }
    }
    if (p[0].revents & POLLIN) {
      int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) answer(c);
    }
    resume_due(false);
    while (next < schedule.size() && started_ns_ + int64_t(schedule[next].at_s * 1e9) <= now_ns()) {
      auto r = apply(schedule[next++]);
      if (!r.ok()) fprintf(stderr, "wanemu: scheduled fault failed: %s\n", r.status().to_string().c_str());
    }
  }
}

int fault_client(int argc, char** argv) {
  int i = 2;
  const char* path = getenv("WANEMU_CONTROL");
  if (i + 1 < argc && !strcmp(argv[i], "--control")) {
    path = argv[i + 1];
    i += 2;
  }
  std::vector<std::string> words(argv + i, argv + argc);
  auto f = parse_fault(words);
  if (!f.ok()) {
    fprintf(stderr, "wanemu fault: %s\n", f.status().message().c_str());
    return 2;
  }
  if (!path || !*path) {
    fprintf(stderr, "wanemu fault: no WANEMU_CONTROL: run it inside `wanemu run` (namespace emulator) or pass --control PATH\n");
    return 2;
  }
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    fprintf(stderr, "wanemu fault: cannot reach the emulator at %s: %s\n", path, strerror(errno));
    return 1;
  }
  std::string line;
  for (auto& w : words) line += (line.empty() ? "" : " ") + w;
  line += "\n";
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string reply;
  if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) == ssize_t(line.size())) {
    char b[512];
    for (ssize_t r; (r = recv(fd, b, sizeof b, 0)) > 0;) reply.append(b, size_t(r));
  }
  close(fd);
  if (reply.empty()) {
    fprintf(stderr, "wanemu fault: no answer from the emulator at %s\n", path);
    return 1;
  }
  fputs(reply.c_str(), stdout);
  return reply.rfind("ok:", 0) == 0 ? 0 : 1;
}

}  // namespace sparrow::wanemu
