/* Racy: a thread renames a shared entry with strcpy while another measures
 * and compares the name with strlen and strcmp, without a lock: all three
 * accesses are inside libc's string functions. */
#include <string.h>
#include "demo.h"

static char name[64];
static double deadline;
static const char *const names[] = {"alpha", "a considerably longer name than that", "gamma-ray", "delta"};

__attribute__((noinline)) void rename_entry(const char *to) {
  strcpy(name, to);  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) long inspect(void) {
  long n = (long)strlen(name);  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
  n += strcmp(name, "gamma-ray") == 0;  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
  return n;
}

static void *renamer(void *arg) {
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) rename_entry(names[i & 3]);
  return arg;
}

static void *inspector(void *arg) {
  long sum = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) sum += inspect();
  return (void *)sum;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  strcpy(name, names[0]);
  pthread_t a, b;
  demo_spawn(&a, renamer, NULL);
  demo_spawn(&b, inspector, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("racy_strcpy: done\n");
  return 0;
}
