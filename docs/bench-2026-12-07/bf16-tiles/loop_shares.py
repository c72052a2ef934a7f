# Each perf sample of forward.so / backward.so given to the innermost loop that holds it (a backward jump in the
# objdump), loops grouped as: with a vdpbf16ps/vfmadd ("fma"), with element-wise inserts/extracts or gathers
# ("gatherish"), other.  Usage: objdump -d --no-show-raw-insn X.so > /tmp/q/X.asm (vdpbf16ps renamed vfmadd_bf);
# perf report --dsos X.so --sort sym | awk ... > /tmp/q/X.samples ("percent address" lines); python loop_shares.py MIN%
import re, collections, sys
for p in ("forward","backward"):
    asm=open(f"/tmp/q/{p}.asm").read().splitlines()
    addr=[];ins=[]
    for l in asm:
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
    for l in open(f"/tmp/q/{p}.samples"):
        a,b=l.split()
        if not b.startswith("0x"): continue
        x=int(b,16); v=float(a); tot+=v
        inner=[L for L in loops if L[0]<=x<=L[1]]
        share[min(inner,key=lambda L:L[1]-L[0]) if inner else None]+=v
    cat=collections.Counter()
    print("==",p, "total", round(tot,1))
    for L,v in share.most_common():
        if L is None: cat["outside"]+=v; continue
        body=ins[idx[L[0]]:idx[L[1]]+1]
        f=sum('vfmadd' in b for b in body)
        g=sum('vinsertps' in b or 'vpextrd' in b or 'gather' in b for b in body)
        cat["fma" if f else ("gatherish" if g else "other")]+=v
        if 100*v/tot >= float(sys.argv[1]):
            print(f"  {L[0]:#x}-{L[1]:#x} {100*v/tot:4.1f}% n={len(body)} fma={f} gatherish={g} st={sum(b.startswith('vmov') and b.endswith(')') for b in body)}")
    print("  ", {k: round(100*v/tot,1) for k,v in cat.items()})
