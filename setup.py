"""cortex_tvm: a compiler for recursive deep-learning models, as an extension of Apache TVM."""
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))

setup(
    name="cortex_tvm",
    version="0.1.0",
    description="CORTEX-style compiler for recursive models (TreeLSTM, TreeFC, ...) on Apache TVM",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    package_dir={"": "python", "cortex_tvm.schedules": "schedules", "cortex_tvm.tuning_data": "tuning"},
    packages=find_packages("python") + ["cortex_tvm.schedules", "cortex_tvm.tuning_data"],
    package_data={
        "cortex_tvm.data": ["sst_dev.txt", "ud_sample.conllu"],
        "cortex_tvm.schedules": ["*.json"],
        "cortex_tvm.tuning_data": ["*.jsonl", "*.json"],
    },
    install_requires=[
        "apache-tvm==0.27.0.post1",
        # 0.1.15.post2 segfaults when serializing TIR (tvm::ffi::ToJSONGraph)
        "apache-tvm-ffi==0.1.14.post0",
        "numpy",
        "xgboost",
        "psutil",
        "cloudpickle",
    ],
    extras_require={
        # notebooks are executed by the tests, so their kernel and plotting come with them
        # torch pinned to the CPU build the machines hold on disk (an unpinned torch pulls a
        # CUDA build of several GB): the interop, alias and PyTorch-reference tests run in CI
        "test": ["pytest", "hypothesis", "nbclient", "nbformat", "ipykernel", "matplotlib", "torch==2.13.0"],
        "notebooks": ["jupyterlab", "matplotlib", "ipykernel"],
        "torch": ["torch==2.13.0"],
    },
    entry_points={"console_scripts": ["cortex-tvm=cortex_tvm.cli:main"]},
)
