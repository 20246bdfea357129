// Catch-up of records interleaved with headers: checked and copied into an answer, against
// checked in place and sent record by record with sendfile.
//
// A 256 MiB file on the data disk holds records as an acid segment does for 4 KiB appends:
// a 64-byte header, then 4,096 bytes of payload, so payloads are neither contiguous nor
// page-aligned. Sixteen loopback connections each take answers of 1,024 records (4 MiB of
// payload), one after another through their sixteenth of the file (page cache warm). The
// sender (pinned to CPU 0, non-blocking sockets, epoll) makes each answer as a read does:
// `copy` reads every payload once (the check: a vectorised pass over the bytes stands in for
// the crc32, which runs at memory speed) and copies it into the answer's buffer, then writes
// the buffer as the socket drains; `sendfile` makes the same pass over the mapped payloads,
// then sends each payload straight from the file with one `sendfile` per record (no copy on
// the sender's side; the receiver copies out of the page cache); `sendfile-nocheck` skips
// the pass; `run` makes the pass, then sends the whole answer with one `sendfile`, as if the
// payloads lay contiguous (the log rewritten into runs: a change of format). A receiver on
// CPU 1 recv()s everything. Prints MB/s of payload and the sender's CPU seconds per GB. The
// questions: would serving catch-up with sendfile beat the copy without a change of format,
// and how much would the change of format win?
// Measured 2026-11-28 (alternating, three rounds of each): copy 2,205-3,591 MB/s at
// 0.27-0.49 CPU s/GB; sendfile record by record 704-1,036 MB/s at 0.95-1.39 (each call
// costs more than the copy of its 4 KiB; without the pass 907-1,112); run 2,436-3,839 MB/s
// at 0.23-0.35, the sender 74-88% busy: the receiving core is then the bound, and a round
// measured 0.80x-1.25x of copy beside it. So per-record sendfile is out, and runs would cut
// the sender's core per GB by a tenth to a fifth, not raise what one loopback receiver takes.
//
//   gcc -O3 -march=native -pthread bench/probes/sendfile_catchup.c -o /tmp/sendfile_catchup
//   /tmp/sendfile_catchup copy 4721 8 /tmp; /tmp/sendfile_catchup run 4722 8 /tmp
//   (mode: copy, sendfile, sendfile-nocheck or run; port; seconds; directory for the file)
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>

#include "loopback.h"

#define HEADER 64L
#define PAYLOAD 4096L
#define STRIDE (HEADER + PAYLOAD)
#define RECORDS_PER_ANSWER 1024L
#define RECORDS_PER_CONN 4096L  // 16 MiB of payload per connection
#define FILE_BYTES (STRIDE * RECORDS_PER_CONN * CONNS)

enum mode { COPY, SENDFILE, SENDFILE_NOCHECK, RUN };
static long stride = STRIDE, header = HEADER;
// The stand-in for the crc: one read of every byte, at memory speed.
static uint64_t check(const char *p, long len) {
  const uint64_t *w = (const uint64_t *)p; uint64_t a = 0, b = 0, c = 0, d = 0;
  for (long i = 0; i + 4 <= len / 8; i += 4) { a ^= w[i]; b ^= w[i + 1]; c ^= w[i + 2]; d ^= w[i + 3]; }
  return a ^ b ^ c ^ d;
}

struct conn {
  int fd; long next_record;      // the connection's next record (index into its sixteenth)
  long answer_first, sent_records; long within;  // sendfile: the answer's first record, progress
  char *buf; long buf_len, buf_sent;              // copy: the answer
};

static volatile uint64_t sink;  // volatile: the check is made, never optimised away
static long record_at(int i, long n) { return ((long)i * RECORDS_PER_CONN + n % RECORDS_PER_CONN) * stride + header; }

// Makes connection i's next answer (check, and for copy, the copy).
static void make_answer(struct conn *x, int i, const char *map, enum mode m) {
  x->answer_first = x->next_record; x->sent_records = 0; x->within = 0;
  for (long r = 0; r < RECORDS_PER_ANSWER; r++) {
    const char *p = map + record_at(i, x->answer_first + r);
    if (m != SENDFILE_NOCHECK) sink ^= check(p, PAYLOAD);
    if (m == COPY) memcpy(x->buf + r * PAYLOAD, p, PAYLOAD);
  }
  x->next_record += RECORDS_PER_ANSWER; x->buf_len = RECORDS_PER_ANSWER * PAYLOAD; x->buf_sent = 0;
}

// Sends what the socket takes; returns the bytes sent, 0 when it would block.
static long send_some(struct conn *x, int i, int file, enum mode m) {
  if (m == COPY) {
    long w = write(x->fd, x->buf + x->buf_sent, x->buf_len - x->buf_sent);
    if (w > 0) x->buf_sent += w;
    return w > 0 ? w : 0;
  }
  if (m == RUN) {  // the answer's payloads are one contiguous run: one call sends it
    off_t off = record_at(i, x->answer_first) + x->buf_sent;
    long w = sendfile(x->fd, file, &off, x->buf_len - x->buf_sent);
    if (w > 0) x->buf_sent += w;
    return w > 0 ? w : 0;
  }
  off_t off = record_at(i, x->answer_first + x->sent_records) + x->within;
  long w = sendfile(x->fd, file, &off, PAYLOAD - x->within);
  if (w <= 0) return 0;
  x->within += w;
  if (x->within == PAYLOAD) { x->within = 0; x->sent_records++; }
  x->buf_sent = x->sent_records * PAYLOAD + x->within;
  return w;
}

static struct conn c[CONNS];
static char *map;
static enum mode m;
static int file;

// Connection i's turn: make the next answer whenever the last is sent, send until the socket
// would block; the bytes sent.
static long drain(int i) {
  struct conn *x = &c[i]; long sent = 0;
  for (;;) {
    if (x->buf_sent == x->buf_len) make_answer(x, i, map, m);
    long w = send_some(x, i, file, m);
    if (w == 0) return sent;
    sent += w;
  }
}

int main(int argc, char **argv) {
  m = argc > 1 && !strcmp(argv[1], "sendfile") ? SENDFILE
    : argc > 1 && !strcmp(argv[1], "sendfile-nocheck") ? SENDFILE_NOCHECK
    : argc > 1 && !strcmp(argv[1], "run") ? RUN : COPY;
  if (m == RUN) { stride = PAYLOAD; header = 0; }
  int port = argc > 2 ? atoi(argv[2]) : 4721; double seconds = argc > 3 ? atof(argv[3]) : 8;
  char path[256]; snprintf(path, sizeof path, "%s/sendfile_catchup.%d", argc > 4 ? argv[4] : "/tmp", getpid());
  pin(0);
  file = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (file < 0 || ftruncate(file, FILE_BYTES)) { perror("file"); return 1; }
  unlink(path);
  map = mmap(0, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
  memset(map, 'x', FILE_BYTES);  // every page in the page cache, as a warm log
  int sending[CONNS], ep = epoll_create1(0);
  if (connect_pairs(port, sending, ep)) return 1;
  for (int i = 0; i < CONNS; i++) {
    c[i].fd = sending[i];
    c[i].next_record = 0; c[i].buf = m == COPY ? malloc(RECORDS_PER_ANSWER * PAYLOAD) : 0;
    if (c[i].buf) memset(c[i].buf, 0, RECORDS_PER_ANSWER * PAYLOAD);
    c[i].buf_len = c[i].buf_sent = 0;
  }
  send_for(ep, seconds, drain, argv[1] ? argv[1] : "copy");
  return 0;
}
