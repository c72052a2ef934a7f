# Which loop the other thread runs while one thread waits (in the kernel or TVM's runtime: the pool's sched_yield), from a
# perf record -F 8000 -e cpu-clock --timestamps of ../../bench-2026-12-06/intel-optim/forward_perf.py both (vjp and pullback, batch 25,
# the level pass exported to /tmp/q/{forward,backward}.so): perf script -F tid,time,ip,sym,dso > tl.txt, objdump -d of both
# .so into fwd.asm / bwd.asm; BASE: the two .so's load addresses from perf script --show-mmap-events (this run's).
import re, collections, bisect
def loops_of(asm):
    addr=[]; ins=[]
    for l in open(asm):
        m=re.match(r"\s+([0-9a-f]+):\s+(.*)", l)
        if m: addr.append(int(m.group(1),16)); ins.append(m.group(2).strip())
    idx={a:i for i,a in enumerate(addr)}; loops=[]
    for i,t in enumerate(ins):
        m=re.match(r"j\w+\s+([0-9a-f]+) ", t)
        if m:
            tgt=int(m.group(1),16)
            if tgt < addr[i] and tgt in idx: loops.append((tgt, addr[i]))
    return loops
L={"forward.so": loops_of("fwd.asm"), "backward.so": loops_of("bwd.asm")}
BASE={"backward.so": 0x7f07a1f1f000-0x1000, "forward.so": 0x7f07a1f5f000-0x1000}
def where(dso, ip):
    if dso not in L: return dso
    ip -= BASE[dso]
    inner=[x for x in L[dso] if x[0] <= ip <= x[1]]
    if not inner: return dso+":outside"
    s,e=min(inner, key=lambda x: x[1]-x[0]); return f"{dso[:3]}:{s:#x}"
rows=[]
for line in open("tl.txt"):
    p=line.split()
    tid=int(p[0]); t=float(p[1].rstrip(":")); ip=int(p[2],16); dso=p[-1].strip("()").split("/")[-1]; sym=p[3] if len(p)>4 else ""
    rows.append((t,tid,ip,dso,sym))
tids=collections.Counter(r[1] for r in rows); main,worker=[t for t,_ in tids.most_common(2)]
main=min(main,worker); worker=max(tids.most_common(2)[0][0], tids.most_common(2)[1][0])
by={main:[],worker:[]}
for r in rows:
    if r[1] in by: by[r[1]].append(r)
def waiting(r): return r[3]=="[kernel.kallsyms]" or "libtvm" in r[3]
for me, other in ((main, worker), (worker, main)):
    ot=[r[0] for r in by[other]]
    c=collections.Counter(); n=0
    for r in by[me]:
        if not waiting(r): continue
        j=bisect.bisect_left(ot, r[0]); cand=[by[other][k] for k in (j-1,j) if 0<=k<len(ot)]
        o=min(cand, key=lambda x: abs(x[0]-r[0]))
        if abs(o[0]-r[0])>0.0005: continue
        if waiting(o): c["(other waiting too)"]+=1; continue
        c[where(o[3],o[2])]+=1; n+=1
    tot=len(by[me])
    print(f"tid {me} ({'main' if me==main else 'worker'}): {tot} samples; waiting while the other runs code: {n} ({100*n/tot:.1f}%)")
    for k,v in c.most_common(14): print(f"   {v:6d}  {k}")
