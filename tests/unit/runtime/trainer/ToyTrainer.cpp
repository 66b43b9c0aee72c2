//===- ToyTrainer.cpp - the toy program as a trainer binary ---------------===//
//
// What a generated trainer.cpp ends with, for the toy program: the process
// tests (exit codes, weights beside the binary, kill -9 during checkpoints)
// run this as a child.
//
//===----------------------------------------------------------------------===//

#include "ToyProgram.h"

#include "runtime/trainer/TrainerMain.h"

int main(int argc, char **argv) {
  static mtrt::toy::ToyProgram toy(2);
  return mtrt::trainer_main(argc, argv, &toy.program());
}
