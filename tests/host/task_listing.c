/* A program that counts its threads by listing /proc/self/task right after starting them, and compares
 * the count with Threads: in its status, round after round: three workers wait on a barrier while main
 * lists; then they end, so each round starts from one thread (racewatch's reporter thread rests when the
 * program is single-threaded, and starts again with the round's first pthread_create). Prints the rounds
 * whose two counts differ. argv[1]: rounds (default 100). */
#include <dirent.h>

static pthread_barrier_t barrier;

static void *worker(void *arg) {
  rw_race_iterations(20000);
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  return arg;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 100, differ = 0;
  for (int round = 0; round < rounds; round++) {
    pthread_t t[3];
    pthread_barrier_init(&barrier, NULL, 4);
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, worker, NULL);
    pthread_barrier_wait(&barrier);
    DIR *dir = opendir("/proc/self/task");
    int listed = 0;
    struct dirent *entry;
    while (dir && (entry = readdir(dir)))
      if (entry->d_name[0] != '.') listed++;
    if (dir) closedir(dir);
    int counted = (int)rw_status_field("/proc/self/status", "Threads");
    if (listed != 4 || counted != 4) {
      if (differ < 3) printf("round %d: listed %d, status %d\n", round, listed, counted);
      differ++;
    }
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&barrier);
  }
  printf("rounds with a count other than 4: %d\n", differ);
  return 0;
}
