/* RACY: two pthreads increment a plain global counter with no
 * synchronisation, so increments are lost.
 *
 * Build: clang-19 $(racewatch flags --c) -O2 -pthread demos/c/racy_counter.c -o racy_counter_c
 * Usage: racy_counter_c [SECONDS]   (default 3). Prints the final count; exits 0.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long counter;
static struct timespec deadline;

/* The racing access: a plain read-modify-write from both threads. */
__attribute__((noinline)) static void bump(void) { counter++; }

static int before_deadline(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec < deadline.tv_sec || (now.tv_sec == deadline.tv_sec && now.tv_nsec < deadline.tv_nsec);
}

static void *worker(void *arg) {
    (void)arg;
    while (before_deadline())
        for (int i = 0; i < 1000; i++)
            bump();
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    long long ns = deadline.tv_nsec + (long long)(seconds * 1e9);
    deadline.tv_sec += ns / 1000000000;
    deadline.tv_nsec = ns % 1000000000;

    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&threads[i], NULL, worker, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    printf("racy_counter_c: final count %ld\n", counter);
    return 0;
}
