/* libwanemu_preload.so: the client half of wanemu's unprivileged fallback (see proxy.h).
 *
 * Loaded with LD_PRELOAD into the programs `wanemu run --proxy` starts. A TCP connect() to an
 * emulated host's address (127.77.<region>.<host>) is sent to the wanemu proxy instead, with a
 * 16-byte header naming the real destination and this process's emulated host (WANEMU_ADDR); the
 * proxy connects to the destination, answers with one status byte, and from then on relays the bytes
 * through the scenario's link model. Every other connect() is untouched. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*connect_fn)(int, const struct sockaddr*, socklen_t);

static int io_all(int fd, void* buf, size_t n, int wr) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = wr ? send(fd, (char*)buf + done, n - done, MSG_NOSIGNAL) : recv(fd, (char*)buf + done, n - done, 0);
    if (r > 0) {
      done += (size_t)r;
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      return -1;
    }
  }
  return 0;
}

__attribute__((visibility("default"))) int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  static connect_fn real = 0;
  if (!real) real = (connect_fn)dlsym(RTLD_NEXT, "connect");
  const char* proxy = getenv("WANEMU_PROXY_PORT");
  const char* me = getenv("WANEMU_ADDR");
  if (!proxy || !me || !addr || addr->sa_family != AF_INET || len < (socklen_t)sizeof(struct sockaddr_in))
    return real(fd, addr, len);
  const struct sockaddr_in* dst = (const struct sockaddr_in*)addr;
  uint32_t d = ntohl(dst->sin_addr.s_addr);
  if ((d >> 16) != ((127u << 8) | 77u)) return real(fd, addr, len);
  struct in_addr src;
  if (inet_pton(AF_INET, me, &src) != 1) return real(fd, addr, len);

  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0 && (fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  struct sockaddr_in p;
  memset(&p, 0, sizeof p);
  p.sin_family = AF_INET;
  p.sin_port = htons((uint16_t)atoi(proxy));
  p.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = real(fd, (const struct sockaddr*)&p, sizeof p);
  int err = rc == 0 ? 0 : errno;
  if (rc == 0) {
    unsigned char h[16] = {'W', 'E', 'P', '1'};
    memcpy(h + 4, &dst->sin_addr.s_addr, 4); /* network order */
    memcpy(h + 8, &dst->sin_port, 2);
    memcpy(h + 12, &src.s_addr, 4);
    unsigned char status = 0;
    if (io_all(fd, h, sizeof h, 1) != 0 || io_all(fd, &status, 1, 0) != 0) {
      err = ECONNRESET;
    } else if (status != 0) {
      err = status; /* the destination's connect errno (ECONNREFUSED, ...) */
    }
  }
  if (fl >= 0 && (fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}
