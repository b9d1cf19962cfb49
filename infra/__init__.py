"""Infrastructure of the recipe: typed configs, the stage driver, backends, sandbox and the `rufus` CLI."""

import os

# MKL's strict conditional-numerical-reproducibility mode: a GEMM gives the same bits at any thread count.
# Without it, MKL's AVX-512 kernels split the weight-gradient reduction across two threads, so 1 and 2
# threads drift apart in the last bits after one step (measured; tests/test_thread_determinism.py). MKL reads
# this at its first call, so it is set when the package is imported, before any model runs.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
