/* gpuqos/query.h as a C++ program includes it, built with strict warnings as errors (programs.cmake);
 * run without the shim, the four marks are no-ops. */
#include <cstdio>  // first: query.h must not depend on being included before libc
#include <gpuqos/query.h>

int main(void) {
  gpuqos_query_arrived();
  gpuqos_query_begin();
  gpuqos_query_end();
  gpuqos_query_dropped();
  std::puts("marks ok");
  return 0;
}
