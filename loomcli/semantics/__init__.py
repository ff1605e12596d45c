"""The language's meaning on constants, below every stage that needs it.

`fold` (the exact semantics of each op on constants), `evaluate` (running
pure regions with those folders) and `launch` (running a kernel's
launch-config region) serve the canonicalizer, the target checks, the
emitters, launch-eval and the reference interpreter alike, so they cannot
disagree. This package imports only `ir` and `diagnostics`.
"""
