"""nvJitLink's ptxas against the driver's JIT on the same PTX (NVVM's output
of the per-kernel LTO link, -ptx), block sizes interleaved: whether handing
NVVM's PTX to the driver would be faster than nvJitLink finishing the link.
Needs a GPU. Cubins of block sizes seen in the second round go to $OUT.

Usage: CUDA_CACHE_DISABLE=1 NVJITLINK=... NVRTC=... python3 jit.py DIR
(DIR: what `ptxspec compile --lto -o DIR kernels/matmul.cu` wrote)."""
import sys, os, statistics, ctypes, subprocess
sys.path.insert(0,os.path.dirname(__file__)); from nvlib import *
out=os.environ.get('OUT','/tmp')
d=sys.argv[1]
arch=90
sym,align=symbol(d,'matmul'); us=units(d,'matmul')
cu=ctypes.CDLL('libcuda.so.1')
def ck(r,w):
    if r!=0: raise Exception(f'{w}: CUresult {r}')
ck(cu.cuInit(0),'init'); dev=ctypes.c_int(); ck(cu.cuDeviceGet(ctypes.byref(dev),0),'dev')
ctx=ctypes.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx),dev),'retain'); ck(cu.cuCtxSetCurrent(ctx),'cur')
def drv_load(ptx):
    m=ctypes.c_void_p(); t=time.perf_counter(); ck(cu.cuModuleLoadData(ctypes.byref(m),ptx),'load'); dt=time.perf_counter()-t
    cu.cuModuleUnload(m); return dt*1e3
def drv_link(ptx):
    st=ctypes.c_void_p(); t=time.perf_counter()
    ck(cu.cuLinkCreate_v2(0,None,None,ctypes.byref(st)),'linkcreate')
    ck(cu.cuLinkAddData_v2(st,1,ptx,len(ptx),b'k.ptx',0,None,None),'linkadd')  # 1 = CU_JIT_INPUT_PTX
    cub=ctypes.c_void_p(); n=ctypes.c_size_t()
    ck(cu.cuLinkComplete(st,ctypes.byref(cub),ctypes.byref(n)),'linkcomplete')
    dt=time.perf_counter()-t; b=ctypes.string_at(cub,n.value); cu.cuLinkDestroy(st); return dt*1e3,b
base=link_options(arch)
res={}
def add(k,v): res.setdefault(k,[]).append(v)
blocks=[1,2,3,4,5,6,7,9,10,11,12,13,14,15]
for rep in range(3):
  for bs in blocks:
    _,defs=defs_ltoir(sym,align,bs,arch)
    inputs=link_inputs(us,defs)
    dt,full=link(inputs,base); add('full link (cubin)',dt) if rep else None
    dt,ptx=link(inputs,base+['-ptx'],want_ptx=True); add('NVVM only (-ptx)',dt) if rep else None
    ptx=ptx.rstrip(b'\0')
    for k,fn in [('nvJitLink ptxas (PTX input)',lambda p: ptxas(p,arch)[0]),('driver JIT (cuModuleLoadData)',drv_load),('driver cuLink (PTX -> cubin)',lambda p: drv_link(p)[0])]:
        p=ptx+f'\n// {rep} {k}\n'.encode()+b'\0'
        dt=fn(p); add(k,dt) if rep else None
    if rep==1:
        p=ptx+b'\0'
        _,a=ptxas(p,arch); _,b=drv_link(p)
        open(f'{out}/jl_{bs}.cubin','wb').write(a); open(f'{out}/drv_{bs}.cubin','wb').write(b); open(f'{out}/full_{bs}.cubin','wb').write(full)
for k,v in res.items():
    print(f'  {k:32s} median {statistics.median(v):7.2f}  min {min(v):7.2f}  n={len(v)}')
