/* Counts the exit handlers that shared libraries register (their C++
 * static destructors go through __cxa_atexit): preloaded into a test's
 * child, which reads the counts through ptxspec_test_atexit_count and
 * ptxspec_test_atexit_background_count. Handlers of the program itself
 * (ptxspec's exit hook among them) are not counted: only those whose
 * function lies in a shared object. The second count is of those
 * registered on ptxspec's background threads (named "ptxspec-..."), whose
 * first few (library, thread) pairs ptxspec_test_atexit_background_first
 * names, each with its call stack on standard error. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

static atomic_long registered;
static atomic_long registered_in_background;
/* "library on thread" of the first background registrations, each in a
 * slot of its own (registrations on several threads at once). */
static char background_first[4][96];

/* The slots joined (read once the registrations of interest are over). */
const char *ptxspec_test_atexit_background_first(void) {
  static char joined[4 * 98];
  joined[0] = 0;
  for (int i = 0; i < 4 && background_first[i][0]; i++) {
    strcat(joined, background_first[i]);
    strcat(joined, "; ");
  }
  return joined;
}

long ptxspec_test_atexit_count(void) { return atomic_load(&registered); }

long ptxspec_test_atexit_background_count(void) {
  return atomic_load(&registered_in_background);
}

int __cxa_atexit(void (*func)(void *), void *arg, void *dso) {
  static int (*real)(void (*)(void *), void *, void *);
  if (!real)
    real = (int (*)(void (*)(void *), void *, void *))dlsym(RTLD_NEXT, "__cxa_atexit");
  Dl_info info;
  if (dladdr((void *)func, &info) && info.dli_fname && strstr(info.dli_fname, ".so")) {
    atomic_fetch_add(&registered, 1);
    char name[17] = {0};
    if (prctl(PR_GET_NAME, name) == 0 && strncmp(name, "ptxspec-", 8) == 0) {
      long slot = atomic_fetch_add(&registered_in_background, 1);
      if (slot < 4) {
        const char *lib = strrchr(info.dli_fname, '/');
        snprintf(background_first[slot], sizeof background_first[slot], "%s on %s",
                 lib ? lib + 1 : info.dli_fname, name);
        void *frames[24];
        backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
      }
    }
  }
  return real ? real(func, arg, dso) : -1;
}
