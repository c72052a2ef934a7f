# compile(training=True)'s seconds in fresh processes: argv[1] a checkout's python/ folder (this one or an older
# commit's worktree), argv[2] "disk": with CORTEX_TVM_CACHE_DIR set to argv[3] (the first run fills it, a second
# one reads it).  Prints one JSON line per model: TreeLSTM x = 300, h = 150 (DGL's SST sizes) and TreeFC h = 150.
import json, os, subprocess, sys
SCRIPT = """
import json, time, cortex_tvm as ct
trees, vocab = ct.data.sst_sample()
for name, kw in (("treelstm", dict(embed_size=300)), ("treefc", {})):
    model = ct.models.BY_NAME[name](hidden_size=150, vocab_size=len(vocab), seed=0, **kw)
    start = time.perf_counter(); model.compile(training=True)
    print(json.dumps({"model": name, "compile_s": round(time.perf_counter() - start, 2),
                      "tvm_compiles": ct.compile_count()}), flush=True)
"""
env = {**os.environ, "PYTHONPATH": sys.argv[1]}
env.pop("CORTEX_TVM_CACHE_DIR", None)
if len(sys.argv) > 2 and sys.argv[2] == "disk":
    env["CORTEX_TVM_CACHE_DIR"] = sys.argv[3]
out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True).stdout
for line in out.splitlines():
    print(json.dumps({"python": sys.argv[1], "cache": env.get("CORTEX_TVM_CACHE_DIR"), **json.loads(line)}))
