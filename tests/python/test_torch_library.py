"""How the PyTorch package finds liboctet_c (python/octet/_lib.py, docs/pytorch.md "Finding
liboctet_c"): $OCTET_LIBRARY wins and is the only candidate when set; a missing library is an
octet.OctetError that names what was tried, raised at first use (importing octet.torch works
without the library); the loaded copy passes the C ABI version check."""
import os
import subprocess
import sys

import octet_torch_util  # noqa: F401  (puts python/ on the path)
import octet

SNIPPET = """
import octet, octet.torch
try:
    print(octet.library_path())
except octet.OctetError as e:
    print("OctetError:", e)
"""


def run_with(library):
    env = dict(os.environ, OCTET_LIBRARY=library,
               PYTHONPATH=os.path.dirname(os.path.dirname(octet.__file__)))
    r = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_explicit_library_is_used():
    path = octet.library_path()
    assert os.path.exists(path)
    if "OCTET_LIBRARY" in os.environ:
        assert path == os.environ["OCTET_LIBRARY"]


def test_missing_library_is_named():
    out = run_with("/nonexistent/liboctet_c.so")
    assert out.startswith("OctetError: cannot load liboctet_c: set OCTET_LIBRARY"), out
    assert "/nonexistent/liboctet_c.so" in out
