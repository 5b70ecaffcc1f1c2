/*
 * A kernel timeline for any CUDA process, without nsys: a CUPTI injection library.
 *
 * The GPU machine has ncu but no nsys, and ncu's graph-node mode runs one node at a time, so
 * the overlap that dependent launches (programmatic dependent launch) buy inside a replayed
 * decode graph cannot be seen with it. CUPTI's concurrent-kernel activity records carry each
 * kernel's GPU start and end timestamps, graph launches included, without serialising them.
 *
 * The CUDA driver loads the library named by CUDA_INJECTION64_PATH into the process and calls
 * its `InitializeInjection`; nothing in the traced program changes. Records go to the CSV file
 * named by KERNEL_TIMELINE_OUT (default kernel_timeline.csv), one line a kernel:
 *   start_ns,end_ns,graph_id,graph_node_id,correlation_id,stream_id,grid,block,name
 * Kernels of one graph launch share its correlation id. scripts/kernel_timeline/summarize.py
 * turns the file into per-node medians of a replayed graph.
 *
 * Build (where CUPTI's headers and library are; see README.md beside this file):
 *   gcc -O2 -shared -fPIC -o libkernel_timeline.so kernel_timeline.c \
 *       -I$CUPTI/include -L$CUPTI/lib -lcupti
 */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BUFFER_BYTES (8u << 20)

static FILE *timeline_out;

static void check(CUptiResult result, const char *what) {
    if (result != CUPTI_SUCCESS) {
        const char *message = "unknown";
        cuptiGetResultString(result, &message);
        fprintf(stderr, "kernel_timeline: %s failed: %s\n", what, message);
    }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    /* CUPTI asks for 8-byte alignment of activity buffers. */
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void write_kernel(const CUpti_ActivityKernel10 *k) {
    fprintf(timeline_out, "%llu,%llu,%u,%llu,%u,%u,%dx%dx%d,%dx%dx%d,%s\n",
            (unsigned long long)k->start, (unsigned long long)k->end, k->graphId,
            (unsigned long long)k->graphNodeId, k->correlationId, k->streamId, k->gridX,
            k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ, k->name ? k->name : "?");
}

static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid) {
    (void)context;
    (void)stream;
    (void)size;
    CUpti_Activity *record = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
            record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            write_kernel((const CUpti_ActivityKernel10 *)record);
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS &&
        dropped != 0) {
        fprintf(stderr, "kernel_timeline: %zu records dropped\n", dropped);
    }
    free(buffer);
}

static void flush_at_exit(void) {
    check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
    if (timeline_out) {
        fclose(timeline_out);
        timeline_out = NULL;
    }
}

int InitializeInjection(void) {
    const char *path = getenv("KERNEL_TIMELINE_OUT");
    timeline_out = fopen(path ? path : "kernel_timeline.csv", "w");
    if (!timeline_out) {
        perror("kernel_timeline: open the output");
        return 0;
    }
    fprintf(timeline_out,
            "start_ns,end_ns,graph_id,graph_node_id,correlation_id,stream_id,grid,block,name\n");
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
          "cuptiActivityRegisterCallbacks");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
          "cuptiActivityEnable(CONCURRENT_KERNEL)");
    atexit(flush_at_exit);
    return 1;
}
