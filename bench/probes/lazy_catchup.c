// Catch-up answers copied whole before they are sent, against copied piece by piece as the
// socket takes them.
//
// A 256 MiB region stands for the page cache of 16 streams of 16 MiB. Sixteen loopback
// connections each take answers of 4 MiB, one after another through the region. The sender
// (pinned to CPU 0, non-blocking sockets, epoll) makes each answer as a read does: `whole`
// copies all 4 MiB into the answer's own buffer first (one per connection, 64 MiB in all, so
// by the time the socket takes the last bytes they have left the cache), then writes it as
// the socket drains; `piece` copies 256 KiB at a time into the connection's own small
// buffer, just before the socket takes it, so the kernel copies out of a warm cache. A
// receiver on CPU 1 recv()s everything. Prints MB/s and the sender's CPU seconds per GB.
// (`PIECE_KIB` sets the piece; 256 by default.) The question: the server's profile of cold
// catch-up puts 41% of its core in the kernel's copy into the socket against 9% in its own
// copy of the same bytes — is the kernel's copy slow because its source has gone cold?
// Measured 2026-11-27: no. whole 2,475-3,032 MB/s at 0.32-0.39 CPU s/GB; piece (256 KiB)
// 1,895-2,329 MB/s at 0.43-0.52; pieces of 32 KiB, 1 MiB and 4 MiB 2,539-2,577 MB/s at
// 0.37-0.39, the same as whole. Answers made as the socket drains are not worth building.
//
//   gcc -O2 -pthread bench/probes/lazy_catchup.c -o /tmp/lazy_catchup
//   /tmp/lazy_catchup whole 4711 8; /tmp/lazy_catchup piece 4712 8   # mode port seconds
#define _GNU_SOURCE
#include <string.h>

#include "loopback.h"

#define REGION (256L << 20)
#define ANSWER (4L << 20)
static long PIECE = 256L << 10;

struct conn { int fd; long next; /* region offset of the next answer */ long answer_left;
  char *buf; long buf_len, buf_sent; };

static struct conn c[CONNS];
static char *region;
static int piece;

// Connection i's turn: make the next piece (or the next whole answer) whenever the last is
// sent, write until the socket would block; the bytes written.
static long drain(int i) {
  struct conn *x = &c[i]; long sent = 0;
  for (;;) {
    if (x->buf_sent == x->buf_len) {
      if (x->answer_left == 0) { x->answer_left = ANSWER; if (x->next + ANSWER > REGION) x->next = 0; }
      long len = piece ? PIECE : ANSWER;
      memcpy(x->buf, region + x->next, len);
      x->next += len; x->answer_left -= len; x->buf_len = len; x->buf_sent = 0;
    }
    long w = write(x->fd, x->buf + x->buf_sent, x->buf_len - x->buf_sent);
    if (w <= 0) return sent;
    x->buf_sent += w; sent += w;
  }
}

int main(int argc, char **argv) {
  piece = argc > 1 && !strcmp(argv[1], "piece");
  int port = argc > 2 ? atoi(argv[2]) : 4711; double seconds = argc > 3 ? atof(argv[3]) : 8;
  if (getenv("PIECE_KIB")) PIECE = atol(getenv("PIECE_KIB")) << 10;
  pin(0);
  region = malloc(REGION); memset(region, 'x', REGION);
  int sending[CONNS], ep = epoll_create1(0);
  if (connect_pairs(port, sending, ep)) return 1;
  for (int i = 0; i < CONNS; i++) {
    c[i].fd = sending[i];
    c[i].next = (long)i * (REGION / CONNS); c[i].answer_left = 0;
    c[i].buf = malloc(piece ? PIECE : ANSWER); memset(c[i].buf, 0, piece ? PIECE : ANSWER);
    c[i].buf_len = c[i].buf_sent = 0;
  }
  send_for(ep, seconds, drain, piece ? "piece" : "whole");
  return 0;
}
