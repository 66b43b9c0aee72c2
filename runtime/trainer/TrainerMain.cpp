//===- TrainerMain.cpp - the generated trainer's main ---------------------===//

#include "runtime/trainer/TrainerMain.h"

#include "runtime/exec/Error.h"
#include "runtime/trainer/AtomicFile.h"
#include "runtime/trainer/Trainer.h"
#include "runtime/trainer/TrainerFlags.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <unistd.h>

namespace mtrt {

namespace {
// The directory of the running binary, where codegen put weights.safetensors.
std::string exe_directory(const char *argv0) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string path = n > 0 ? std::string(buf, size_t(n))
                           : std::string(argv0 ? argv0 : "trainer");
  return parent_directory(path);
}

// GNU OpenMP's default wait policy keeps a core spinning for milliseconds
// after every parallel region of a kernel; with the stream workers and the
// host pool sharing the cores, that stalls the other streams for whole time
// slices (a toy step: 3 ms passive, up to 400 ms active). libgomp reads the
// policy once, when it loads, so a CPU-backend trainer restarts itself once
// with OMP_WAIT_POLICY=PASSIVE unless the user chose a policy.
void prefer_passive_openmp(char **argv) {
  if (std::getenv("OMP_WAIT_POLICY"))
    return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);
  // No /proc or no exec: carry on with the default policy.
}

void print_error(const std::string &what) {
  std::string line = what.rfind("error:", 0) == 0 ? what : "error: " + what;
  std::fprintf(stderr, "%s\n", line.c_str());
}
} // namespace

int trainer_main(int argc, char **argv, const Program *p) {
  try {
    if (!p)
      fail("internal: trainer_main got no program");
    TrainerOptions opts = parse_trainer_flags(argc, argv);
    if (opts.help) {
      std::fputs(trainer_usage(argc > 0 ? argv[0] : nullptr).c_str(), stdout);
      return 0;
    }
    if (opts.backend == "cpu" && argc > 0)
      prefer_passive_openmp(argv);
    Trainer trainer(*p, opts, exe_directory(argc > 0 ? argv[0] : nullptr));
    trainer.run(stdout, stderr);
    return 0;
  } catch (const Error &e) {
    print_error(e.what());
  } catch (const std::bad_alloc &) {
    print_error("out of host memory (the host store needs 16 bytes per "
                "trained parameter, 12 with --master-weights bf16)");
  } catch (const std::exception &e) {
    print_error(e.what());
  }
  return 1;
}

} // namespace mtrt
