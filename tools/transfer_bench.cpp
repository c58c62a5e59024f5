// sparrow-transfer-bench: one large striped transfer between two ranks in two processes, compared
// with iperf3 over the same loopback in the same run.
//
//   sparrow-transfer-bench [--bytes 1G] [--transport tcp|ucx] [--streams N] [--reps 3] [--no-iperf3] [--json]
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api/api_internal.h"
#include "core/args.h"
#include "core/params.h"
#include "transport/net.h"
#include "sparrow/sparrow.h"

using namespace sparrow;
using transport::MsgKey;
using transport::Payload;

namespace {

constexpr const char* kProg = "sparrow-transfer-bench";

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Runs rank `rank` of the 2-rank benchmark; rank 0 returns the Gbit/s of each repetition.
std::vector<double> run_rank(int rank, const sparrowUniqueId& id, size_t bytes, int reps) {
  sparrowComm_t comm = nullptr;
  if (sparrowCommInitRank(&comm, 2, id, rank) != sparrowSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, sparrowGetLastError(nullptr));
    exit(1);
  }
  Comm* c = comm_impl(comm);
  auto& net = c->net();
  std::vector<uint8_t> buf(bytes);
  for (size_t i = 0; i < bytes; i += 4096) buf[i] = uint8_t(i >> 12);  // touch every page
  std::vector<double> out;
  uint8_t token = 1;
  for (int r = 0; r < reps; ++r) {
    const uint64_t seq = c->next_seq();
    auto d = c->deadline();
    if (rank == 1) {
      auto rq = net.send(0, MsgKey{c->comm_id(), seq, 0}, Payload{&token, 1, nullptr}, d);  // ready
      Status s = net.recv_into(0, MsgKey{c->comm_id(), seq, 1}, buf.data(), bytes, d);
      if (!s.ok()) {
        fprintf(stderr, "rank 1: %s\n", s.to_string().c_str());
        exit(1);
      }
      auto dq = net.send(0, MsgKey{c->comm_id(), seq, 2}, Payload{&token, 1, nullptr}, d);  // done
      if (!rq.ok() || !dq.ok() || !dq.value()->wait(d).ok()) exit(1);
    } else {
      if (!net.recv(1, MsgKey{c->comm_id(), seq, 0}, d).ok()) exit(1);
      double t0 = now_s();
      auto rq = net.send(1, MsgKey{c->comm_id(), seq, 1}, Payload{buf.data(), bytes, nullptr}, d);
      auto done = net.recv(1, MsgKey{c->comm_id(), seq, 2}, d);
      double t1 = now_s();
      if (!rq.ok() || !done.ok() || !rq.value()->wait(d).ok()) {
        fprintf(stderr, "rank 0: transfer failed\n");
        exit(1);
      }
      out.push_back(8.0 * double(bytes) / (t1 - t0) / 1e9);
    }
  }
  sparrowCommDestroy(comm);
  return out;
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t l = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l);
  close(fd);
  return ntohs(a.sin_port);
}

