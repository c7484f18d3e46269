/* hakmem run and hakmem options: finding the library, reading its options
 * table, starting a program with it preloaded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool.h"

static const char library_name[] = "libhakmem.so";

static char *concat(const char *a, const char *b, const char *c) {
  size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
  char *s = malloc(la + lb + lc + 1);
  if (s == NULL) tool_fail(1, "out of memory");
  memcpy(s, a, la);
  memcpy(s + la, b, lb);
  memcpy(s + la + lb, c, lc + 1);
  return s;
}

/* A path that stays the same when the program changes directory (a copy). */
static char *absolute(const char *path) {
  char *cwd = path[0] == '/' ? NULL : getcwd(NULL, 0);
  char *abs = cwd == NULL ? concat(path, "", "") : concat(cwd, "/", path);
  free(cwd);
  return abs;
}

/* This program's path, symbolic links resolved; NULL when neither /proc
 * nor argv[0] tells. */
static char *self_path(void) {
  char *self = realpath("/proc/self/exe", NULL);
  if (self == NULL) {
    char *found = tool_which(tool_argv0);
    if (found != NULL) self = realpath(found, NULL);
    free(found);
  }
  return self;
}

/* The directory this program lies in; NULL as self_path. */
static char *self_dir(void) {
  char *self = self_path();
  if (self == NULL) return NULL;
  char *slash = strrchr(self, '/');
  slash[slash == self] = 0;
  return self;
}

/* The library in dir/rel (rel may be absolute), under its development name
 * or its soname; NULL when neither is there. */
static char *library_in(const char *dir, const char *rel) {
  char *joined = rel[0] == '/' ? absolute(rel) : concat(dir, "/", rel);
  char *real = realpath(joined, NULL);
  free(joined);
  if (real == NULL) return NULL;
  const char *names[] = {library_name, HAKMEM_TOOL_SONAME};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char *path = concat(real, "/", names[i]);
    if (access(path, R_OK) == 0) {
      free(real);
      return path;
    }
    free(path);
  }
  free(real);
  return NULL;
}

/* The library to preload, as an absolute path (or a bare file name from
 * HAKMEM_LIBRARY, which the dynamic linker looks up itself). */
static char *library_path(void) {
  const char *env = getenv("HAKMEM_LIBRARY");
  if (env != NULL && env[0] != 0) {
    if (strchr(env, '/') != NULL && access(env, R_OK) != 0) tool_fail(1, "HAKMEM_LIBRARY=%s: %s", env, strerror(errno));
    return strchr(env, '/') == NULL ? concat(env, "", "") : absolute(env);
  }
  char *dir = self_dir();
  if (dir == NULL) tool_fail(1, "cannot tell where this program lies to find %s; set HAKMEM_LIBRARY", library_name);
  char *lib = library_in(dir, HAKMEM_TOOL_LIBDIR);
  if (lib == NULL) lib = library_in(dir, HAKMEM_TOOL_BUILD_LIBDIR);
  if (lib == NULL)
    tool_fail(1, "%s not found in %s%s%s nor in the build tree; set HAKMEM_LIBRARY", library_name,
              HAKMEM_TOOL_LIBDIR[0] == '/' ? "" : dir, HAKMEM_TOOL_LIBDIR[0] == '/' ? "" : "/", HAKMEM_TOOL_LIBDIR);
  free(dir);
  return lib;
}

/* libhakmem-profile.so beside lib, when installed: its malloc counts toward
 * the profiler's samples itself, at a lower price than the default
 * library's way (docs/tools.md). */
static char *profiling_variant(char *lib) {
  char *slash = strrchr(lib, '/');
  if (slash == NULL) return lib;
  char *dir = strndup(lib, (size_t)(slash - lib) + 1);
  if (dir == NULL) tool_fail(1, "out of memory");
  char *path = concat(dir, "", "libhakmem-profile.so");
  free(dir);
  if (access(path, R_OK) == 0) return path;
  free(path);
  return lib;
}

/* Writes the library's options table to fd. The library is not dlopen'ed
 * here: its malloc view lives in initial-exec TLS, more than the dynamic
 * linker keeps spare for a library loaded after start-up. A child of this
 * command, run again with the library preloaded, prints it instead. */
static void library_options_print(const char *lib, int fd) {
  char *self = self_path();
  if (self == NULL) tool_fail(1, "cannot tell where this program lies to read the options table");
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) tool_fail(1, "cannot read the options table: %s", strerror(errno));
  if (pid == 0) {
    char fdarg[16];
    snprintf(fdarg, sizeof fdarg, "%d", fd);
    fcntl(fd, F_SETFD, 0);
    setenv("LD_PRELOAD", lib, 1);
    execl(self, tool_argv0, TOOL_OPTIONS_CHILD, fdarg, lib, (char *)NULL);
    _exit(1);
  }
  free(self);
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) exit(1); /* the child said why */
}

int cmd_options_child(int argc, char **argv) {
  void (*print)(int);
  *(void **)&print = dlsym(RTLD_DEFAULT, "hak_options_print");
  if (argc != 3 || print == NULL) tool_fail(1, "%s is not hakmem's library (no hak_options_print)", argc == 3 ? argv[2] : "?");
  print(atoi(argv[1]));
  return 0;
}

/* The library's options table, as hak_options_print writes it: one option a
 * line, "HAKMEM_NAME=value (default D): meaning". */
