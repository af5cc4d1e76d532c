/* Case 14: before any thread, the program puts a symlink where racewatch's log_path file for this
 * process would go: <dir>/rw.<pid> -> <dir>/target (argv[2] = "target", a file with known content)
 * or -> <dir>/absent (argv[2] = "dangling"). Then it races. */
int main(int argc, char **argv) {
  if (argc < 3) return 2;
  char link[4096], target[4096];
  int dangling = strcmp(argv[2], "dangling") == 0;
  snprintf(link, sizeof link, "%s/rw.%d", argv[1], (int)getpid());
  snprintf(target, sizeof target, "%s/%s", argv[1], dangling ? "absent" : "target");
  if (!dangling) {
    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || rw_write_all(fd, "precious\n", 9) != 0) printf("cannot write the target\n");
    close(fd);
  }
  if (symlink(target, link) == 0)
    printf("symlink: ok\n");
  else
    printf("symlink: %s\n", rw_errname(errno));
  rw_start(2, 1.0, 0);
  rw_join();
  printf("done\n");
  return 0;
}
