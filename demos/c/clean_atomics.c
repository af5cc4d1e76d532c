/* Clean: publication with C11 acquire/release and relaxed atomics, which
 * compile to plain MOVs on x86-64 and are tagged atomic in the PC index. */
#include <stdatomic.h>
#include "demo.h"

static _Atomic long data;
static _Atomic int ready;
static _Atomic long hits;
static double deadline;

__attribute__((noinline)) int publish(long value) {
  if (atomic_load_explicit(&ready, memory_order_acquire)) return 0;
  atomic_store_explicit(&data, value, memory_order_relaxed);
  atomic_store_explicit(&ready, 1, memory_order_release);
  return 1;
}

__attribute__((noinline)) int consume(long *out) {
  if (!atomic_load_explicit(&ready, memory_order_acquire)) return 0;
  *out = atomic_load_explicit(&data, memory_order_relaxed);
  atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
  atomic_store_explicit(&ready, 0, memory_order_release);
  return 1;
}

static void *producer(void *arg) {
  long *next = arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 100; i++) *next += publish(*next + 1);
  return NULL;
}

static void *consumer(void *arg) {
  long *sum = arg, v;
  while (demo_now() < deadline)
    for (int i = 0; i < 100; i++)
      if (consume(&v)) *sum += v;
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 5);
  long sent = 0, sum = 0;
  pthread_t a, b;
  demo_spawn(&a, producer, &sent);
  demo_spawn(&b, consumer, &sum);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("clean_atomics: published %ld\n", sent);
  return 0;
}