static char *options_table(const char *lib) {
  int fd = memfd_create("hakmem-options", MFD_CLOEXEC);
  FILE *f = fd >= 0 ? fdopen(fd, "w+") : tmpfile();
  if (f == NULL) tool_fail(1, "cannot read the options table: %s", strerror(errno));
  library_options_print(lib, fileno(f));
  long len = lseek(fileno(f), 0, SEEK_END);
  char *table = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (table == NULL || pread(fileno(f), table, (size_t)len, 0) != len)
    tool_fail(1, "cannot read the options table: %s", strerror(errno));
  table[len] = 0;
  fclose(f);
  return table;
}

/* Whether the table lists HAKMEM_<name> (name is len bytes long). */
static bool option_known(const char *table, const char *name, size_t len) {
  for (const char *line = table; *line;) {
    if (strncmp(line, "HAKMEM_", 7) == 0 && strncmp(line + 7, name, len) == 0 && line[7 + len] == '=') return true;
    const char *end = strchrnul(line, '\n');
    line = *end ? end + 1 : end;
  }
  return false;
}

int cmd_options(int argc, char **argv) {
  if (argc > 1) tool_fail(EXIT_USAGE, "options takes no arguments, not %s (see hakmem --help)", argv[1]);
  fflush(stdout);
  library_options_print(library_path(), 1);
  return 0;
}

/* A setting for the program's environment: HAKMEM_<name>=value. */
typedef struct {
  const char *name;
  size_t name_len;
  const char *value;
  bool from_set; /* --set: the name is checked against the library's table */
} setting_t;

/* The value of option opt at argv[*i], given as "opt VALUE" or "opt=VALUE";
 * NULL when argv[*i] is another option. */
static const char *option_value(const char *opt, int argc, char **argv, int *i) {
  size_t len = strlen(opt);
  const char *arg = argv[*i];
  if (strncmp(arg, opt, len) != 0) return NULL;
  if (arg[len] == '=') return arg + len + 1;
  if (arg[len] != 0) return NULL;
  if (*i + 1 >= argc) tool_fail(EXIT_USAGE, "run: %s needs a value (see hakmem --help)", opt);
  return argv[++*i];
}

int cmd_run(int argc, char **argv) {
  setting_t *settings = calloc((size_t)argc, sizeof *settings);
  if (settings == NULL) tool_fail(1, "out of memory");
  int n = 0, i = 1;
  bool check = false;
  for (; i < argc; i++) {
    const char *arg = argv[i], *value;
    setting_t *s = &settings[n];
    if (strcmp(arg, "--") == 0) {
      i++;
      break;
    }
    if (arg[0] != '-') break;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      tool_usage();
      return 0;
    }
    if (strcmp(arg, "--stats") == 0) {
      *s = (setting_t){"STATS", 5, "1", false};
    } else if (strncmp(arg, "--stats=", 8) == 0) {
      if (strcmp(arg + 8, "json") != 0) tool_fail(EXIT_USAGE, "run: --stats takes =json or nothing, not %s", arg);
      *s = (setting_t){"STATS", 5, "json", false};
    } else if ((value = option_value("--profile", argc, argv, &i)) != NULL) {
      if (value[0] == 0) tool_fail(EXIT_USAGE, "run: --profile needs a path");
      *s = (setting_t){"PROFILE", 7, absolute(value), false};
    } else if ((value = option_value("--set", argc, argv, &i)) != NULL) {
      const char *eq = strchr(value, '=');
      if (eq == NULL || eq == value) tool_fail(EXIT_USAGE, "run: --set needs NAME=VALUE, not %s", value);
      *s = (setting_t){value, (size_t)(eq - value), eq + 1, true};
      check = true;
    } else {
      tool_fail(EXIT_USAGE, "run: unknown option %s (see hakmem --help)", arg);
    }
    n++;
  }
  if (i >= argc) tool_fail(EXIT_USAGE, "run: no program given (see hakmem --help)");

  char *lib = library_path();
  bool profiling = false;
  for (int k = 0; k < n; k++) profiling |= settings[k].name_len == 7 && strncmp(settings[k].name, "PROFILE", 7) == 0;
  if (profiling && getenv("HAKMEM_LIBRARY") == NULL) lib = profiling_variant(lib);
  if (strpbrk(lib, " :") != NULL) tool_fail(1, "%s: LD_PRELOAD cannot hold a path with a space or a colon", lib);
  char *table = check ? options_table(lib) : NULL;
  for (int k = 0; check && k < n; k++) {
    setting_t *s = &settings[k];
    if (s->from_set && !option_known(table, s->name, s->name_len))
      tool_fail(EXIT_USAGE, "run: --set %.*s: no such option (see hakmem options)", (int)s->name_len, s->name);
  }
  for (int k = 0; k < n; k++) {
    setting_t *s = &settings[k];
    char var[256];
    if (s->name_len > sizeof var - 8) tool_fail(EXIT_USAGE, "run: option name too long");
    snprintf(var, sizeof var, "HAKMEM_%.*s", (int)s->name_len, s->name);
    if (setenv(var, s->value, 1) != 0) tool_fail(1, "cannot set %s: %s", var, strerror(errno));
  }
  /* Ahead of any library already preloaded, so that its malloc is the one
   * the program gets (once: a hakmem run inside another adds nothing). */
  const char *old = getenv("LD_PRELOAD");
  size_t lib_len = strlen(lib);
  bool first = old != NULL && strncmp(old, lib, lib_len) == 0 && (old[lib_len] == 0 || strchr(" :", old[lib_len]));
  char *preload = old == NULL || old[0] == 0 ? lib : first ? (char *)old : concat(lib, ":", old);
  if (setenv("LD_PRELOAD", preload, 1) != 0) tool_fail(1, "cannot set LD_PRELOAD: %s", strerror(errno));

  fflush(NULL);
  execvp(argv[i], argv + i);
  int e = errno;
  tool_fail(e == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_RUN, "cannot run %s: %s", argv[i], strerror(e));
}
