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
        if tgt < addr[i] and tgt in idx:
            loops.append((tgt, addr[i]))
share=collections.Counter(); other=0.0; tot=0.0
for l in open(samples):
    p,a=l.split()
    if not a.startswith("0x"): continue
    a=int(a,16); p=float(p); tot+=p
    inner=[L for L in loops if L[0] <= a <= L[1]]
    if inner:
        share[min(inner, key=lambda L: L[1]-L[0])]+=p
    else: other+=p
print(f"total {tot:.1f}%, outside loops {other:.1f}%")
with_fma = sum(p for (s_, e_), p in share.items() if any('vfmadd' in b for b in ins[idx[s_]:idx[e_] + 1]))
print(f"in an innermost loop with an FMA: {100 * with_fma / tot:.1f}% of the kernel's samples (all loops, not only those below)")
# (2026-12-07, evening) the loops without an FMA split: those that build vectors element by element (inserts, extracts,
# gathers) and the rest; a bf16 kernel's vdpbf16ps counts as an FMA when its asm has it renamed vfmadd_bf (sed)
built = sum(p for (s_, e_), p in share.items() if not any('vfmadd' in b for b in ins[idx[s_]:idx[e_] + 1])
            and any(k in b for b in ins[idx[s_]:idx[e_] + 1] for k in ('vinsertps', 'vpextrd', 'gather')))
print(f"in an FMA-free innermost loop with inserts, extracts or gathers: {100 * built / tot:.1f}%; other FMA-free: "
      f"{100 * (tot - other - with_fma - built) / tot:.1f}%")
for (s,e),p in share.most_common(30):
    body=ins[idx[s]:idx[e]+1]
    fma=sum('vfmadd' in b for b in body); vec=sum(('zmm' in b or 'ymm' in b) for b in body)
    print(f"{s:#x}-{e:#x} {p:5.2f}% ({100*p/tot:4.1f}% of kernel) instr {len(body):4d} fma {fma:3d} vec {vec:3d} scalar-ss {sum('ss ' in b for b in body)}")
