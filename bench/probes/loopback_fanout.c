// The machine's own floor for SSE fan-out, with no server in the way.
//
// One thread (pinned to core 0) writes a 100-byte frame, stamped with its send time, to each
// of N loopback TCP connections, once every 20 ms; another (core 1) reads them with epoll and
// records each delivery's latency. Prints the time the sender's loop takes per event (what N
// kernel sends cost one core) and the delivery p50/p99. A server's fan-out cannot beat this.
//
//   gcc -O2 -pthread bench/probes/loopback_fanout.c -o /tmp/loopback_fanout
//   /tmp/loopback_fanout 1000 200 4599   # connections events port
//   VEC=1 /tmp/loopback_fanout 1000 200 4598   # each frame as a three-slice writev
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FRAME_BYTES 100

static int connections, events;
static int *receiving;
static double *latencies_us;
static long latency_count;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void fail(const char *what) {
    perror(what);
    exit(1);
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set)) fail("sched_setaffinity");
}

static void *receive(void *unused) {
    (void)unused;
    pin(1);
    int poller = epoll_create1(0);
    for (int i = 0; i < connections; i++) {
        struct epoll_event interest = {.events = EPOLLIN, .data.u32 = i};
        if (epoll_ctl(poller, EPOLL_CTL_ADD, receiving[i], &interest)) fail("epoll_ctl");
    }
    static char buffer[64 * FRAME_BYTES];
    struct epoll_event ready[256];
    long expected = (long)connections * events;
    while (latency_count < expected) {
        int n = epoll_wait(poller, ready, 256, 5000);
        if (n <= 0) break;
        for (int k = 0; k < n; k++) {
            ssize_t got;
            while ((got = read(receiving[ready[k].data.u32], buffer, sizeof buffer)) > 0) {
                double at = now_us();
                for (ssize_t offset = 0; offset + FRAME_BYTES <= got; offset += FRAME_BYTES) {
                    double sent;
                    memcpy(&sent, buffer + offset, sizeof sent);
                    latencies_us[latency_count++] = at - sent;
                }
            }
        }
    }
    return NULL;
}

static int ascending(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s connections events port\n", argv[0]);
        return 2;
    }
    connections = atoi(argv[1]);
    events = atoi(argv[2]);
    if (connections < 1 || connections > 10000 || events < 1 || events > 10000) return 2;
    int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (void *)&address, sizeof address) || listen(listener, 4096)) fail("listen");
    receiving = calloc(connections, sizeof *receiving);
    int *sending = calloc(connections, sizeof *sending);
    latencies_us = calloc((size_t)connections * events, sizeof *latencies_us);
    for (int i = 0; i < connections; i++) {
        receiving[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(receiving[i], (void *)&address, sizeof address)) fail("connect");
        if ((sending[i] = accept(listener, NULL, NULL)) < 0) fail("accept");
        setsockopt(sending[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fcntl(receiving[i], F_SETFL, O_NONBLOCK);
    }
    pthread_t receiver;
    if (pthread_create(&receiver, NULL, receive, NULL)) fail("pthread_create");
    pin(0);
    int vectored = getenv("VEC") != NULL;
    char frame[FRAME_BYTES];
    memset(frame, 'x', sizeof frame);
    double loop_us = 0;
    for (int e = 0; e < events; e++) {
        double start = now_us();
        memcpy(frame, &start, sizeof start);
        for (int i = 0; i < connections; i++)
            if (vectored) {
                // The shape of a chunked HTTP body frame: size line, data, CRLF.
                struct iovec slices[3] = {{frame, 40}, {frame + 40, 58}, {frame + 98, 2}};
                if (writev(sending[i], slices, 3) != sizeof frame) fail("writev");
            } else if (write(sending[i], frame, sizeof frame) != sizeof frame) {
                fail("write");
            }
        loop_us += now_us() - start;
        usleep(20000);
    }
    pthread_join(receiver, NULL);
    qsort(latencies_us, latency_count, sizeof *latencies_us, ascending);
    printf("%d connections: send loop %.0f us per event (%.1f us per send); delivery p50 %.0f us, p99 %.0f us (%ld of %ld)\n",
           connections, loop_us / events, loop_us / events / connections, latencies_us[latency_count / 2],
           latencies_us[latency_count * 99 / 100], latency_count, (long)connections * events);
    return 0;
}
