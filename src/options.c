/* The options table. Each option has one entry; its environment variable is
 * HAKMEM_<NAME>, read on first use (or again at process start if the
 * environment was not set up when first asked). */
#include "options.h"

#include "out.h"

#define OPT_STR_MAX 256

typedef struct {
  const char *name; /* HAKMEM_<name> */
  long value;
  long def;
  const char *doc;
  bool given;        /* set in the environment */
  bool is_str;       /* a string (a path): its text in str */
  char str[OPT_STR_MAX];
} option_desc_t;

static option_desc_t options[OPT_COUNT] = {
  [OPT_STATS] = {"STATS", 0, 0, "1 or json: the statistics report at exit, as text or one JSON object"},
  [OPT_STATS_FILE] = {"STATS_FILE", 0, 0, "the file the report at exit goes to (default stderr; %p: pid)", .is_str = true},
  [OPT_PROFILE] = {"PROFILE", 0, 0, "sample allocations and write the live heap here at exit (pprof format; %p: pid)",
                   .is_str = true},
  [OPT_PROFILE_RATE] = {"PROFILE_RATE", 0, 512 * 1024, "mean bytes allocated between two samples of the profiler"},
  [OPT_PURGE_DELAY_MS] = {"PURGE_DELAY_MS", 0, 250,
                          "ms freed memory stays resident before it is returned (0 = at once, -1 = never)"},
  [OPT_POOL_REGIONS] = {"POOL_REGIONS", 0, 16, "empty 4 MiB regions kept mapped (purged) for reuse"},
  [OPT_BIGCACHE_MB] = {"BIGCACHE_MB", 0, 256, "MiB of freed huge blocks' pages kept resident for reuse"},
  [OPT_BIGCACHE_AGE_MS] = {"BIGCACHE_AGE_MS", 0, 500, "ms a freed huge block's pages stay resident"},
  [OPT_BACKGROUND_THREAD] = {"BACKGROUND_THREAD", 0, 0,
                             "1: a thread of hakmem's own returns freed memory while the program is idle"},
  [OPT_SHOW_ERRORS] = {"SHOW_ERRORS", 0, 1, "report invalid frees on stderr (0 = silent)"},
  [OPT_ON_ERROR] = {"ON_ERROR", 0, 0,
                    "abort (default) or report: what a double free, a corrupted list or a free inside a block does", .is_str = true},
  [OPT_LEARN] = {"LEARN", 0, 1, "learn the purge/cache strategy while running (0 = pin HAKMEM_LEARN_PIN)"},
  [OPT_LEARN_PIN] = {"LEARN_PIN", 0, 0, "strategy used with HAKMEM_LEARN=0: 0 default, 1 speed, 2 lean, 3 memory"},
  [OPT_LEARN_WEIGHT] = {"LEARN_WEIGHT", 0, 50, "percent weight on time in the OS against memory held (0..100)"},
  [OPT_LEARN_EPOCH_MS] = {"LEARN_EPOCH_MS", 0, 50, "ms each strategy runs before it is rated"},
  [OPT_LEARN_SEED] = {"LEARN_SEED", 0, 1, "seed of the exploration (same seed, same costs: same choices)"},
};

extern char **environ;

/* The value of environment variable name, read without allocating, or NULL. */
static const char *options_getenv(const char *name) {
  char **env = environ;
  if (env == NULL) return NULL;
  for (; *env; env++) {
    const char *e = *env, *n = name;
    while (*n && *e == *n) e++, n++;
    if (*n == 0 && *e == '=') return e + 1;
  }
  return NULL;
}

static long parse_long(const char *s, long def) {
  bool neg = false;
  long v = 0;
  if (*s == '-') neg = true, s++;
  if (*s < '0' || *s > '9') { /* words for booleans */
    if ((s[0] == 'o' && s[1] == 'n') || s[0] == 'y' || s[0] == 't') return 1;
    if ((s[0] == 'o' && s[1] == 'f') || s[0] == 'n' || s[0] == 'f') return 0;
    return def;
  }
  while (*s >= '0' && *s <= '9') v = v * 10 + (*s++ - '0');
  return neg ? -v : v;
}

static void option_read(option_desc_t *o) {
  char var[64] = "HAKMEM_";
  size_t n = 7;
  for (const char *p = o->name; *p && n < sizeof var - 1; p++) var[n++] = *p;
  var[n] = 0;
  const char *s = options_getenv(var);
  o->given = s != NULL;
  if (o->is_str) {
    size_t i = 0;
    for (; s && s[i] && i < OPT_STR_MAX - 1; i++) o->str[i] = s[i];
    o->str[i] = 0;
    o->value = i > 0;
  } else {
    bool json = o == &options[OPT_STATS] && s && s[0] == 'j' && s[1] == 's' && s[2] == 'o' && s[3] == 'n' && s[4] == 0;
    o->value = json ? 2 : s ? parse_long(s, o->def) : o->def;
  }
  /* Before the C library sets up the environment, leave it unread. */
  if (environ != NULL) {
    hak_option_values[o - options] = o->value;
    __atomic_store_n(&hak_option_read[o - options], 1, __ATOMIC_RELEASE);
  }
}

long hak_option_values[OPT_COUNT];
uint8_t hak_option_read[OPT_COUNT];

long hak_option_slow(hak_option_t opt) {
  option_desc_t *o = &options[opt];
  if (__atomic_load_n(&hak_option_read[opt], __ATOMIC_ACQUIRE) == 0) option_read(o);
  return o->value;
}

const char *hak_option_str(hak_option_t opt) {
  hak_option(opt);
  return options[opt].str;
}

bool hak_option_path(hak_option_t opt, char *buf, size_t len) {
  const char *s = hak_option_str(opt);
  out_t o = out_mem(buf, len);
  for (; *s; s++) {
    if (s[0] == '%' && s[1] == 'p') out_uint(&o, (uint64_t)os_getpid(), 0), s++;
    else out_char(&o, *s);
  }
  size_t n = out_flush(&o);
  return n > 0 && n < len;
}

bool hak_option_given(hak_option_t opt) {
  hak_option(opt);
  return options[opt].given;
}

void hak_options_init(void) {
  for (int i = 0; i < OPT_COUNT; i++) hak_option((hak_option_t)i);
}

/* Every option, one a line: HAKMEM_NAME=value (default D): meaning. The
 * value is the one in effect (the environment's, or the default). */
HAK_API void hak_options_print(int fd) {
  out_t o = OUT_FD(fd);
  for (int i = 0; i < OPT_COUNT; i++) {
    option_desc_t *d = &options[i];
    out_str(&o, "HAKMEM_");
    out_str(&o, d->name);
    out_str(&o, "=");
    if (d->is_str) out_str(&o, hak_option_str((hak_option_t)i));
    else out_int(&o, hak_option((hak_option_t)i));
    out_str(&o, " (default ");
    if (d->is_str) out_str(&o, "unset");
    else out_int(&o, d->def);
    out_str(&o, "): ");
    out_str(&o, d->doc);
    out_str(&o, "\n");
  }
  out_flush(&o);
}
