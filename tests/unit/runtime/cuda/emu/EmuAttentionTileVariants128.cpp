// The kernel source compiled for the CPU emulator (see CudaCompat.h).
#include "runtime/cuda/AttentionTileVariants128.cu"
