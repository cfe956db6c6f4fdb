/* gpuqos/query.h included first in a C file that asks for POSIX, not GNU: the header must not
 * choose the program's feature set (a review: it defined _GNU_SOURCE, so this file's XSI
 * strerror_r, which returns int, became GNU's, which returns char*, and it did not build). */
#define _POSIX_C_SOURCE 200809L
#include <gpuqos/query.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  char text[64];
  const int rc = strerror_r(2, text, sizeof text);
  gpuqos_query_begin();
  gpuqos_query_end();
  printf("marks ok %d\n", rc);
  return 0;
}
