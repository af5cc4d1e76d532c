/* dlopen + dlclose of a library that is not otherwise loaded, 200 times while two threads race (the
 * runtime unwinds stacks through loaded modules' .eh_frame: a dlclose must never pull one out from
 * under it). */
#include <dlfcn.h>

int main(void) {
  rw_start(2, 1.0, 0);
  int cycles = 0, failures = 0;
  for (int i = 0; i < 200; i++) {
    void *lib = dlopen("libresolv.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      failures++;
      continue;
    }
    if (!dlsym(lib, "res_query") && !dlsym(lib, "__res_query")) failures++;
    if (dlclose(lib) != 0) failures++;
    cycles++;
    rw_sleep(0.004);
  }
  rw_join();
  printf("dlopen/dlclose cycles: %d, failures: %d\n", cycles, failures);
  return 0;
}
