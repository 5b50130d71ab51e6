/* Loads and attaches the programs of probe.bpf.o whose names start with argv[1] (rt_, tb_, fe_,
 * nn_), prints "ready", and holds them until SIGTERM. */
#include <bpf/libbpf.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void Stop(int signal) { stop = signal; }

int main(int argc, char** argv) {
  if (argc != 2 || strlen(argv[1]) != 3) {
    fprintf(stderr, "usage: load rt_|tb_|fe_|nn_\n");
    return 2;
  }
  struct bpf_object* object = bpf_object__open_file("probe.bpf.o", NULL);
  if (!object) return 1;
  struct bpf_program* program;
  bpf_object__for_each_program(program, object) {
    bpf_program__set_autoload(program, strncmp(bpf_program__name(program), argv[1], 3) == 0);
  }
  if (bpf_object__load(object) != 0) {
    fprintf(stderr, "load: %s programs did not load\n", argv[1]);
    return 1;
  }
  bpf_object__for_each_program(program, object) {
    if (bpf_program__autoload(program) && !bpf_program__attach(program)) {
      fprintf(stderr, "load: %s did not attach\n", bpf_program__name(program));
      return 1;
    }
  }
  signal(SIGTERM, Stop);
  printf("ready\n");
  fflush(stdout);
  while (!stop) pause();
  return 0;
}
