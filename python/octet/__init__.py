"""octet: native FP8 training of LLMs. This package is the PyTorch layer (`octet.torch`) over
octet's C ABI library liboctet_c (docs/pytorch.md); `octet.library_path()` says which copy it loaded.
"""
from ._lib import OctetError, library_path

__all__ = ["OctetError", "library_path"]
