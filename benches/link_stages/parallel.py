"""Links of several value sets at once: in threads of one process (nvJitLink
documents no thread safety: this only observes) and in processes, against
the same links one after the other; every cubin is compared with the
serial one. Usage: CUDA_CACHE_DISABLE=1 NVJITLINK=... NVRTC=... python3
parallel.py DIR [N] (DIR as for stages.py; N links at once, default 4)."""
import sys, os, statistics, threading, multiprocessing
sys.path.insert(0,os.path.dirname(__file__)); from nvlib import *
d=sys.argv[1]; n=int(sys.argv[2]) if len(sys.argv)>2 else 4
arch=int(os.environ.get('ARCH','90'))
sym,align=symbol(d,'matmul'); us=units(d,'matmul')
base=link_options(arch)
def inputs(bs):
    _,defs=defs_ltoir(sym,align,bs,arch)
    return link_inputs(us,defs)
def one(bs): return link(inputs(bs),base)[1]
def values(r, way):
    # New block sizes for each round and way, interleaved so that every way
    # gets sizes alike (the unroll, and so the link, grows with the size).
    return [r*3*n + way + 3*k + 1 for k in range(n)]
def timed(fn):
    t=time.perf_counter(); r=fn(); return (time.perf_counter()-t)*1e3, r
if __name__=='__main__':
    rounds=4; res={}
    for r in range(rounds+1):
        sets=values(r,0)
        ms,serial=timed(lambda: [one(b) for b in sets])
        if r: res.setdefault('serial',[]).append(ms)
        sets=values(r,1)
        ref=[one(b) for b in sets]
        out=[None]*n
        def work(i): out[i]=one(sets[i])
        def threads():
            ts=[threading.Thread(target=work,args=(i,)) for i in range(n)]
            [t.start() for t in ts]; [t.join() for t in ts]
        ms,_=timed(threads)
        if r: res.setdefault('threads',[]).append(ms)
        res.setdefault('threads: cubins as serial',[]).append(out==ref)
        sets=values(r,2)
        ref=[one(b) for b in sets]
        with multiprocessing.get_context('spawn').Pool(n) as pool:
            pool.map(one,[-1-i for i in range(n)])   # start and warm the processes (no loop to unroll)
            ms,got=timed(lambda: pool.map(one,sets))
        if r: res.setdefault('processes',[]).append(ms)
        res.setdefault('processes: cubins as serial',[]).append(got==ref)
    print(f'== {n} links of new value sets (matmul kernel alone), wall ms, {rounds} rounds (a first dropped)')
    for k,v in res.items():
        if isinstance(v[0],bool): print(f'  {k}: {all(v)}')
        else: print(f'  {k:10s} median {statistics.median(v):7.2f}  {[round(x,1) for x in v]}')
