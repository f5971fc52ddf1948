"""Importers: problems of other kernel benchmarks turned into eat target folders.

kernelbench (a Model file), gpumode (a reference-kernels task folder), flashinfer_bench (a
Definition JSON and its workloads). Each writes a Python target (language "pytorch") through
`common.write_target`, which refuses to touch an existing non-empty folder.
"""
