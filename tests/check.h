// Minimal assertions for the C++ tests (no test framework is available
// offline): a failed CHECK prints where and exits non-zero.
#ifndef JAXMG_TESTS_CHECK_H_
#define JAXMG_TESTS_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

#endif  // JAXMG_TESTS_CHECK_H_
