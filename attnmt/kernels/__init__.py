"""Fast paths: the same functions as the definitions in attnmt/attention/ and attnmt/models/,
computed faster on a CPU (or a GPU) — fused loops with a hand-written backward, packed, bfloat16
and int8 products, local attention's decoding path. Each module says in its docstring and its
``IMPLEMENTS`` which definitions it implements.

Kernels sit at floor 0 (ARCHITECTURE.md, "Layers"): the definitions call them, and they import
nothing of attnmt outside this package, so they name the definitions they implement as text.
"""
