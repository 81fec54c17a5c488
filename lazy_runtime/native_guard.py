"""The lazy device's guard in C++ (``native/device_guard.cpp``), built once per torch
install with the machine's C++ compiler and cached; torch's Python guard where it cannot
be built.

Why: torch's Python backend registration guards the device with a Python object, and
torch asks it about the device and stream on every autograd node it makes and around
every backward call (two to four calls into Python per backward op; 0.94-1.02x of a
traced step's Python time with it, benchmarks/device_guard.py). Worse, while an
exception unwinds through autograd's engine those calls abort the process (``terminate
called without an active exception``); with the C++ guard the exception reaches the
caller as on the CPU.

A second library registers the device's hooks (``native/device_hooks.cpp``), for
``pin_memory()``: torch takes the lazy device for the process's accelerator and asks it
for pinned memory, which torch's Python hooks cannot give (``DataLoader(pin_memory=True)``
failed). It is built apart, so that the guard stands where it cannot be.

``LAZY_RUNTIME_NATIVE_GUARD=0`` keeps torch's Python guard (and hooks). ``LAZY_RUNTIME_CACHE_DIR``
names where the built library is kept (default ``~/.cache/lazy_runtime``, else a private
folder in the temporary directory). The build takes about a second, once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

from .config import cache_folder, env_flag

SOURCE = Path(__file__).resolve().parent / "native" / "device_guard.cpp"
HOOKS_SOURCE = SOURCE.with_name("device_hooks.cpp")
NATIVE = "native"
# What serves the device's hooks (pinned memory): "native", or "python (why)".
HOOKS = ["python (not installed)"]


class BuildError(Exception):
    """The guard library could not be built (no compiler, no writable folder, an error)."""


def install() -> str:
    """Register the C++ guard for PrivateUse1 if it can be built and nothing guards the
    device yet, then the C++ hooks (``HOOKS`` says how that went). Returns what guards it:
    ``"native"``, or ``"python (why)"`` (then torch's Python guard, registered by the
    caller), or ``"another (...)"``."""
    if not env_flag("LAZY_RUNTIME_NATIVE_GUARD", True):
        HOOKS[0] = "python (LAZY_RUNTIME_NATIVE_GUARD=0)"
        return "python (LAZY_RUNTIME_NATIVE_GUARD=0)"
    try:
        lib = _load()
    except (BuildError, OSError) as e:
        HOOKS[0] = "python (no C++ guard)"
        return f"python (the C++ guard could not be built or loaded: {e})"
    if lib.lazy_runtime_register_device_guard() != 1:
        HOOKS[0] = "another (PrivateUse1 already had a guard)"
        return "another (PrivateUse1 already had a guard: left as it was)"
    HOOKS[0] = _install_hooks()
    return NATIVE


def _install_hooks() -> str:
    """The C++ hooks, from a library of their own: where they cannot be built (another
    torch's API), the guard stands and torch's Python hooks serve (no pinned memory)."""
    try:
        lib = _load(HOOKS_SOURCE, HOOKS_LIBS)
    except (BuildError, OSError) as e:
        return f"python (the C++ hooks could not be built or loaded: {e})"
    if lib.lazy_runtime_register_hooks() != 1:
        return "another (PrivateUse1 already had hooks: left as they were)"
    return NATIVE


GUARD_LIBS = ("-lc10",)
HOOKS_LIBS = ("-lc10", "-ltorch_cpu")


def _load(source: Path | None = None, libs=GUARD_LIBS) -> ctypes.CDLL:
    path = built_library(source, libs)
    try:
        return ctypes.CDLL(str(path))
    except OSError:   # a cached library that no longer loads (its torch changed in place)
        path.unlink(missing_ok=True)
        return ctypes.CDLL(str(built_library(source, libs)))


def _compiler() -> str:
    for cxx in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        path = shutil.which(cxx) if cxx else None
        if path:
            return path
    raise BuildError("no C++ compiler found (set CXX)")


def _flags(torch_dir: Path, libs) -> list[str]:
    lib = torch_dir / "lib"
    return ["-O2", "-std=c++17", "-shared", "-fPIC",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-I{torch_dir / 'include'}", f"-L{lib}", *libs, f"-Wl,-rpath,{lib}"]


def _cache_dirs() -> list[Path]:
    """The runtime's cache folder, and where none was named, a private one in the
    temporary directory after it."""
    if os.environ.get("LAZY_RUNTIME_CACHE_DIR"):
        return [Path(cache_folder())]
    return [Path(cache_folder()), Path(tempfile.gettempdir()) / f"lazy_runtime-{os.getuid()}"]


def private_dir(d: Path) -> bool:
    """Make ``d`` (mode 0700) if needed; whether it is ours to load a library from."""
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = d.stat()
    except OSError:
        return False
    # a shared folder (the temporary directory) could hold another user's library
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def built_library(source: Path | None = None, libs=GUARD_LIBS) -> Path:
    """The shared library of ``source`` (the guard's by default) for this torch and
    compiler, built if not cached."""
    source = source or SOURCE
    torch_dir = Path(torch.__file__).resolve().parent
    cxx = _compiler()
    flags = _flags(torch_dir, libs)
    key = hashlib.sha256("\0".join([source.read_text(), torch.__version__, str(torch_dir),
                                    cxx, *flags]).encode()).hexdigest()[:16]
    name = f"{source.stem}-{key}.so"
    dirs = [d for d in _cache_dirs() if private_dir(d)]
    for d in dirs:
        if (d / name).is_file():
            return d / name
    if not dirs:
        raise BuildError("no private writable cache folder (set LAZY_RUNTIME_CACHE_DIR)")
    out = dirs[0] / name
    tmp = dirs[0] / f".{name}.{os.getpid()}"   # then renamed: a concurrent build is harmless
    try:
        done = subprocess.run([cxx, str(source), "-o", str(tmp), *flags], capture_output=True,
                              text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"{cxx}: {e}") from None
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr[:200])
        raise BuildError(f"{cxx} failed: {first.strip()}")
    os.replace(tmp, out)
    return out
