//===- TrainerProject.h - the out/ directory and its build ------*- C++ -*-===//
#ifndef MT_CODEGEN_TRAINERPROJECT_H
#define MT_CODEGEN_TRAINERPROJECT_H

#include <string>

namespace mt {

/// The CMakeLists.txt of an output directory: builds `trainer` from
/// trainer.cpp against the runtime, taken prebuilt from a MegaTrain build
/// tree when MEGATRAIN_BUILD_DIR has one, else built from MEGATRAIN_SOURCE_DIR
/// (with CUDA where a toolkit is found). That is how a GPU machine without
/// MLIR, ONNX or protobuf builds a trainer compiled elsewhere.
std::string trainerCMakeLists(const std::string &sourceDir,
                              const std::string &buildDir);

/// Configures and builds `dir`/trainer with CMake; returns an error message
/// with the tail of the build log, empty on success.
std::string buildTrainer(const std::string &dir);

} // namespace mt

#endif // MT_CODEGEN_TRAINERPROJECT_H
