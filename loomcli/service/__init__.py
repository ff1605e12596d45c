"""The compile service: one request through the front end, the pipeline and emission.

Kept free of imports so that a light caller (the no-op build, the project
reader) can reach `loomcli.service.fingerprint` without loading the compiler.
"""
