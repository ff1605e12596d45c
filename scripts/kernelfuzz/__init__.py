"""The differential kernel fuzzer behind scripts/fuzz_kernels.py: one module
per family of generated kernels (scalar, collective: barrier and reduce,
atomic, vector, template, command), the devices they run on (devices), the
reference runs and judging (runner), the comparison and its documented
filters (compare), the reducer (reduce) and the campaign (campaign)."""
