// A libamdhip64 for NVIDIA GPUs, made of AMD's own HIP implementation for NVIDIA.
//
// AMD's HIP headers carry, under `hip/nvidia_detail/`, the whole HIP runtime API for NVIDIA as
// `inline static` wrappers over the CUDA runtime and driver APIs. Nothing in them is exported,
// so a program that opens `libamdhip64` at run time (as rocm-sys does) cannot use them directly.
// This file only gives each entry point rocm-sys binds an exported C symbol under its HIP name
// that forwards to AMD's wrapper: the mapping itself (error codes, attributes, stream flags,
// module loading) is AMD's, which is the point: the runtime's HIP driver runs against it.
//
// Built by `cargo xtask hip-nvidia` with the host C++ compiler against CUDA 11.8's headers
// (AMD's NVIDIA headers of HIP 5.2 do not build against newer CUDA), linked to CUDA 11.8's
// `libcudart.so.11.0`, which runs on newer drivers.
//
// `RF_EXPORT(ret, name, params, args)` defines `rf_export_<name>`, which calls AMD's wrapper; the
// link gives it its HIP name (`--defsym <name>=rf_export_<name>`, the names read from this file's
// `RF_EXPORT` lines) and exports nothing else. The HIP name cannot be given here: some wrappers
// are declared with C linkage in `hip_runtime_api.h`, so their (local) symbol already has it.

#include <hip/hip_runtime_api.h>

#define RF_EXPORT(ret, name, params, args) \
    extern "C" ret rf_export_##name params { return name args; }

// Set up.
RF_EXPORT(hipError_t, hipInit, (unsigned int flags), (flags))
RF_EXPORT(hipError_t, hipDriverGetVersion, (int* version), (version))
RF_EXPORT(hipError_t, hipRuntimeGetVersion, (int* version), (version))
RF_EXPORT(hipError_t, hipGetDeviceCount, (int* count), (count))
RF_EXPORT(hipError_t, hipSetDevice, (int device), (device))
RF_EXPORT(hipError_t, hipGetDevice, (int* device), (device))
RF_EXPORT(hipError_t, hipDeviceGetName, (char* name, int len, hipDevice_t device), (name, len, device))
RF_EXPORT(hipError_t, hipDeviceGetAttribute, (int* value, hipDeviceAttribute_t attr, int device),
          (value, attr, device))
RF_EXPORT(hipError_t, hipGetDeviceProperties, (hipDeviceProp_t* props, int device), (props, device))
RF_EXPORT(hipError_t, hipDeviceTotalMem, (size_t* bytes, hipDevice_t device), (bytes, device))
RF_EXPORT(hipError_t, hipMemGetInfo, (size_t* free, size_t* total), (free, total))
RF_EXPORT(const char*, hipGetErrorName, (hipError_t error), (error))
RF_EXPORT(const char*, hipGetErrorString, (hipError_t error), (error))

// Streams and events.
RF_EXPORT(hipError_t, hipStreamCreateWithFlags, (hipStream_t* stream, unsigned int flags), (stream, flags))
RF_EXPORT(hipError_t, hipStreamDestroy, (hipStream_t stream), (stream))
RF_EXPORT(hipError_t, hipStreamSynchronize, (hipStream_t stream), (stream))
RF_EXPORT(hipError_t, hipStreamQuery, (hipStream_t stream), (stream))
RF_EXPORT(hipError_t, hipStreamWaitEvent, (hipStream_t stream, hipEvent_t event, unsigned int flags),
          (stream, event, flags))
RF_EXPORT(hipError_t, hipEventCreateWithFlags, (hipEvent_t* event, unsigned int flags), (event, flags))
RF_EXPORT(hipError_t, hipEventDestroy, (hipEvent_t event), (event))
RF_EXPORT(hipError_t, hipEventRecord, (hipEvent_t event, hipStream_t stream), (event, stream))
RF_EXPORT(hipError_t, hipEventSynchronize, (hipEvent_t event), (event))
RF_EXPORT(hipError_t, hipEventQuery, (hipEvent_t event), (event))
RF_EXPORT(hipError_t, hipEventElapsedTime, (float* ms, hipEvent_t start, hipEvent_t stop), (ms, start, stop))

// Memory.
RF_EXPORT(hipError_t, hipMalloc, (void** ptr, size_t size), (ptr, size))
RF_EXPORT(hipError_t, hipFree, (void* ptr), (ptr))
RF_EXPORT(hipError_t, hipMallocAsync, (void** ptr, size_t size, hipStream_t stream), (ptr, size, stream))
RF_EXPORT(hipError_t, hipFreeAsync, (void* ptr, hipStream_t stream), (ptr, stream))
RF_EXPORT(hipError_t, hipMemcpyHtoDAsync, (hipDeviceptr_t dst, void* src, size_t size, hipStream_t stream),
          (dst, src, size, stream))
RF_EXPORT(hipError_t, hipMemcpyDtoHAsync, (void* dst, hipDeviceptr_t src, size_t size, hipStream_t stream),
          (dst, src, size, stream))
RF_EXPORT(hipError_t, hipMemcpyDtoDAsync,
          (hipDeviceptr_t dst, hipDeviceptr_t src, size_t size, hipStream_t stream), (dst, src, size, stream))
RF_EXPORT(hipError_t, hipMemsetD8Async, (hipDeviceptr_t dst, unsigned char value, size_t count, hipStream_t stream),
          (dst, value, count, stream))
RF_EXPORT(hipError_t, hipMemsetD16Async,
          (hipDeviceptr_t dst, unsigned short value, size_t count, hipStream_t stream), (dst, value, count, stream))
RF_EXPORT(hipError_t, hipMemsetD32Async, (hipDeviceptr_t dst, int value, size_t count, hipStream_t stream),
          (dst, value, count, stream))

// Modules and launches.
RF_EXPORT(hipError_t, hipModuleLoadData, (hipModule_t* module, const void* image), (module, image))
RF_EXPORT(hipError_t, hipModuleUnload, (hipModule_t module), (module))
RF_EXPORT(hipError_t, hipModuleGetFunction, (hipFunction_t* function, hipModule_t module, const char* name),
          (function, module, name))
RF_EXPORT(hipError_t, hipFuncGetAttribute, (int* value, hipFunction_attribute attr, hipFunction_t function),
          (value, attr, function))
RF_EXPORT(hipError_t, hipModuleLaunchKernel,
          (hipFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
           unsigned int bz, unsigned int shared, hipStream_t stream, void** params, void** extra),
          (f, gx, gy, gz, bx, by, bz, shared, stream, params, extra))
