//===- Commands.h - the driver's subcommands --------------------*- C++ -*-===//
#ifndef MEGATRAIN_TOOLS_COMMANDS_H
#define MEGATRAIN_TOOLS_COMMANDS_H

#include <string>
#include <vector>

namespace mt::driver {

int runCompile(const std::vector<std::string> &args);
int runInspect(const std::vector<std::string> &args);
int runExportOnnx(const std::vector<std::string> &args);

} // namespace mt::driver

#endif // MEGATRAIN_TOOLS_COMMANDS_H
