"""A jailed AppWorld worker's outbox holds one file of at most ``max_state_bytes`` on the host (issue 37 item 2).

Before: the outbox was a writable host folder and only each file was capped (RLIMIT_FSIZE), so a fork's escaped
code wrote 6 x 200 MB there in 0.9 s (1.26 GB on the host until the fork was discarded); the jail's own root and
``/dev`` were writable tmpfs with no size cap.  These tests run the jail of :func:`jail_argv` with this
interpreter instead of AppWorld's (no AppWorld venv needed; bubblewrap is).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_support import require_bwrap

from agentspec.errors import SnapshotError
from envs.appworld.isolated import STATE, copy_out, empty_outbox, jail_argv, make_home

LIMIT = 4 * 2**20

# What an escaped fork does: six big files into its outbox, its state past the cap, and big files wherever else
# it may write.  Prints how each ended.
FILL = """
import os
def fill(path, size):
    written = 0
    try:
        with open(path, "wb", buffering=0) as fh:
            while written < size:
                written += fh.write(b"z" * min(2**20, size - written))
        print(path, "wrote", written)
    except OSError as exc:
        print(path, "stopped at", written, exc.strerror)
for i in range(6):
    fill(f"/outbox/extra{i}", 20 * 2**20)
fill("/outbox/state", 2 * LIMIT)
for path in ("/big", "/dev/big", "/dev/shm/big", "/tmp/big", "/appworld/big"):
    fill(path, 2 * LIMIT)
print("outbox:", sorted(os.listdir("/outbox")))
"""


def run_jailed(tmp_path: Path, code: str) -> tuple[Path, str]:
    """Run ``code`` in the worker's jail (this interpreter in place of AppWorld's); (the worker's home, output)."""
    require_bwrap()
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    home = tmp_path / "worker-1"
    make_home(home)
    (tmp_path / "data").mkdir()
    argv = jail_argv(bwrap, Path(sys.executable), tmp_path / "data", home, max_file_bytes=LIMIT)
    assert argv[-1] == "/agentspec/worker.py"
    done = subprocess.run([*argv[:-1], "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return home, done.stdout


def test_a_forks_outbox_holds_one_file_of_at_most_the_cap_on_the_host(tmp_path: Path) -> None:
    home, said = run_jailed(tmp_path, FILL.replace("LIMIT", str(LIMIT)))
    for i in range(6):
        assert f"/outbox/extra{i} stopped at 0 Read-only file system" in said, said
    assert f"/outbox/state stopped at {LIMIT} File too large" in said, said
    assert "outbox: ['state']" in said, said
    # Everything the jail left on the host, in its outbox: the one file, at the cap.
    left = {path.name: path.stat().st_size for path in (home / "outbox").iterdir()}
    assert left == {"state": LIMIT}
    # Nor can it write big files anywhere else: its root and /dev are read-only, the rest is capped.
    assert "/big stopped at 0 Read-only file system" in said, said
    assert "/dev/big stopped at 0 Read-only file system" in said, said
    for path in ("/dev/shm/big", "/tmp/big", "/appworld/big"):
        assert f"{path} stopped at {LIMIT} File too large" in said, said


def test_the_state_file_is_emptied_when_copied_out_or_refused(tmp_path: Path) -> None:
    """Nothing of a state stays on the host once copied (the jail's next save writes the same, bound, file), and
    nothing of one over the cap stays at all."""
    make_home(tmp_path / "w")
    outbox = tmp_path / "w" / "outbox"
    (outbox / STATE).write_bytes(b"x" * 100)
    with pytest.raises(SnapshotError, match="over 64 bytes"):
        copy_out(outbox, tmp_path / "snapshot-1", limit=64)
    assert not (tmp_path / "snapshot-1").exists() and (outbox / STATE).stat().st_size == 0
    (outbox / STATE).write_bytes(b"y" * 100)
    inode = (outbox / STATE).stat().st_ino
    copy_out(outbox, tmp_path / "snapshot-2", limit=100)
    assert (tmp_path / "snapshot-2").read_bytes() == b"y" * 100
    assert (outbox / STATE).stat().st_size == 0 and (outbox / STATE).stat().st_ino == inode  # the same file
    (outbox / STATE).write_bytes(b"z" * 10)
    assert empty_outbox(outbox) == 10 and (outbox / STATE).stat().st_size == 0
    os.unlink(outbox / STATE)
    os.symlink(tmp_path / "snapshot-2", outbox / STATE)
    assert empty_outbox(outbox) == 0 and (tmp_path / "snapshot-2").read_bytes() == b"y" * 100  # links not followed


def test_a_worker_home_starts_with_an_empty_state_file(tmp_path: Path) -> None:
    make_home(tmp_path / "w")
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["inbox", "outbox"]
    state = tmp_path / "w" / "outbox" / STATE
    assert state.is_file() and not state.is_symlink() and state.stat().st_size == 0
    assert state.stat().st_mode & 0o777 == 0o600
