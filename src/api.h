/* The API layer's own interface: start-up and the report of a pointer that
 * is not hakmem's. Layer 6. */
#ifndef HAKMEM_API_H
#define HAKMEM_API_H

#include "base.h"
#include "hakmem.h"

/* Idempotent, and safe to call from inside malloc: nothing here allocates. */
void hak_process_init(void);
/* A pointer passed to free/realloc that is not a live block: one line on
 * stderr (the first time), nothing written through it. */
void hak_report_bad_pointer(const char *what, const void *p);
/* The report at exit (HAKMEM_STATS): report_init at start keeps a copy of
 * stderr for it; report_at_exit writes it. */
void report_init(void);
void report_at_exit(void);

#endif
