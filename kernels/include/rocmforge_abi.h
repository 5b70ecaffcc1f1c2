// rocmforge_abi.h: how the `*_abi.h` headers spell what crosses from the host to a kernel, so
// that one text serves both sides. Kernels include an ABI header (directly or through their
// family's header); `cargo xtask bindgen` reads it with RF_ABI_HOST defined and writes its Rust
// side to crates/rocm-kernels/src/abi/ (committed, checked by `cargo xtask bindgen --check`),
// with the struct sizes and field offsets clang computed asserted at compile time.
//
// An ABI header is plain C: fixed-size integers (int, long long, unsigned long long), floats,
// `#define` integer constants, and device pointers written RF_ABI_PTR(T): T* in kernels, the
// 64-bit device address (`DeviceBuffer::device_ptr`) on the host.

#ifndef ROCMFORGE_ABI_H
#define ROCMFORGE_ABI_H

#ifdef RF_ABI_HOST
#define RF_ABI_PTR(T) unsigned long long
#else
#define RF_ABI_PTR(T) T*
// The host side holds every device pointer in 64 bits.
static_assert(sizeof(void*) == 8, "rocmforge kernels are built for 64-bit devices");
#endif

#endif // ROCMFORGE_ABI_H
