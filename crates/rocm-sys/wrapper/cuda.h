/* Input to `cargo xtask bindgen`: the CUDA driver API (libcuda.so.1) that HIP calls map to on NVIDIA. */
#include <cuda.h>
