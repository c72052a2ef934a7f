# The share of a kernel's perf samples in innermost loops that hold a division (vdivps / vdivss), as loopmap.py
# assigns samples: python divshare.py KERNEL.asm KERNEL.samples (objdump -d; perf report --dsos K.so --sort sym lines).
import re, sys, collections
asm, samples = sys.argv[1], sys.argv[2]
addr=[]; ins=[]
for l in open(asm):
    m=re.match(r"\s+([0-9a-f]+):\s+(.*)", l)
    if m: addr.append(int(m.group(1),16)); ins.append(m.group(2).strip())
idx={a:i for i,a in enumerate(addr)}
loops=[]
for i,t in enumerate(ins):
    m=re.match(r"j\w+\s+([0-9a-f]+) ", t)
    if m:
        tgt=int(m.group(1),16)
        if tgt < addr[i] and tgt in idx: loops.append((tgt, addr[i]))
share=collections.Counter(); tot=0
for l in open(samples):
    p,a=l.split()
    if not a.startswith("0x"): continue
    a=int(a,16); p=float(p); tot+=p
    inner=[L for L in loops if L[0] <= a <= L[1]]
    if inner: share[min(inner, key=lambda L: L[1]-L[0])]+=p
d = 0; rows = []
for (s,e),p in share.items():
    body=ins[idx[s]:idx[e]+1]; nd = sum('vdivps' in b or 'vdivss' in b for b in body)
    if nd: d += p; rows.append((p, s, e, nd, len(body)))
print(f"loops with a division: {100*d/tot:.1f}% of the kernel")
for p, s, e, nd, n in sorted(rows, reverse=True)[:8]: print(f"  {s:#x}-{e:#x} {100*p/tot:.1f}% divs {nd} instr {n}")
