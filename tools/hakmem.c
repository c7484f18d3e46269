/* The hakmem command: dispatch to the subcommands (run.c, report.c), help,
 * version, and the helpers they share. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tool.h"

const char *tool_argv0 = "hakmem";

static const char usage[] =
  "usage: hakmem COMMAND [ARGS]\n"
  "\n"
  "  hakmem run [--stats[=json]] [--profile PATH] [--set NAME=VALUE]... [--] PROGRAM [ARGS...]\n"
  "      Run PROGRAM with libhakmem.so preloaded (before any LD_PRELOAD already\n"
  "      set) and the options given set in its environment:\n"
  "        --stats           HAKMEM_STATS=1: statistics on stderr at exit\n"
  "        --stats=json      HAKMEM_STATS=json\n"
  "        --profile PATH    HAKMEM_PROFILE=PATH: heap profile written to PATH\n"
  "        --set NAME=VALUE  HAKMEM_NAME=VALUE, NAME as `hakmem options` lists it\n"
  "      hakmem's exit status is PROGRAM's.\n"
  "  hakmem options\n"
  "      List every option: its value in effect, its default, its meaning.\n"
  "  hakmem report PATH\n"
  "      The top allocation sites of the heap profile PATH: through\n"
  "      google-pprof --text when it is installed, else a summary of its own.\n"
  "  hakmem --help | --version\n"
  "\n"
  "The library is the libhakmem.so installed beside this program (or built\n"
  "beside it); HAKMEM_LIBRARY=PATH names another.\n";

void tool_usage(void) { fputs(usage, stdout); }

noreturn void tool_fail(int status, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One line, whatever the message quotes. */
  for (char *c = line; *c; c++)
    if (*c == '\n') *c = ' ';
  fflush(stdout);
  fprintf(stderr, "hakmem: %s\n", line);
  exit(status);
}

char *tool_which(const char *name) {
  if (strchr(name, '/')) return access(name, X_OK) == 0 ? strdup(name) : NULL;
  const char *path = getenv("PATH");
  if (path == NULL) path = "/usr/local/bin:/usr/bin:/bin";
  size_t name_len = strlen(name);
  for (const char *dir = path;; dir++) {
    const char *end = strchrnul(dir, ':');
    size_t dir_len = (size_t)(end - dir);
    char *candidate = malloc(dir_len + name_len + 3);
    if (candidate == NULL) tool_fail(1, "out of memory");
    /* An empty entry is the current directory, as execvp() takes it. */
    sprintf(candidate, "%.*s/%s", (int)(dir_len ? dir_len : 1), dir_len ? dir : ".", name);
    if (access(candidate, X_OK) == 0) return candidate;
    free(candidate);
    if (*end == 0) return NULL;
    dir = end;
  }
}

int main(int argc, char **argv) {
  if (argc > 0) tool_argv0 = argv[0];
  if (argc < 2) tool_fail(EXIT_USAGE, "no command given (see hakmem --help)");
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    tool_usage();
    return 0;
  }
  if (strcmp(cmd, "--version") == 0) {
    puts("hakmem " HAKMEM_TOOL_VERSION);
    return 0;
  }
  if (strcmp(cmd, "run") == 0) return cmd_run(argc - 1, argv + 1);
  if (strcmp(cmd, "options") == 0) return cmd_options(argc - 1, argv + 1);
  if (strcmp(cmd, "report") == 0) return cmd_report(argc - 1, argv + 1);
  if (strcmp(cmd, TOOL_OPTIONS_CHILD) == 0) return cmd_options_child(argc - 1, argv + 1);
  if (cmd[0] == '-') tool_fail(EXIT_USAGE, "unknown option %s (see hakmem --help)", cmd);
  tool_fail(EXIT_USAGE, "unknown command %s (see hakmem --help)", cmd);
}
