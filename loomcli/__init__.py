"""Loom: an ahead-of-time compiler and packager for Loom GPU kernel programs."""

__version__ = "0.1.0"
