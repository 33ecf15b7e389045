/* A stand-in for a profiling tool's NVTX injection library (Nsight Systems
 * ships one): it takes the process's NVTX core slots through the export
 * table, as the protocol says, and writes each range and mark it is handed
 * to the file PTXSPEC_TEST_NVTX_LOG. Built with -DREFUSE, its
 * initialization refuses. For tests/nvtx.rs only. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*handler)(void);
typedef const void *(*get_export_table)(uint32_t id);
struct callbacks {
    size_t struct_size;
    int (*get_module_function_table)(int module, handler ***table, unsigned *size);
};

static FILE *log_file;
static uint64_t next_range = 1;

static uint64_t range_start(const char *message) {
    fprintf(log_file, "start %llu %s\n", (unsigned long long)next_range, message);
    fflush(log_file);
    return next_range++;
}

static void range_end(uint64_t id) {
    fprintf(log_file, "end %llu\n", (unsigned long long)id);
    fflush(log_file);
}

static void mark(const char *message) {
    fprintf(log_file, "mark %s\n", message);
    fflush(log_file);
}

int InitializeInjectionNvtx2(get_export_table get) {
#ifdef REFUSE
    (void)get;
    return 0;
#else
    const char *path = getenv("PTXSPEC_TEST_NVTX_LOG");
    if (!path || !(log_file = fopen(path, "w")))
        return 0;
    const struct callbacks *cb = get(1);
    if (!cb || cb->struct_size < sizeof(struct callbacks))
        return 0;
    handler **core = NULL;
    unsigned size = 0;
    if (!cb->get_module_function_table(1, &core, &size) || size != 16)
        return 0;
    /* Every module a tool may ask for answers, with its size. */
    unsigned sizes[7] = {0, 16, 9, 15, 7, 16, 7};
    for (int module = 1; module <= 6; module++) {
        handler **table = NULL;
        unsigned n = 0;
        if (!cb->get_module_function_table(module, &table, &n) || n != sizes[module] || table[n] != NULL)
            return 0;
    }
    *core[5] = (handler)range_start; /* NVTX_CBID_CORE_RangeStartA */
    *core[7] = (handler)range_end;   /* NVTX_CBID_CORE_RangeEnd */
    *core[2] = (handler)mark;        /* NVTX_CBID_CORE_MarkA */
    fprintf(log_file, "initialized, core %u slots\n", size);
    fflush(log_file);
    return 1;
#endif
}
