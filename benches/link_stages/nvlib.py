"""ctypes access to nvJitLink and NVRTC, and the two files of a ptxspec
device image a link needs (the .prop's LTO symbol, the .ltoir's units), for
the link-stage diagnostics beside this file. NVJITLINK and NVRTC name the
libraries (source ci/install-nvidia-tools.sh: $PTXSPEC_NVJITLINK,
$PTXSPEC_NVRTC; on a CUDA machine /usr/local/cuda/lib64/...).

Diagnostics, not the product: ptxspec's own bindings are
crates/ptxspec-core/src/toolkit. Timings are milliseconds from create to
complete (nvJitLink compiles PTX inputs as they are added)."""
import ctypes, os, sys, time, struct, statistics, glob
T=b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
def b64(s):
    out=bytearray()
    for g in range(0,len(s),4):
        grp=s[g:g+4]; v=0
        for i,c in enumerate(grp): v|=T.index(c.encode())<<(6*i)
        out+=v.to_bytes(4,'little')[:len(grp)*6//8]
    return bytes(out)
def symbol(d, stem):
    lines=open(f'{d}/{stem}.prop').read().splitlines()
    i=lines.index('[ptxspec/lto symbols]')
    raw=b64(lines[i+1].split('|',1)[1])[8:]
    align,n=struct.unpack_from('<II',raw,0)
    return raw[8:8+n].decode(), align
def units(d, stem):
    b=open(f'{d}/{stem}.ltoir','rb').read()
    assert b[:16]==b"PTXSPEC-LTOIR\0\0\0"
    ver,cnt=struct.unpack_from('<II',b,16); o=24; us=[]
    for _ in range(cnt):
        (nl,)=struct.unpack_from('<I',b,o); o+=4; name=b[o:o+nl].decode(); o+=nl
        (ln,)=struct.unpack_from('<Q',b,o); o+=8; us.append((name,b[o:o+ln])); o+=ln
    return us
jl=ctypes.CDLL(os.environ['NVJITLINK'])
nvrtc=ctypes.CDLL(os.environ['NVRTC'])
def f(n):
    for cand in [f'nvJitLink{n}']+[f'__nvJitLink{n}_{a}_{b}' for a in (13,12) for b in range(9,-1,-1)]:
        try: return getattr(jl,cand)
        except AttributeError: pass
    raise Exception(n)
def nvrtc_compile(src, name, opts, what):
    p=ctypes.c_void_p()
    t0=time.perf_counter()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(p),src,name,0,None,None)==0
    arr=(ctypes.c_char_p*len(opts))(*[o.encode() for o in opts])
    r=nvrtc.nvrtcCompileProgram(p,len(opts),arr)
    if r!=0:
        n=ctypes.c_size_t(); nvrtc.nvrtcGetProgramLogSize(p,ctypes.byref(n)); b=ctypes.create_string_buffer(n.value); nvrtc.nvrtcGetProgramLog(p,b); raise Exception(b.value.decode())
    n=ctypes.c_size_t(); getattr(nvrtc,f'nvrtcGet{what}Size')(p,ctypes.byref(n))
    buf=ctypes.create_string_buffer(n.value); getattr(nvrtc,f'nvrtcGet{what}')(p,buf)
    dt=time.perf_counter()-t0
    nvrtc.nvrtcDestroyProgram(ctypes.byref(p))
    return dt*1e3, buf.raw
def defs_ltoir(sym, align, val, arch):
    src=f'extern "C" __device__ __align__({align}) const unsigned char {sym}[4] = {{{",".join(str(x) for x in struct.pack("<i",val))}}};\n'.encode()
    return nvrtc_compile(src,b"d.cu",["-rdc=true","-dlto",f"-arch=compute_{arch}"],'LTOIR')
def link(inputs, opts, want_ptx=False):
    t0=time.perf_counter(); h=ctypes.c_void_p()
    arr=(ctypes.c_char_p*len(opts))(*[o.encode() for o in opts])
    r=f('Create')(ctypes.byref(h),len(opts),arr); assert r==0,(r,opts)
    for kind,name,data in inputs:
        r=f('AddData')(h,kind,data,len(data),name.encode()); assert r==0,r
    r=f('Complete')(h); dt=time.perf_counter()-t0
    if r!=0:
        n=ctypes.c_size_t(); f('GetErrorLogSize')(h,ctypes.byref(n)); b=ctypes.create_string_buffer(n.value+1); f('GetErrorLog')(h,b); raise Exception(b.value.decode())
    n=ctypes.c_size_t()
    what='Ptx' if want_ptx else 'Cubin'
    f(f'GetLinked{what}Size')(h,ctypes.byref(n)); b=ctypes.create_string_buffer(n.value); f(f'GetLinked{what}')(h,b)
    f('Destroy')(ctypes.byref(h))
    return dt*1e3, b.raw

# nvJitLink's input kinds.
PTX, LTOIR = 2, 3

def link_options(arch):
    """What ptxspec links a kernel of the matmul image alone with
    (crates/ptxspec-core/src/lto: -kernels-used with a second name that
    matches nothing, so that `matmul` does not keep `matmul_rolled`)."""
    return [f'-arch=sm_{arch}','-lto','-O3','-kernels-used=matmul,ptxspec.no.kernel.has.this.name']

def link_inputs(units, defs):
    """The image's LTO-IR units and the definitions' LTO-IR, as link() takes them."""
    return [(LTOIR,name,ir) for name,ir in units]+[(LTOIR,'defs',defs)]

def ptxas(ptx, arch):
    """nvJitLink compiling `ptx` (NUL-terminated) alone: the link's ptxas stage."""
    return link([(PTX,'k.ptx',ptx)],[f'-arch=sm_{arch}','-O3'])
