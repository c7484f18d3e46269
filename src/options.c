/* The options table. Each option has one entry, its environment variable is
 * HAKMEM_<NAME>, and it is read on first use (or again at process start if the
 * environment was not set up yet when first asked). */
#include "options.h"

#include "internal.h"

typedef struct {
  const char *name; /* HAKMEM_<name> */
  long value;
  long def;
  const char *doc;
  _Atomic int state; /* 0 not read, 1 read */
  bool given;        /* set in the environment */
} option_desc_t;

static option_desc_t options[OPT_COUNT] = {
  [OPT_STATS] = {"STATS", 0, 0, "print per-class statistics to stderr at exit (1 = on)", 0},
  [OPT_PURGE_DELAY_MS] = {"PURGE_DELAY_MS", 0, 250,
                          "milliseconds freed memory stays resident before madvise (0 = at once, -1 = never)", 0},
  [OPT_POOL_REGIONS] = {"POOL_REGIONS", 0, 16, "empty 4 MiB regions kept mapped (purged) for reuse", 0},
  [OPT_BIGCACHE_MB] = {"BIGCACHE_MB", 0, 256, "MiB of freed huge blocks' pages kept resident for reuse (beyond, the oldest are purged)", 0},
  [OPT_BIGCACHE_AGE_MS] = {"BIGCACHE_AGE_MS", 0, 500, "milliseconds a freed huge block stays cached", 0},
  [OPT_HUGE_SLACK_PCT] = {"HUGE_SLACK_PCT", 0, 25,
                          "percent of a huge block's size that pages left resident beyond it (in its last unit) "
                          "may add when it is placed on freed pages (beyond, they are purged)", 0},
  [OPT_SHOW_ERRORS] = {"SHOW_ERRORS", 0, 1, "report invalid frees on stderr (0 = silent)", 0},
  [OPT_LEARN] = {"LEARN", 0, 1, "learn the Large/Huge strategy while running (0 = pin HAKMEM_LEARN_PIN)", 0},
  [OPT_LEARN_PIN] = {"LEARN_PIN", 0, 0, "strategy used with HAKMEM_LEARN=0: 0 default, 1 speed, 2 lean, 3 memory", 0},
  [OPT_LEARN_WEIGHT] = {"LEARN_WEIGHT", 0, 50, "percent weight on time in the OS against memory held (0..100)", 0},
  [OPT_LEARN_EPOCH_MS] = {"LEARN_EPOCH_MS", 0, 50, "milliseconds each strategy runs before it is rated", 0},
  [OPT_LEARN_SEED] = {"LEARN_SEED", 0, 1, "seed of the exploration (same seed, same costs: same choices)", 0},
};

static long parse_long(const char *s, long def) {
  bool neg = false;
  long v = 0;
  if (*s == '-') neg = true, s++;
  if (*s < '0' || *s > '9') {
    /* words for booleans */
    if (s[0] == 'o' && s[1] == 'n') return 1;
    if (s[0] == 'y' || s[0] == 't') return 1;
    if (s[0] == 'o' && s[1] == 'f') return 0;
    if (s[0] == 'n' || s[0] == 'f') return 0;
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
  const char *s = os_getenv(var);
  o->value = s ? parse_long(s, o->def) : o->def;
  o->given = s != NULL;
  /* Before the C library sets up the environment, leave it "not read". */
  extern char **environ;
  if (environ != NULL) atomic_store_explicit(&o->state, 1, memory_order_release);
}

long hak_option(hak_option_t opt) {
  option_desc_t *o = &options[opt];
  if (unlikely(atomic_load_explicit(&o->state, memory_order_acquire) == 0)) option_read(o);
  return o->value;
}

bool hak_option_on(hak_option_t opt) { return hak_option(opt) != 0; }

bool hak_option_given(hak_option_t opt) {
  hak_option(opt);
  return options[opt].given;
}

void hak_options_init(void) {
  for (int i = 0; i < OPT_COUNT; i++) hak_option((hak_option_t)i);
}

void hak_options_print(int fd) {
  os_out_t o = {.fd = fd};
  for (int i = 0; i < OPT_COUNT; i++) {
    os_out_str(&o, "hakmem: option HAKMEM_");
    os_out_str(&o, options[i].name);
    os_out_str(&o, "=");
    long v = hak_option((hak_option_t)i);
    if (v < 0) os_out_str(&o, "-");
    os_out_uint(&o, (uint64_t)(v < 0 ? -v : v), 0);
    os_out_str(&o, "  (");
    os_out_str(&o, options[i].doc);
    os_out_str(&o, ")\n");
  }
  os_out_flush(&o);
}
