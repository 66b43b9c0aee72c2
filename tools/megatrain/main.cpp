//===- main.cpp - the megatrain driver ------------------------------------===//
//
//   megatrain compile MODEL.onnx [flags]   import, run the passes, emit
//   megatrain inspect DIR                  describe a compiled plan
//
// Every failure prints one `error: ...` line naming the culprit and exits
// non-zero (1 for bad input, 2 for bad usage).
//
//===----------------------------------------------------------------------===//
#include "tools/megatrain/Commands.h"
#include "tools/megatrain/Flags.h"

#include "frontend/Error.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char *kUsage = R"(usage: megatrain <command> [flags]

Compiles an exported decoder model (ONNX) into a training plan that streams
each layer's weights from host memory to one GPU, and a trainer that runs it.

commands:
  compile MODEL.onnx   import the model and compile it (see compile --help)
  inspect DIR          describe a compiled plan: units, memory, predicted time
  export-onnx MODEL.onnx WEIGHTS.safetensors -o OUT.onnx
                       a copy of the model holding trained weights

flags:
  --help               this text
  --version            the version
)";

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::puts("megatrain 0.1.0");
    return 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "compile")
      return mt::driver::runCompile(args);
    if (command == "inspect")
      return mt::driver::runInspect(args);
    if (command == "export-onnx")
      return mt::driver::runExportOnnx(args);
    throw mt::driver::UsageError("unknown command '" + command +
                                 "' (commands: compile, inspect, export-onnx)");
  } catch (const mt::driver::UsageError &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const mt::onnx_import::ImportError &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "error: out of host memory\n");
    return 1;
  } catch (const std::exception &e) {
    // A bug, not bad input; still one line and no core dump.
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 1;
  }
}
