/* Case 14 (built without metadata too) and the "really races" check: two threads race for 1 s. */
int main(void) {
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 1.0);
  rw_join();
  printf("done\n");
  return 0;
}
