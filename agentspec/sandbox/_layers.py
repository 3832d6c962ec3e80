"""Directory trees as overlayfs layers: merging layers in user space, copying and removing trees.

An overlayfs upper directory records deletions as *whiteouts* (0/0 character
devices) and replaced directories as *opaque* directories (an xattr).  Used as
a lower layer it keeps that meaning, which is what lets a frozen upper become
a snapshot layer.  :func:`merge_layers` folds a stack of such layers into one
equivalent layer, so stacks stay shallow without copying the base.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import anyio

from agentspec.errors import SnapshotError


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(path: str, xattr: str) -> bool:
    try:
        return os.getxattr(path, xattr, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _merge_into(src: str, dst: str, xattr: str) -> None:
    for entry in os.scandir(src):
        target = os.path.join(dst, entry.name)
        st = entry.stat(follow_symlinks=False)
        if _is_whiteout(st):
            _remove(target)
            os.mknod(target, stat.S_IFCHR, os.makedev(0, 0))
        elif entry.is_dir(follow_symlinks=False):
            existed = os.path.lexists(target)
            merges = existed and os.path.isdir(target) and not os.path.islink(target)
            opaque = _is_opaque(entry.path, xattr)
            if opaque or not merges:
                _remove(target)
                os.mkdir(target)
                # A directory over a whiteout or a file hides what lies below: keep it opaque.
                if opaque or existed:
                    os.setxattr(target, xattr, b"y", follow_symlinks=False)
            shutil.copystat(entry.path, target, follow_symlinks=False)
            _merge_into(entry.path, target, xattr)
        else:
            _remove(target)
            shutil.copy2(entry.path, target, follow_symlinks=False)


def merge_layers(layers: list[Path], dest: Path, xattr: str = "trusted.overlay.opaque") -> None:
    """Write into the empty ``dest`` one layer equivalent to ``layers`` (lowest first) stacked."""
    for layer in layers:
        _merge_into(str(layer), str(dest), xattr)


async def copy_tree(src: Path, dst: Path) -> None:
    """Copy the contents of ``src`` into the existing directory ``dst`` (``cp -a``: fastest on tmpfs)."""
    result = await anyio.run_process(["cp", "-a", "--reflink=auto", f"{src}/.", str(dst)], check=False)
    if result.returncode != 0:
        raise SnapshotError(f"copying {src} failed: {result.stderr.decode(errors='replace').strip()}")


def remove_tree(path: Path) -> None:
    """Delete a tree, ignoring what is already gone (blocking: call through a worker thread)."""
    shutil.rmtree(path, ignore_errors=True)
