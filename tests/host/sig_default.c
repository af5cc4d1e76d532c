/* Case 6: every signal 1..64 reset to SIG_DFL at start (errors ignored), then race. */
int main(void) {
  for (int sig = 1; sig <= 64; sig++) signal(sig, SIG_DFL);
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 1.0);
  rw_join();
  printf("survived\n");
  return 0;
}
