/* A thread reads `environ` while another thread is inside system() (racewatch points `environ` at the
 * children's environment for the call), then walks that array after the call returned, the program set
 * a variable and the other thread ran system() again: the entries must be those it read (before, the
 * array was freed as the call ended and its memory reused: 4 entries changed in 3 runs of 3; a vfork
 * child building its exec's environment from such an array died of SIGSEGV, set 32 p35). */
extern char **environ;
static atomic_int phase;

static void *runner(void *arg) {
  if (system("sleep 0.3") != 0) printf("first system failed\n");
  atomic_store(&phase, 1);
  while (atomic_load(&phase) != 2) rw_sleep(0.001);
  if (system("sleep 0.3") != 0) printf("second system failed\n");
  atomic_store(&phase, 3);
  return arg;
}

int main(void) {
  rw_start(2, 1.5, 0);
  pthread_t t;
  pthread_create(&t, NULL, runner, NULL);
  rw_sleep(0.1);
  char **seen = environ; /* what a getenv in this thread walks now */
  char *copy[256];
  int n = 0;
  for (; seen[n] && n < 255; n++) copy[n] = strdup(seen[n]);
  while (atomic_load(&phase) != 1) rw_sleep(0.001);
  setenv("RW_LATER", "a value set between the calls", 1);
  atomic_store(&phase, 2);
  rw_sleep(0.15);
  int changed = 0, m = 0;
  for (; seen[m] && m < 255; m++)
    if (m >= n || strcmp(seen[m], copy[m])) changed++;
  if (m != n) changed++;
  while (atomic_load(&phase) != 3) rw_sleep(0.001);
  pthread_join(t, NULL);
  rw_join();
  printf("entries of the array read during system(): changed %d\n", changed);
  return 0;
}