// iperf3 client->server over loopback with `streams` parallel streams; Gbit/s received, or -1.
double iperf3(int streams, int seconds) {
  int port = free_port();
  pid_t srv = fork();
  if (srv == 0) {
    int null = open("/dev/null", 1);
    dup2(null, 1);
    dup2(null, 2);
    std::string p = std::to_string(port);
    execlp("iperf3", "iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", p.c_str(), (char*)nullptr);
    _exit(127);
  }
  usleep(300000);  // let the server bind (a benchmark, not a test)
  std::string cmd = "iperf3 -c 127.0.0.1 -p " + std::to_string(port) + " -P " + std::to_string(streams) + " -t " +
                    std::to_string(seconds) + " -J 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  char b[4096];
  while (f && fgets(b, sizeof b, f)) out += b;
  if (f) pclose(f);
  kill(srv, SIGTERM);
  waitpid(srv, nullptr, 0);
  size_t at = out.find("\"sum_received\"");
  if (at == std::string::npos) return -1;
  at = out.find("\"bits_per_second\"", at);
  if (at == std::string::npos) return -1;
  return strtod(out.c_str() + out.find(':', at) + 1, nullptr) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  sparrow::args::exit_on_out_of_memory(argv[0]);
  size_t bytes = size_t(1) << 30;
  int reps = 3, streams = 0;
  bool json = false, with_iperf = true;
  std::string transport;
  static option longopts[] = {{"bytes", 1, 0, 'b'}, {"transport", 1, 0, 't'}, {"streams", 1, 0, 's'},
                              {"reps", 1, 0, 'r'},  {"no-iperf3", 0, 0, 'n'},  {"json", 0, 0, 'j'},
                              {"help", 0, 0, 'h'},  {0, 0, 0, 0}};
  opterr = 0;  // our own one-line messages
  for (int c; (c = getopt_long(argc, argv, "h", longopts, nullptr)) != -1;) {
    switch (c) {
      case 'b': bytes = size_t(args::size(kProg, "--bytes", optarg, 1, uint64_t(1) << 36)); break;
      case 't': transport = args::choice(kProg, "--transport", optarg, {"tcp", "ucx", "loopback"}); break;
      case 's': streams = int(args::integer(kProg, "--streams", optarg, 1, 64)); break;
      case 'r': reps = int(args::integer(kProg, "--reps", optarg, 1, 1000)); break;
      case 'n': with_iperf = false; break;
      case 'j': json = true; break;
      case 'h':
        printf("usage: sparrow-transfer-bench [--bytes 1G] [--transport tcp|ucx] [--streams N] [--reps 3] [--no-iperf3] [--json]\n"
               "Sends --bytes from rank 0 to rank 1 (two processes on this host, loopback unless\n"
               "SPARROW_SOCKET_IFNAME says otherwise) and compares with iperf3 in the same run.\n"
               "  --bytes SIZE       bytes per transfer, 1..64G, suffixes K M G (default 1G)\n"
               "  --transport NAME   tcp, ucx or loopback (default: SPARROW_TRANSPORT, else tcp)\n"
               "  --streams N        parallel streams, 1..64 (default: SPARROW_NSTREAMS, 4)\n"
               "  --reps N           repetitions, 1..1000 (default 3)\n"
               "  --no-iperf3        skip the iperf3 comparison\n"
               "  --json             one JSON object\n");
        return 0;
      default: args::unknown(kProg, argv[optind - 1]);
    }
  }
  setenv("SPARROW_SOCKET_IFNAME", getenv("SPARROW_SOCKET_IFNAME") ? getenv("SPARROW_SOCKET_IFNAME") : "lo", 1);
  setenv("SPARROW_PROBE_MS", "0", 0);
  if (!transport.empty()) setenv("SPARROW_TRANSPORT", transport.c_str(), 1);
  if (streams > 0) setenv("SPARROW_NSTREAMS", std::to_string(streams).c_str(), 1);
  int pfd[2];
  if (pipe(pfd) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    sparrowUniqueId id;
    if (read(pfd[0], &id, sizeof id) != sizeof id) _exit(1);
    run_rank(1, id, bytes, reps);
    _exit(0);
  }
  sparrowUniqueId id;
  if (sparrowGetUniqueId(&id) != sparrowSuccess) return 1;
  if (write(pfd[1], &id, sizeof id) != sizeof id) return 1;
  auto gbps = run_rank(0, id, bytes, reps);
  int st = 0;
  waitpid(child, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "sparrow-transfer-bench: rank 1 failed\n");
    return 1;
  }
  std::sort(gbps.begin(), gbps.end());
  double best = gbps.back(), median = gbps[gbps.size() / 2];
  int ns = streams > 0 ? streams : int(transport::default_streams());
  std::string tname = getenv("SPARROW_TRANSPORT") ? getenv("SPARROW_TRANSPORT") : "auto";
  double ip1 = -1, ipn = -1;
  if (with_iperf) {
    ip1 = iperf3(1, 5);
    ipn = ns > 1 ? iperf3(ns, 5) : ip1;
  }
  double ref = std::max(ip1, ipn);
  if (json) {
    printf("{\"bytes\": %zu, \"transport\": \"%s\", \"streams\": %d, \"reps\": %d, \"gbps_median\": %.3f, "
           "\"gbps_best\": %.3f, \"iperf3_1stream_gbps\": %.3f, \"iperf3_nstream_gbps\": %.3f, \"ratio_vs_iperf3\": %.3f}\n",
           bytes, tname.c_str(), ns, reps, median, best, ip1, ipn, ref > 0 ? median / ref : -1.0);
  } else {
    printf("sparrow %s, %d stream(s): %.2f GiB rank 0 -> rank 1: median %.2f Gbit/s, best %.2f Gbit/s over %d runs\n",
           tname.c_str(), ns, bytes / 1073741824.0, median, best, reps);
    if (with_iperf)
      printf("iperf3 on loopback, same run: %.2f Gbit/s (1 stream), %.2f Gbit/s (%d streams); sparrow median / best iperf3 = %.2f\n",
             ip1, ipn, ns, ref > 0 ? median / ref : -1.0);
  }
  return 0;
}
