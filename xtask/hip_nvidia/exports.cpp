// A libamdhip64 for NVIDIA GPUs, made of AMD's own HIP implementation for NVIDIA.
//
// AMD's HIP headers carry, under `hip/nvidia_detail/`, the whole HIP runtime API for NVIDIA as
// `inline static` wrappers over the CUDA runtime and driver APIs. Nothing in them is exported,
// so a program that opens `libamdhip64` at run time (as rocm-sys does) cannot use them directly.
// This file only gives each entry point rocm-sys binds an exported C symbol under its HIP name
// that forwards to AMD's wrapper: the mapping itself (error codes, attributes, stream flags,
// module loading) is AMD's, which is the point: the runtime's HIP driver runs against it.
// The one exception is the stream-capture and graph calls at the end (`RF_EXPORT_OURS`), which
// AMD's header defines only for nvcc: those few are ours, and say so.
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
RF_EXPORT(hipError_t, hipDeviceGetDefaultMemPool, (hipMemPool_t* pool, int device), (pool, device))
RF_EXPORT(hipError_t, hipMemPoolSetAttribute, (hipMemPool_t pool, hipMemPoolAttr attr, void* value),
          (pool, attr, value))
RF_EXPORT(hipError_t, hipMemPoolTrimTo, (hipMemPool_t pool, size_t min_bytes_to_keep), (pool, min_bytes_to_keep))
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

// ---------------------------------------------------------------------------------------------
// Stream capture and graphs: ours, not AMD's.
//
// AMD's nvidia_detail header defines HIP's capture and graph wrappers only inside
// `#ifdef __CUDACC__` (with its templates), so a host compiler sees none of them. These few are
// written here instead, over the CUDA runtime's graph calls, which CUDA 11.8's
// cuda_runtime_api.h declares for every compiler. The capture enums are passed in AMD's
// numbering (`hip_runtime_api.h` for AMD: Global 0, ThreadLocal 1, Relaxed 2; status None 0,
// Active 1, Invalidated 2), which is how rocm-sys's binding sends and reads them, and are
// translated to CUDA's by name rather than assumed equal. Errors go through AMD's own
// `hipCUDAErrorTohipError`, like every wrapper above.
// ---------------------------------------------------------------------------------------------

// Exports `name` from `rf_own_<name>`, defined below, instead of from AMD's wrapper.
#define RF_EXPORT_OURS(ret, name, params, args) \
    extern "C" ret rf_export_##name params { return rf_own_##name args; }

static hipError_t rf_own_hipStreamBeginCapture(hipStream_t stream, int mode) {
    cudaStreamCaptureMode cuda_mode;
    switch (mode) {
        case 0: cuda_mode = cudaStreamCaptureModeGlobal; break;
        case 1: cuda_mode = cudaStreamCaptureModeThreadLocal; break;
        case 2: cuda_mode = cudaStreamCaptureModeRelaxed; break;
        default: return hipErrorInvalidValue;
    }
    return hipCUDAErrorTohipError(cudaStreamBeginCapture(stream, cuda_mode));
}

static hipError_t rf_own_hipStreamEndCapture(hipStream_t stream, hipGraph_t* graph) {
    return hipCUDAErrorTohipError(cudaStreamEndCapture(stream, graph));
}

static hipError_t rf_own_hipStreamIsCapturing(hipStream_t stream, int* status) {
    cudaStreamCaptureStatus cuda_status = cudaStreamCaptureStatusNone;
    cudaError_t error = cudaStreamIsCapturing(stream, &cuda_status);
    if (error == cudaSuccess) {
        switch (cuda_status) {
            case cudaStreamCaptureStatusNone: *status = 0; break;
            case cudaStreamCaptureStatusActive: *status = 1; break;
            case cudaStreamCaptureStatusInvalidated: *status = 2; break;
            default: return hipErrorUnknown;
        }
    }
    return hipCUDAErrorTohipError(error);
}

static hipError_t rf_own_hipGraphInstantiate(hipGraphExec_t* exec, hipGraph_t graph, hipGraphNode_t* error_node,
                                             char* log, size_t log_size) {
    return hipCUDAErrorTohipError(cudaGraphInstantiate(exec, graph, error_node, log, log_size));
}

static hipError_t rf_own_hipGraphLaunch(hipGraphExec_t exec, hipStream_t stream) {
    return hipCUDAErrorTohipError(cudaGraphLaunch(exec, stream));
}

static hipError_t rf_own_hipGraphExecDestroy(hipGraphExec_t exec) {
    return hipCUDAErrorTohipError(cudaGraphExecDestroy(exec));
}

static hipError_t rf_own_hipGraphDestroy(hipGraph_t graph) {
    return hipCUDAErrorTohipError(cudaGraphDestroy(graph));
}

RF_EXPORT_OURS(hipError_t, hipStreamBeginCapture, (hipStream_t stream, int mode), (stream, mode))
RF_EXPORT_OURS(hipError_t, hipStreamEndCapture, (hipStream_t stream, hipGraph_t* graph), (stream, graph))
RF_EXPORT_OURS(hipError_t, hipStreamIsCapturing, (hipStream_t stream, int* status), (stream, status))
RF_EXPORT_OURS(hipError_t, hipGraphInstantiate,
               (hipGraphExec_t* exec, hipGraph_t graph, hipGraphNode_t* error_node, char* log, size_t log_size),
               (exec, graph, error_node, log, log_size))
RF_EXPORT_OURS(hipError_t, hipGraphLaunch, (hipGraphExec_t exec, hipStream_t stream), (exec, stream))
RF_EXPORT_OURS(hipError_t, hipGraphExecDestroy, (hipGraphExec_t exec), (exec))
RF_EXPORT_OURS(hipError_t, hipGraphDestroy, (hipGraph_t graph), (graph))
