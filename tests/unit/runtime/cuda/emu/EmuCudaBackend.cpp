// The backend compiled against the emulated kernels and runtime calls (see
// CudaCompat.h), registered by the tests as "cudaemu".
#include "runtime/cuda/CudaBackend.cpp"
