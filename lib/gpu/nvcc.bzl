"""Flags for compiling .cu files with nvcc in a genrule.

nvcc is not a Bazel C++ toolchain here: each .cu becomes a PIC object through
a genrule and is handed to a cc_library. List every header the .cu includes
in the genrule's srcs. CUDA 13 supports sm_75+; we build for Ampere (sm_80)
and Hopper (sm_90, plus PTX for later chips)."""

NVCC_FLAGS = ("-std=c++17 -O2 -Xcompiler=-fPIC " +
              "-gencode=arch=compute_80,code=sm_80 " +
              "-gencode=arch=compute_90,code=[sm_90,compute_90]")
