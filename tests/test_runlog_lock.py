"""The output folder's lock file is only ever a plain file of the run's own: a folder someone else prepared must not
make a run truncate or overwrite another file through it (a symlink or a hard link named ``.agentspec.lock``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentspec.errors import ConfigError
from agentspec.runtime.runlog.lock import LOCK_NAME, locked_out


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_a_lock_file_that_links_elsewhere_is_refused_and_its_target_untouched(tmp_path: Path, link: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data")
    out = tmp_path / "out"
    out.mkdir()
    if link == "symlink":
        (out / LOCK_NAME).symlink_to(victim)
    else:
        os.link(victim, out / LOCK_NAME)
    with pytest.raises(ConfigError, match="lock file"), locked_out(out):
        pass
    assert victim.read_text() == "precious data"


def test_a_plain_lock_file_names_its_holder(tmp_path: Path) -> None:
    with locked_out(tmp_path / "out") as out:
        assert f"pid {os.getpid()}" in (out / LOCK_NAME).read_text()
