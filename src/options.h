/* Options: one table, each entry read lazily from HAKMEM_<NAME> in the
 * environment. Layer 0. */
#ifndef HAKMEM_OPTIONS_H
#define HAKMEM_OPTIONS_H

#include "base.h"

typedef enum {
  OPT_STATS,             /* statistics report at exit: 1 text, 2 JSON */
  OPT_STATS_FILE,        /* where the report goes (default stderr) */
  OPT_PROFILE,           /* the heap profile's path: profiling on */
  OPT_PROFILE_RATE,      /* mean bytes between samples */
  OPT_PURGE_DELAY_MS,    /* how long freed memory stays resident */
  OPT_POOL_REGIONS,      /* empty regions kept mapped for reuse */
  OPT_BIGCACHE_MB,       /* bytes of freed huge blocks kept resident */
  OPT_BIGCACHE_AGE_MS,   /* how long a freed huge block stays resident */
  OPT_BACKGROUND_THREAD, /* purge from a thread of hakmem's own */
  OPT_SHOW_ERRORS,       /* report bad pointers on stderr */
  OPT_ON_ERROR,          /* a corrupted free list: abort, or report and drop it */
  OPT_LEARN,             /* learn the strategy (0 = pin one) */
  OPT_LEARN_PIN,         /* the strategy pinned when not learning */
  OPT_LEARN_WEIGHT,      /* percent weight on time against memory */
  OPT_LEARN_EPOCH_MS,    /* how long each strategy runs before it is rated */
  OPT_LEARN_SEED,        /* exploration seed */
  OPT_COUNT
} hak_option_t;

/* An option's value: read from the environment at its first use (again
 * while the environment is not set up), then from hak_option_values. */
extern long hak_option_values[OPT_COUNT];
extern uint8_t hak_option_read[OPT_COUNT]; /* 1: its value is final (__atomic builtins) */
long hak_option_slow(hak_option_t opt);
hak_inline long hak_option(hak_option_t opt) {
  if (likely(__atomic_load_n(&hak_option_read[opt], __ATOMIC_ACQUIRE))) return hak_option_values[opt];
  return hak_option_slow(opt);
}
hak_inline bool hak_option_on(hak_option_t opt) { return hak_option(opt) != 0; }
/* A string option's value ("" when unset). */
const char *hak_option_str(hak_option_t opt);
/* A path option's value with each "%p" replaced by the process id, into buf
 * (len bytes); false when unset or too long. */
bool hak_option_path(hak_option_t opt, char *buf, size_t len);
/* Whether the user set the option in the environment. */
bool hak_option_given(hak_option_t opt);
/* Re-reads the options still unread (the environment may be missing during
 * early start-up). */
void hak_options_init(void);

#endif
