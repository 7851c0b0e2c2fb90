"""How the PyTorch package finds liboctet_c (python/octet/_lib.py, docs/pytorch.md "Finding
liboctet_c"): $OCTET_LIBRARY wins and is the only candidate when set; a missing library is an
octet.OctetError that names what was tried and which build folders held no library, raised at
first use (importing octet.torch works without the library); the loaded copy passes the C ABI
version check."""
import os
import shutil
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


def test_a_library_that_is_not_octets_is_named():
    """A shared library without octet's symbols (here the C math library) is an OctetError naming
    it, not an AttributeError from ctypes."""
    import ctypes.util
    libm = ctypes.util.find_library("m")
    assert libm, "no libm to load"
    out = run_with(libm)
    assert out.startswith(f"OctetError: {libm} is not octet's C library"), out


def test_build_folders_without_a_library_are_named(tmp_path):
    # a copy of the package outside any checkout, and an empty OCTET_HOME: no build folder holds
    # the library, and the error says where it looked
    shutil.copytree(os.path.dirname(octet.__file__), tmp_path / "python" / "octet")
    env = {k: v for k, v in os.environ.items() if k not in ("OCTET_LIBRARY", "LD_LIBRARY_PATH")}
    env.update(OCTET_HOME=str(tmp_path / "home"), PYTHONPATH=str(tmp_path / "python"))
    r = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert out.startswith("OctetError: cannot load liboctet_c"), out
    for root in (tmp_path / "home", tmp_path):
        for preset in ("cuda", "release", "debug"):
            assert f"{root}/build/{preset}/liboctet_c.so" in out, out
