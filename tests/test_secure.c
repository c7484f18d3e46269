/* test_secure.c - each detection of the secure build (libhakmem-secure.so)
 * fires. Every case runs in a child that does one bad thing; the parent
 * checks the child's one-line message on stderr and the signal that ended it
 * (SIGABRT for a detected misuse, SIGSEGV for a guard page). A last case
 * checks that fresh blocks come out in random order.
 *
 * usage: test_secure
 */
#include "testutil.h"

#include <signal.h>
#include <sys/wait.h>

static void double_free_small(void)
{
  char *p = tu_launder(malloc(100));
  free(p);
  free(p);
}

static void double_free_large(void)
{
  char *p = tu_launder(malloc(200000));
  free(p);
  free(p);
}

static void double_free_huge(void)
{
  char *p = tu_launder(malloc(8 << 20));
  free(p);
  free(p);
}

static void interior_free(void)
{
  char *p = tu_launder(malloc(100));
  free(p + 16);
}

static void foreign_free(void)
{
  char buf[64];
  free(tu_launder(buf + 8));
}

/* A use-after-free write over a free block's list pointer: malloc must
 * notice when the list reaches it, not return the attacker's address. */
static void overwritten_list(void)
{
  char *p = tu_launder(malloc(100));
  free(p);
  memset(p, 0x41, 8);
  for (int i = 0; i < 100000; i++) tu_launder(malloc(100));
}

/* The page below each region's header is a guard. */
static void guard_page(void)
{
  char *p = tu_launder(malloc(100));
  volatile char *region = (char *)((uintptr_t)p & ~(((uintptr_t)4 << 20) - 1));
  region[8] = 1;
}

typedef struct {
  const char *name;
  void (*bad)(void);
  int signal;
  const char *message;
} bad_case_t;

static void expect(const bad_case_t *c)
{
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    alarm(20);
    c->bad();
    _exit(0);
  }
  close(fds[1]);
  char out[4096];
  size_t n = 0;
  ssize_t r;
  while (n < sizeof out - 1 && (r = read(fds[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)r;
  out[n] = 0;
  close(fds[0]);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == c->signal, "%s: child ended with status 0x%x, want signal %d", c->name,
         st, c->signal);
  if (c->message) {
    CHECKF(strstr(out, c->message) != NULL && strstr(out, "hakmem") != NULL, "%s: stderr was \"%s\"", c->name, out);
    CHECKF(strchr(out, '\n') == out + strlen(out) - 1, "%s: want one line, got \"%s\"", c->name, out);
  }
  printf("test_secure: %-18s -> signal %d%s%s\n", c->name, c->signal, c->message ? ", " : "",
         c->message ? c->message : "");
}

int main(void)
{
  static const bad_case_t cases[] = {
    {"double free", double_free_small, SIGABRT, "double free"},
    {"large double free", double_free_large, SIGABRT, "not a live block"},
    {"huge double free", double_free_huge, SIGABRT, "not a live block"},
    {"interior pointer", interior_free, SIGABRT, "inside a block"},
    {"foreign pointer", foreign_free, SIGABRT, "not a live block"},
    {"overwritten list", overwritten_list, SIGABRT, "free list corrupted"},
    {"guard page", guard_page, SIGSEGV, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) expect(&cases[i]);

  /* Fresh blocks in random order: 64 blocks of a class nothing else uses
   * must not come out in address order. */
  char *b[64];
  int ascending = 1;
  for (int i = 0; i < 64; i++) b[i] = tu_launder(malloc(720));
  for (int i = 1; i < 64; i++) ascending &= b[i] > b[i - 1];
  CHECKF(!ascending, "fresh blocks came out in address order");
  for (int i = 0; i < 64; i++) free(b[i]);
  printf("test_secure: fresh blocks in random order: OK\n");
  return 0;
}
