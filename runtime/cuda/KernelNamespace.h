//===- KernelNamespace.h - the CUDA kernels' namespace ------------*- C++
//-*-===//
//
// mtrt::MT_KNS, for headers with no CUDA types: mtrt::cuda in the real
// build, mtrt::cudaemu in the emulated one (MEGATRAIN_CUDA_EMULATION;
// CudaCompat.h defines it the same way for the kernel sources).
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_KERNELNAMESPACE_H
#define MEGATRAIN_RUNTIME_CUDA_KERNELNAMESPACE_H

#ifndef MT_KNS
#ifdef MEGATRAIN_CUDA_EMULATION
#define MT_KNS cudaemu
#else
#define MT_KNS cuda
#endif
#endif

#endif // MEGATRAIN_RUNTIME_CUDA_KERNELNAMESPACE_H
