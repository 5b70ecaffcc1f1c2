/* Input to `cargo xtask bindgen`: the cuBLAS entry points (libcublas) of rocmforge's vendor GEMM. */
#include <cublas_v2.h>
