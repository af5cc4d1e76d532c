/* Clean streaming workload for bench/threads.sh: THREADS threads, each streaming over its own 1 MiB
 * buffer (no sharing), taking one mutex once per round to fold its result into a total. Nothing to
 * race on. Usage: threads THREADS ROUNDS. Prints a checksum. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WORDS (1 << 17) /* 1 MiB of uint64_t per thread */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t total;
static long rounds;

__attribute__((noinline)) static uint64_t stream(uint64_t *buf, uint64_t round) {
    uint64_t acc = round;
    for (long i = 0; i < WORDS; i++) {
        buf[i] = buf[i] * 6364136223846793005ull + (acc ^ (uint64_t)i);
        acc = (acc << 5 | acc >> 59) ^ buf[i];
    }
    return acc;
}

static void *worker(void *arg) {
    uint64_t *buf = malloc(WORDS * sizeof *buf);
    for (long i = 0; i < WORDS; i++)
        buf[i] = (uint64_t)i ^ (uintptr_t)arg;
    for (long r = 0; r < rounds; r++) {
        uint64_t acc = stream(buf, (uint64_t)r);
        pthread_mutex_lock(&lock);
        total ^= acc;
        pthread_mutex_unlock(&lock);
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    rounds = argc > 2 ? atol(argv[2]) : 2000;
    pthread_t t[256];
    if (threads < 1 || threads > 256)
        return 2;
    for (long i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("threads: checksum %llx\n", (unsigned long long)total);
    return 0;
}
