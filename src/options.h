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
  OPT_SHOW_ERRORS,      /* report bad pointers on stderr */
  OPT_COUNT
} hak_option_t;

long hak_option(hak_option_t opt);
bool hak_option_on(hak_option_t opt);
/* Re-reads options still at their "not yet read" state (environment missing
 * during early start-up). */
void hak_options_init(void);
void hak_options_print(int fd);

#endif
