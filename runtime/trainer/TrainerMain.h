//===- TrainerMain.h - the generated trainer's main --------------*- C++ -*-===//
//
// A generated trainer.cpp defines its Program and ends with
//
//   int main(int argc, char **argv) {
//     return mtrt::trainer_main(argc, argv, &program);
//   }
//
// trainer_main parses the flags (--help lists them), trains, and returns
// the exit code: 0 on success; 1 after printing one `error: ...` line on
// stderr, leaving no partial output file behind. With the CPU backend and no
// OMP_WAIT_POLICY in the environment it first re-executes the binary once
// with OMP_WAIT_POLICY=PASSIVE (TrainerMain.cpp says why); a caller that runs
// it in-process (a test) sets the variable first.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_TRAINERMAIN_H
#define MEGATRAIN_RUNTIME_TRAINER_TRAINERMAIN_H

namespace mtrt {

struct Program;

int trainer_main(int argc, char **argv, const Program *p);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_TRAINERMAIN_H
