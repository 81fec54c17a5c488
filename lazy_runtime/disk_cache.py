"""Compiled executables kept between processes: JAX's persistent compilation cache, scoped
to the runtime's own compiles, in ``config.compile_cache``.

The cache's key is JAX's: the lowered program, the compile options, the device and the
jax/jaxlib versions, so an entry is only ever loaded for the program it was compiled
from. The user's own JAX code keeps its own settings (the directory is set only around
the runtime's compiles). JAX treats the directory as trusted (entries are executables):
it must be private to the user (made with mode 0700; another's, or one others may write
to, is not used), as the C++ guard's build folder.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from .config import config

# XLA compiles quicker than this are not worth a file (most of the runtime's take 0.3-1 s)
MIN_COMPILE_SECONDS = 0.1

_HITS = [0]            # JAX's cache hits seen, any compile's
_USABLE: dict = {}     # directory -> whether it could be made and written
_JAX: list = []        # JAX's (private) settings this relies on, once looked up


def compile_cached(compile_fn):
    """``compile_fn()`` with JAX's persistent cache in ``config.compile_cache`` (when set,
    writable, and this JAX has the settings); (its result, whether it was loaded from the
    disk instead of compiled)."""
    path = config.compile_cache
    settings = _settings() if path else None
    if settings is None or not _usable(path):
        return compile_fn(), False
    directory, min_seconds = settings
    before = _HITS[0]
    with directory(path), min_seconds(MIN_COMPILE_SECONDS):
        out = compile_fn()
    return out, _HITS[0] > before


def _settings():
    if not _JAX:
        try:
            from jax._src import config as jax_config, monitoring
            found = (jax_config.compilation_cache_dir,
                     jax_config.persistent_cache_min_compile_time_secs)
            monitoring.register_event_listener(_on_event)
        except (ImportError, AttributeError):   # (another JAX: compile without the cache)
            found = None
        _JAX.append(found)
    return _JAX[0]


def _on_event(event: str, **kwargs) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _HITS[0] += 1


def _usable(path: str) -> bool:
    ok = _USABLE.get(path)
    if ok is None:
        from .native_guard import private_dir
        ok = private_dir(Path(path)) and os.access(path, os.W_OK)
        if not ok:
            warnings.warn(f"lazy_runtime: the compile cache directory {path!r} cannot be "
                          "made, is not private to this user, or cannot be written: "
                          "compiling without a disk cache (set LAZY_RUNTIME_COMPILE_CACHE "
                          "to another directory, or off)", RuntimeWarning, stacklevel=4)
        _USABLE[path] = ok
    return ok
