// Stand-in for HIP's hip_fp16.h in the CPU emulation (see ../emu.cpp): everything is in
// hip_runtime.h.
#pragma once
#include "hip_runtime.h"
