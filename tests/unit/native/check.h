/* The C unit tests' one assertion: prints where and what failed, counts failures; main returns
 * the count (0: all held). */
#ifndef SDB_CHECK_H
#define SDB_CHECK_H 1
#include <stdio.h>

static int check_failures;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: %s: failed: %s\n", __FILE__, __LINE__, __func__, #cond); \
            check_failures++;                                                         \
        }                                                                             \
    } while (0)

#endif
