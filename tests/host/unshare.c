/* Case 5: unshare(CLONE_NEWUSER) while single-threaded (it fails with EINVAL in a multithreaded process). */
#include <sched.h>

int main(void) {
  if (unshare(CLONE_NEWUSER) == 0)
    printf("unshare(CLONE_NEWUSER): ok\n");
  else
    printf("unshare(CLONE_NEWUSER): %s\n", rw_errname(errno));
  fflush(stdout);
  rw_start(2, 1.0, 0);
  rw_join();
  printf("done\n");
  return 0;
}
