/* Prints the options table through the library's API, for tests/tool.sh to
 * compare with `hakmem options`. */
#include <hakmem.h>

int main(void) {
  hak_options_print(1);
  return 0;
}
