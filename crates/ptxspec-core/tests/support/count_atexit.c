/* Counts the exit handlers that shared libraries register (their C++
 * static destructors go through __cxa_atexit): preloaded into a test's
 * child, which reads the count through ptxspec_test_atexit_count. Handlers
 * of the program itself (ptxspec's exit hook among them) are not counted:
 * only those whose function lies in a shared object. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

static atomic_long registered;

long ptxspec_test_atexit_count(void) { return atomic_load(&registered); }

int __cxa_atexit(void (*func)(void *), void *arg, void *dso) {
  static int (*real)(void (*)(void *), void *, void *);
  if (!real)
    real = (int (*)(void (*)(void *), void *, void *))dlsym(RTLD_NEXT, "__cxa_atexit");
  Dl_info info;
  if (dladdr((void *)func, &info) && info.dli_fname && strstr(info.dli_fname, ".so"))
    atomic_fetch_add(&registered, 1);
  return real ? real(func, arg, dso) : -1;
}
