"""Where a cold per-kernel LTO link of the matmul spends its time, against
NVRTC from source with the literal (the GPU bench's baseline), block sizes
interleaved; needs no GPU. Options that would shorten the link are tried
beside it, and their cubins compared with the plain link's.

Usage (BENCHMARKS.md, round 8):
  ptxspec compile --lto -o DIR kernels/matmul.cu
  CUDA_CACHE_DISABLE=1 NVJITLINK=... NVRTC=... python3 stages.py DIR [label]
ARCH (90), BLOCKS (1,...,7), REPS (3) and VARIANTS (extra variants:
fast-compile) change what runs."""
import sys, os, statistics
sys.path.insert(0,os.path.dirname(__file__)); from nvlib import *
d=sys.argv[1]; label=sys.argv[2] if len(sys.argv)>2 else d
arch=int(os.environ.get('ARCH','90'))
sym,align=symbol(d,'matmul'); us=units(d,'matmul')
src=open(os.path.join(os.path.dirname(os.path.abspath(__file__)),'../../kernels/matmul.cu')).read()
src=src.replace('#include "ptxspec.cuh"','namespace ptxspec { struct kernel_handler { const void *p; }; }').replace('PTXSPEC_SPECIALIZATION_ID(block_size_id, int, 16);','')
base=link_options(arch)
variants={'link':base,'link split0':base+['-split-compile=0'],'link split4':base+['-split-compile=4'],'nvvm only (-ptx)':base+['-ptx']}
if 'fast-compile' in os.environ.get('VARIANTS',''):
    # ptxas's fast-compile levels conflict with -O3.
    no_o3=[o for o in base if o!='-O3']
    variants['link ptxas -Ofc=min']=no_o3+['-Xptxas=-Ofc=min']
    variants['link ptxas -Ofc=mid']=no_o3+['-Xptxas=-Ofc=mid']
blocks=[int(x) for x in os.environ.get('BLOCKS','1,2,3,4,5,6,7').split(',')]
reps=int(os.environ.get('REPS','3'))
res={}; cub={}
def add(k,v): res.setdefault(k,[]).append(v)
for rep in range(reps+1):
  for bs in blocks:
    dt,defs=defs_ltoir(sym,align,bs,arch)
    if rep: add('definitions (NVRTC)*',dt)
    inputs=link_inputs(us,defs)
    for k,o in variants.items():
        dt,out=link(inputs,o,want_ptx=k.startswith('nvvm'))
        if rep: add(k,dt)
        cub[(k,bs)]=out
    ptx=cub[('nvvm only (-ptx)',bs)].rstrip(b'\0')+f'\n// {rep}\n'.encode()+b'\0'
    dt,_=ptxas(ptx,arch)
    if rep: add('ptxas only (PTX input)',dt)
    s=src.replace('h.get_specialization_constant<block_size_id>()',str(bs))+f'\n// {rep}\n'
    dt,_=nvrtc_compile(s.encode(),b'matmul_literal.cu',['-std=c++17',f'-arch=sm_{arch}'],'CUBIN')
    if rep: add('NVRTC literal -> cubin',dt)
print(f'== {label}: {len(blocks)} block sizes x {reps} (first round dropped), ms; *ptxspec compiles the definitions with libNVVM where found (under 1 ms), NVRTC here')
nv=statistics.median(res['NVRTC literal -> cubin'])
for k,v in res.items():
    m=statistics.median(v)
    print(f'  {k:26s} median {m:7.2f}  min {min(v):7.2f}  /NVRTC {m/nv:.3f}')
for k in [v for v in variants if v.startswith('link ')]:
    same=all(cub[(k,bs)]==cub[('link',bs)] for bs in blocks)
    print(f'  {k}: cubins identical to the plain link\'s: {same}')
