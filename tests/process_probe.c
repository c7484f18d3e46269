/* process_probe.c - what a program can see of its own process, run by
 * tests/process.sh with and without LD_PRELOAD=libhakmem.so (it is linked
 * with the C library only). Every mode first allocates and frees blocks of
 * 200 KB, waits, and does it again: an allocator that starts a thread of its
 * own for purging has started it by then.
 *
 *   tasks            prints "tasks N": the threads of the process
 *   setuid           drops root (setuid(65534)) and prints "uids U..." for
 *                    every thread, from /proc/self/task/T/status; "skip" when
 *                    not run as root
 *   unshare          prints "unshare R": unshare(CLONE_NEWUSER) and errno
 *   setns            prints "setns R": setns() into its own mount namespace
 *   fill LIMIT SIZE  under RLIMIT_AS of LIMIT MiB, allocates SIZE-byte blocks
 *                    until malloc fails: prints "fill MIB"
 *   vmsize           prints "vmsize KIB": the address space after one malloc
 *
 * usage: process_probe MODE [ARGS]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void churn(void)
{
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 50; i++) {
      char *p = malloc(200000);
      if (p == NULL) exit(2);
      memset(p, i, 200000);
      free(p);
    }
    usleep(200000);
  }
}

static void each_task(void (*fn)(const char *task))
{
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) exit(2);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') fn(e->d_name);
  closedir(d);
}

static int ntasks;
static void count_task(const char *task) { (void)task, ntasks++; }

static void print_uid(const char *task)
{
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%s/status", task);
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "Uid:", 4) == 0) printf(" %ld", strtol(line + 4, NULL, 10));
  fclose(f);
}

static const char *result(int r) { return r == 0 ? "0" : errno == EINVAL ? "-1 EINVAL" : errno == EPERM ? "-1 EPERM" : "-1"; }

int main(int argc, char **argv)
{
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "fill") == 0 && argc > 3) {
    size_t limit = strtoull(argv[2], NULL, 0) << 20, size = strtoull(argv[3], NULL, 0), n = 0;
    struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 2;
    for (void **last = NULL, **p; (p = malloc(size)) != NULL; last = p, n++) *p = last; /* chained: no array */
    printf("fill %zu\n", n * size >> 20);
    return 0;
  }
  if (strcmp(mode, "vmsize") == 0) {
    free(malloc(100));
    char buf[4096];
    FILE *f = fopen("/proc/self/status", "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    char *v = strstr(buf, "VmSize:");
    printf("vmsize %ld\n", v ? strtol(v + 7, NULL, 10) : -1L);
    return 0;
  }
  churn();
  if (strcmp(mode, "tasks") == 0) {
    each_task(count_task);
    printf("tasks %d\n", ntasks);
  } else if (strcmp(mode, "setuid") == 0) {
    if (getuid() != 0) {
      printf("skip\n");
      return 0;
    }
    if (setuid(65534) != 0) return 2;
    printf("uids");
    each_task(print_uid);
    printf("\n");
  } else if (strcmp(mode, "unshare") == 0) {
    printf("unshare %s\n", result(unshare(CLONE_NEWUSER)));
  } else if (strcmp(mode, "setns") == 0) {
    int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    printf("setns %s\n", fd < 0 ? "skip" : result(setns(fd, CLONE_NEWNS)));
  } else {
    fprintf(stderr, "usage: process_probe tasks|setuid|unshare|setns|fill LIMIT SIZE|vmsize\n");
    return 2;
  }
  return 0;
}
