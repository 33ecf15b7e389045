/* A stand-in for libcuda.so.1 that runs nothing: every call succeeds. */
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
typedef int CUresult;
typedef int CUdevice;
static int dummy_ctx, dummy_stream, dummy_module, dummy_fn, dummy_event;
static void *current = 0;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(CUdevice *d, int o) { *d = o; return 0; }
CUresult cuDeviceGetName(char *n, int len, CUdevice d) { strncpy(n, "Stub GPU", len); return 0; }
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { *b = (size_t)80 << 30; return 0; }
CUresult cuDeviceGetUuid(char *u, CUdevice d) { memset(u, 7, 16); return 0; }
CUresult cuDeviceGetUuid_v2(char *u, CUdevice d) { memset(u, 7, 16); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  switch (attr) {
    case 75: *v = 9; break; case 76: *v = 0; break; /* compute capability */
    case 1: *v = 1024; break; case 2: case 3: *v = 1024; break; case 4: *v = 64; break;
    case 5: *v = 2147483647; break; case 6: case 7: *v = 65535; break;
    case 8: *v = 49152; break; case 16: *v = 132; break; case 10: *v = 32; break;
    case 97: *v = 232448; break; case 81: *v = 233472; break; case 82: *v = 65536; break;
    default: *v = 1; }
  return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, CUdevice d) { *c = &dummy_ctx; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return 0; }
CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return 0; }
CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *f, int *a) { *f = 0; *a = 1; return 0; }
CUresult cuCtxSetCurrent(void *c) { current = c; return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = current; return 0; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuCtxGetApiVersion(void *c, unsigned *v) { *v = 12000; return 0; }
CUresult cuCtxGetFlags(unsigned *f) { *f = 0; return 0; }
CUresult cuCtxSetFlags(unsigned f) { return 0; }
CUresult cuCtxPushCurrent_v2(void *c) { current = c; return 0; }
CUresult cuCtxPopCurrent_v2(void **c) { if (c) *c = current; return 0; }
CUresult cuStreamCreate(void **s, unsigned f) { *s = &dummy_stream; return 0; }
CUresult cuStreamCreateWithPriority(void **s, unsigned f, int p) { *s = &dummy_stream; return 0; }
CUresult cuStreamDestroy_v2(void *s) { return 0; }
CUresult cuStreamSynchronize(void *s) { return 0; }
CUresult cuStreamQuery(void *s) { return 0; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { return 0; }
CUresult cuStreamIsCapturing(void *s, int *st) { *st = 0; return 0; }
CUresult cuStreamGetCaptureInfo_v2(void *s, int *st, unsigned long long *id, void *g, void *d, size_t *n) { *st = 0; return 0; }
CUresult cuStreamGetCaptureInfo_v3(void *s, int *st, unsigned long long *id, void *g, void *d, void *e, size_t *n) { *st = 0; return 0; }
CUresult cuStreamGetCtx(void *s, void **c) { *c = &dummy_ctx; return 0; }
CUresult cuEventCreate(void **e, unsigned f) { *e = &dummy_event; return 0; }
CUresult cuEventRecord(void *e, void *s) { return 0; }
CUresult cuEventSynchronize(void *e) { return 0; }
CUresult cuEventQuery(void *e) { return 0; }
CUresult cuEventDestroy_v2(void *e) { return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 0.01f; return 0; }
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { *ms = 0.01f; return 0; }
static uint64_t next_address = 0x10000000;
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) { *p = next_address; next_address += (n + 4095) & ~4095ul; return 0; }
CUresult cuMemAllocAsync(uint64_t *p, size_t n, void *s) { return cuMemAlloc_v2(p, n); }
CUresult cuMemFree_v2(uint64_t p) { return 0; }
CUresult cuMemFreeAsync(uint64_t p, void *s) { return 0; }
CUresult cuMemcpyHtoD_v2(uint64_t d, const void *h, size_t n) { return 0; }
CUresult cuMemcpyHtoDAsync_v2(uint64_t d, const void *h, size_t n, void *s) { return 0; }
CUresult cuMemcpyDtoH_v2(void *h, uint64_t d, size_t n) { memset(h, 0, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *h, uint64_t d, size_t n, void *s) { memset(h, 0, n); return 0; }
CUresult cuMemsetD8_v2(uint64_t d, unsigned char v, size_t n) { return 0; }
CUresult cuMemsetD8Async(uint64_t d, unsigned char v, size_t n, void *s) { return 0; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)70 << 30; *t = (size_t)80 << 30; return 0; }
CUresult cuPointerGetAttribute(void *data, int attr, uint64_t p) { memset(data, 0, 8); return 0; }
CUresult cuModuleLoadData(void **m, const void *img) { *m = &dummy_module; return 0; }
CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, int *o, void **v) { *m = &dummy_module; return 0; }
CUresult cuModuleUnload(void *m) { return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { *f = &dummy_fn; return 0; }
CUresult cuModuleGetGlobal_v2(uint64_t *p, size_t *b, void *m, const char *name) { if (p) *p = 0x20000000; if (b) *b = 8; return 0; }
CUresult cuFuncGetAttribute(int *v, int attr, void *f) { *v = (attr == 0) ? 1024 : 32; return 0; }
CUresult cuFuncSetAttribute(void *f, int attr, int v) { return 0; }
CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size) { return 1; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shm, void *s, void **params, void **extra) {
  /* Read the parameters as a driver would copy them. */
  volatile uint64_t sink = 0;
  if (params) { sink += *(uint64_t *)params[0]; }
  return 0; }
CUresult cuGetErrorString(int e, const char **s) { *s = "stub error"; return 0; }
CUresult cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_STUB"; return 0; }
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int b, size_t s) { *n = 8; return 0; }
