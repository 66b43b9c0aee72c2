//===- FakeDriver.cpp - a CUDA driver for cuDNN to plan against ----------===//
//
// Built as libcuda.so.1 in a folder of its own, which a test puts first on
// the loader's path: cuDNN's runtime-compiled engines load the driver to
// turn the kernels they compile (with NVRTC, on the CPU) into modules. This
// one keeps each cubin's SM and each kernel's name, and runs nothing, so
// that a test sees which kernels cuDNN would run on the GPU it plans for
// ahead of time (CudnnAttention::plan_ahead). With MEGATRAIN_FAKE_DRIVER_DUMP
// naming a folder, it also writes each cubin there (N.cubin, in the order
// loaded), for cuobjdump to read. Every entry point cuDNN 9 looks up is
// here; those that would need a device fail.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kSuccess = 0, kNotSupported = 801; // CUresult's

std::vector<int> sms;             // the SM of each cubin loaded
std::vector<std::string> kernels; // each kernel looked up by name
int library = 0, kernel = 0;      // what the handles point at

/// The SM a cubin is for: the second byte of its ELF header's e_flags.
int sm_of(const void *image) {
  const auto *c = static_cast<const unsigned char *>(image);
  if (std::memcmp(c,
                  "\x7f"
                  "ELF",
                  4) != 0)
    return -1; // PTX or a fat binary: nothing compiled for an SM here
  uint32_t flags;
  std::memcpy(&flags, c + 0x30, sizeof flags);
  return int(flags >> 8 & 0xff);
}

/// Writes an ELF64 cubin to $MEGATRAIN_FAKE_DRIVER_DUMP/N.cubin, where set:
/// its bytes end with its section or its program headers, the later.
void dump(const void *image, size_t n) {
  const char *dir = std::getenv("MEGATRAIN_FAKE_DRIVER_DUMP");
  const auto *c = static_cast<const unsigned char *>(image);
  if (!dir ||
      std::memcmp(c,
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      c[4] != 2)
    return;
  auto table_end = [&](int off, int entsize, int num) {
    uint64_t at;
    uint16_t size, count;
    std::memcpy(&at, c + off, sizeof at);
    std::memcpy(&size, c + entsize, sizeof size);
    std::memcpy(&count, c + num, sizeof count);
    return at + uint64_t(size) * count;
  };
  const uint64_t bytes = std::max(table_end(0x28, 0x3a, 0x3c),  // sections
                                  table_end(0x20, 0x36, 0x38)); // program
  const std::string path =
      std::string(dir) + "/" + std::to_string(n) + ".cubin";
  if (FILE *f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(c, 1, size_t(bytes), f);
    std::fclose(f);
  }
}

} // namespace

extern "C" {

/// How many cubins were loaded, and the SM of the i-th.
int fake_driver_cubins() { return int(sms.size()); }
int fake_driver_cubin_sm(int i) { return sms.at(size_t(i)); }
/// How many kernels were looked up, and the name of the i-th.
int fake_driver_kernels() { return int(kernels.size()); }
const char *fake_driver_kernel(int i) { return kernels.at(size_t(i)).c_str(); }

int cuInit(unsigned) { return kSuccess; }
int cuDeviceGetCount(int *count) {
  *count = 1;
  return kSuccess;
}
int cuGetErrorString(int, const char **text) {
  *text = "the fake CUDA driver runs nothing";
  return kSuccess;
}
int cuGetErrorName(int, const char **text) {
  *text = "CUDA_ERROR_NOT_SUPPORTED";
  return kSuccess;
}
int cuLibraryLoadData(void **lib, const void *image, void *, void *, unsigned,
                      void *, void *, unsigned) {
  dump(image, sms.size());
  sms.push_back(sm_of(image));
  *lib = &library;
  return kSuccess;
}
int cuLibraryGetKernel(void **k, void *, const char *name) {
  kernels.emplace_back(name);
  *k = &kernel;
  return kSuccess;
}
int cuLibraryUnload(void *) { return kSuccess; }

// The rest of what cuDNN looks up: each needs a device.
#define MT_FAKE_DRIVER_NEEDS_A_DEVICE(name)                                    \
  int name() { return kNotSupported; }
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuCtxGetCurrent)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuCtxGetDevice)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuCtxGetLimit)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuCtxPopCurrent)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuCtxPushCurrent)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuDeviceGet)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuDeviceGetAttribute)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuDevicePrimaryCtxRelease)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuDevicePrimaryCtxReset)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuDevicePrimaryCtxRetain)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuDriverGetVersion)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuFuncGetAttribute)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuGetExportTable)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuFuncSetAttribute)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuKernelGetAttribute)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuKernelGetFunction)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuKernelSetAttribute)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLaunchCooperativeKernel)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLaunchKernel)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLaunchKernelEx)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLibraryLoadFromFile)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLinkAddData)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLinkAddData_v2)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLinkAddFile_v2)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLinkComplete)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLinkCreate)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLinkCreate_v2)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuLinkDestroy)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuMemcpyDtoH_v2)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuModuleGetFunction)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuModuleGetGlobal_v2)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuModuleLoadData)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuModuleLoadDataEx)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuModuleLoadFatBinary)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuModuleUnload)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuOccupancyMaxActiveBlocksPerMultiprocessor)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuOccupancyMaxPotentialClusterSize)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuStreamGetCtx)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuStreamSynchronize)
MT_FAKE_DRIVER_NEEDS_A_DEVICE(cuTensorMapEncodeTiled)
#undef MT_FAKE_DRIVER_NEEDS_A_DEVICE

} // extern "C"
