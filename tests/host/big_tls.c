/* A program with a large static thread-local block: a __thread array of TLS_BYTES (240 KiB here, 1 MiB
 * built with -DTLS_BYTES=1048576). glibc carves the static TLS block from the top of every thread stack
 * it maps, racewatch's threads' too: the reporter's 256 KiB stack kept 16 KiB of it and overflowed
 * (set 32 p12: SIGSEGV in 3 of 5 runs at the default options, 5 of 5 at the debug rate), and with
 * 1 MiB no reporter thread could be started at all (every report dropped, without a word). Two threads
 * race for 1.5 s, each writing its own copy of the array's ends. */
#ifndef TLS_BYTES
#define TLS_BYTES 245760
#endif

static __thread char big[TLS_BYTES];
static atomic_int marked;

static void *marker(void *arg) {
  big[0] = 1;
  big[TLS_BYTES - 1] = 2;
  if (big[0] + big[TLS_BYTES - 1] == 3) atomic_fetch_add(&marked, 1);
  rw_race_until(rw_now() + 1.5);
  return arg;
}

int main(void) {
  big[0] = 7;
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, marker, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("threads that wrote their own array: %d; main's first byte: %d\n", atomic_load(&marked), big[0]);
  return 0;
}
