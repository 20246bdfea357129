// What the loopback catch-up probes share (`lazy_catchup.c`, `sendfile_catchup.c`): the
// clock, pinning to a CPU, CONNS loopback connections whose sending ends the probe writes
// (TCP_NODELAY, non-blocking) and whose receiving ends a thread pinned to CPU 1 drains, and
// the calling thread's CPU seconds. Header-only: each probe is still one `gcc` command.
#ifndef DS_PROBES_LOOPBACK_H
#define DS_PROBES_LOOPBACK_H
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONNS 16

static int receiving[CONNS];
static volatile int stop;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); sched_setaffinity(0, sizeof s, &s); }

// The receiver: recv()s everything from every connection until `stop`.
static void *rx(void *unused) {
  (void)unused; pin(1);
  int ep = epoll_create1(0); char *b = malloc(1 << 18);
  for (int i = 0; i < CONNS; i++) {
    struct epoll_event e = { .events = EPOLLIN, .data.fd = receiving[i] };
    epoll_ctl(ep, EPOLL_CTL_ADD, receiving[i], &e);
  }
  struct epoll_event ev[CONNS];
  while (!stop) {
    int n = epoll_wait(ep, ev, CONNS, 100);
    for (int i = 0; i < n; i++) while (recv(ev[i].data.fd, b, 1 << 18, MSG_DONTWAIT) > 0) {}
  }
  return 0;
}

// Opens the CONNS connections on `port`: their sending ends into `sending`, registered with
// `ep` for EPOLLOUT (edge-triggered) with their index as data. 0, or -1 when it cannot listen.
static int connect_pairs(int port, int *sending, int ep) {
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001) };
  if (bind(l, (void *)&a, sizeof a) || listen(l, CONNS)) { perror("listen"); return -1; }
  for (int i = 0; i < CONNS; i++) {
    receiving[i] = socket(AF_INET, SOCK_STREAM, 0);
    connect(receiving[i], (void *)&a, sizeof a);
    sending[i] = accept(l, 0, 0);
    setsockopt(sending[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(sending[i], F_SETFL, O_NONBLOCK);
    struct epoll_event e = { .events = EPOLLOUT | EPOLLET, .data.u32 = i };
    epoll_ctl(ep, EPOLL_CTL_ADD, sending[i], &e);
  }
  return 0;
}

// The calling thread's CPU seconds (user and system) so far.
static double thread_cpu_seconds(void) {
  struct rusage r; getrusage(RUSAGE_THREAD, &r);
  return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}

// Sends for `seconds` while `rx` receives on CPU 1: whenever connection i (its index is the
// epoll data, as `connect_pairs` registers it) can take more, `drain(i)` sends until the
// socket would block and returns the bytes it sent. Prints `label`, MB/s, the sender's CPU
// seconds per GB and how busy it was.
static void send_for(int ep, double seconds, long (*drain)(int conn), const char *label) {
  pthread_t t; pthread_create(&t, 0, rx, 0);
  double cpu_at_start = thread_cpu_seconds(), start = now(); long sent = 0;
  struct epoll_event ev[CONNS];
  while (now() - start < seconds) {
    int n = epoll_wait(ep, ev, CONNS, 100);
    for (int k = 0; k < n; k++) sent += drain(ev[k].data.u32);
  }
  double took = now() - start, cpu = thread_cpu_seconds() - cpu_at_start;
  stop = 1; pthread_join(t, 0);
  printf("%s: %.0f MB/s, sender %.3f CPU s per GB (%.0f%% busy)\n", label, sent / took / 1e6,
         cpu / (sent / 1e9), 100 * cpu / took);
}
#endif
