/* The hakmem command: what its files share (docs/tools.md). */
#ifndef HAKMEM_TOOL_H
#define HAKMEM_TOOL_H

#include <stdnoreturn.h>

/* Exit statuses of the command's own errors (a program it runs passes its
 * own on): 2 for a command line it does not accept, 1 for the rest, 126 and
 * 127 where the program cannot be run or is not found (as env(1)). */
enum { EXIT_USAGE = 2, EXIT_CANNOT_RUN = 126, EXIT_NOT_FOUND = 127 };

/* argv[0] of the command, to find where it lies when /proc is not mounted. */
extern const char *tool_argv0;

/* Prints the command's help on stdout. */
void tool_usage(void);

/* Prints "hakmem: MESSAGE" on stderr, one line, and exits with status. */
noreturn void tool_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The path of an executable named name in $PATH (a name with a slash is
 * returned as it is, if executable); NULL when there is none. malloc'd. */
char *tool_which(const char *name);

/* The subcommands: argv[0] is the subcommand's name. */
int cmd_run(int argc, char **argv);
int cmd_options(int argc, char **argv);
int cmd_report(int argc, char **argv);
/* The command run again by cmd_options with the library preloaded:
 * "TOOL_OPTIONS_CHILD FD LIBRARY" writes the library's table to FD. */
#define TOOL_OPTIONS_CHILD "--options-child"
int cmd_options_child(int argc, char **argv);

#endif
