/* Options: one table, read lazily from HAKMEM_* environment variables. */
#ifndef HAKMEM_OPTIONS_H
#define HAKMEM_OPTIONS_H

#include <stdbool.h>

typedef enum {
  OPT_STATS,            /* print statistics at exit */
  OPT_PURGE_DELAY_MS,   /* how long free memory stays resident */
  OPT_POOL_REGIONS,     /* empty regions kept mapped for reuse */
  OPT_BIGCACHE_MB,      /* bytes of freed huge blocks kept for reuse */
  OPT_BIGCACHE_AGE_MS,  /* how long a freed huge block stays cached */
  OPT_HUGE_SLACK_PCT,   /* resident slack a huge block may keep from a bigger cached run */
  OPT_SHOW_ERRORS,      /* report bad pointers on stderr */
  OPT_LEARN,            /* learn the Large/Huge strategy (0 = pin one) */
  OPT_LEARN_PIN,        /* the strategy pinned when not learning */
  OPT_LEARN_WEIGHT,     /* percent weight on speed against memory */
  OPT_LEARN_EPOCH_MS,   /* how long each strategy runs before it is rated */
  OPT_LEARN_SEED,       /* exploration seed */
  OPT_COUNT
} hak_option_t;

long hak_option(hak_option_t opt);
bool hak_option_on(hak_option_t opt);
/* Whether the user set the option in the environment. */
bool hak_option_given(hak_option_t opt);
/* Re-reads options still at their "not yet read" state (environment missing
 * during early start-up). */
void hak_options_init(void);
void hak_options_print(int fd);

#endif
