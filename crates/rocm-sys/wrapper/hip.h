/* Input to `cargo xtask bindgen`: the HIP runtime API as libamdhip64 exports it. */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>
