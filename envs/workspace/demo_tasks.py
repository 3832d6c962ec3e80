"""The ``workspace-demo`` tasks: small file and code chores with their gold calls and final-file checks.

Each task is a :class:`WorkspaceTask`: the files the workspace starts with, an
instruction, the reference calls that solve it (read-only looks mixed with
mutating edits, so speculation meets both kinds), and :class:`FileCheck` s on
the files it must leave behind.  Everything is literal text, with no clock and
no randomness, so replaying the gold calls always ends in the same files::

    >>> task = TASKS[0]
    >>> task.id, len(task.gold) >= 4, task.checks[0].name
    ('ws-rename-config', True, 'config/app.ini content')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agentspec.types import ToolCall


@dataclass(frozen=True, slots=True)
class FileCheck:
    """One condition on a final file: its exact ``content``, a ``pattern`` it matches, or ``absent``.

    Exactly one of the three is set.  ``pattern`` is searched with
    :data:`re.MULTILINE`, so ``^`` anchors at any line.  ``absent`` holds when
    no file or directory of that name is left.
    """

    path: str
    content: str | None = None
    pattern: str | None = None
    absent: bool = False

    def __post_init__(self) -> None:
        given = (self.content is not None) + (self.pattern is not None) + self.absent
        if given != 1:
            raise ValueError(f"check on {self.path!r} must set exactly one of content, pattern, absent")
        if self.pattern is not None:
            re.compile(self.pattern)  # fail when the task is defined, not when it is scored

    @property
    def name(self) -> str:
        """How reports name the check, e.g. ``app.py content`` or ``logs/old absent``."""
        if self.absent:
            return f"{self.path} absent"
        if self.pattern is not None:
            return f"{self.path} matches {self.pattern}"
        return f"{self.path} content"


@dataclass(frozen=True, slots=True)
class WorkspaceTask:
    """A workspace-demo task: initial files, an instruction, gold calls and checks on the final files."""

    id: str
    instruction: str
    files: Mapping[str, str] = field(hash=False)
    """path (relative to the workspace root) -> text, written before the episode starts."""
    gold: tuple[ToolCall, ...]
    checks: tuple[FileCheck, ...]

    def __post_init__(self) -> None:
        # A read-only view: the task is a frozen value, and a caller mutating its files would change every episode.
        object.__setattr__(self, "files", MappingProxyType(dict(self.files)))


def _calls(*calls: tuple[str, dict[str, Any]]) -> tuple[ToolCall, ...]:
    # Stable ids: two runs of the gold script must produce identical trajectories.
    return tuple(ToolCall(name=name, arguments=args, id=f"gold_{i}") for i, (name, args) in enumerate(calls))


_SETTINGS = "[server]\nhost = localhost\nport = 8080\n"
_APP_OLD = (
    "import configparser\n\n"
    'CONFIG_PATH = "config/settings.ini"\n\n'
    "parser = configparser.ConfigParser()\n"
    "parser.read(CONFIG_PATH)\n"
)
_APP_NEW = _APP_OLD.replace("config/settings.ini", "config/app.ini")

_CALC_BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
_CALC_FIXED = _CALC_BUGGY.replace("a - b", "a + b")
_TEST_CALC = (
    "from calc import add, mul\n\n"
    "assert add(2, 3) == 5, add(2, 3)\n"
    "assert mul(4, 5) == 20, mul(4, 5)\n"
    'print("all tests passed")\n'
)

_MODULE_A = "def load():\n    # TODO: cache the parsed file\n    return open('data.txt').read()\n"
_MODULE_B = "import os\n\n\ndef main():\n    pass  # TODO: parse arguments\n    # TODO: report errors\n"
_TODO_MD = (
    "# TODO\n\n"
    "- src/a.py:2: cache the parsed file\n"
    "- src/util/b.py:5: parse arguments\n"
    "- src/util/b.py:6: report errors\n"
)

_SALES = "region,amount\nnorth,120\nsouth,75\neast,310\nwest,45\n"
_TOTAL_CODE = (
    "import csv\n\n"
    "with open('data/sales.csv', newline='') as fh:\n"
    "    total = sum(int(row['amount']) for row in csv.DictReader(fh))\n"
    "with open('data/total.txt', 'w') as fh:\n"
    "    fh.write('total=%d\\n' % total)\n"
    "print(total)\n"
)

_CHANGELOG_OLD = "# Changelog\n\n## 1.4.2\n\n- Fix the retry delay.\n"
_CHANGELOG_NEW = "# Changelog\n\n## 1.4.3\n\n- Bump the version.\n\n## 1.4.2\n\n- Fix the retry delay.\n"
_INIT_OLD = '"""The demo package."""\n\n__version__ = "1.4.2"\n'
_INIT_NEW = _INIT_OLD.replace("1.4.2", "1.4.3")

TASKS: tuple[WorkspaceTask, ...] = (
    WorkspaceTask(
        id="ws-rename-config",
        instruction=(
            "Rename config/settings.ini to config/app.ini (same content) and update every reference to the old "
            "path in the code. The old file must be gone."
        ),
        files={"config/settings.ini": _SETTINGS, "app.py": _APP_OLD, "README.md": "Run `python app.py`.\n"},
        gold=_calls(
            ("list_files", {"path": "config"}),
            ("read_file", {"path": "config/settings.ini"}),
            ("grep", {"pattern": "settings\\.ini"}),
            ("write_file", {"path": "config/app.ini", "content": _SETTINGS}),
            ("write_file", {"path": "app.py", "content": _APP_NEW}),
            ("delete_path", {"path": "config/settings.ini"}),
        ),
        checks=(
            FileCheck("config/app.ini", content=_SETTINGS),
            FileCheck("app.py", content=_APP_NEW),
            FileCheck("config/settings.ini", absent=True),
        ),
    ),
    WorkspaceTask(
        id="ws-fix-add",
        instruction=(
            "calc.add is wrong. Fix calc.py so that test_calc.py passes, then run `python3 -B test_calc.py` and "
            "save its standard output in test_output.txt."
        ),
        files={"calc.py": _CALC_BUGGY, "test_calc.py": _TEST_CALC},
        gold=_calls(
            ("read_file", {"path": "calc.py"}),
            ("read_file", {"path": "test_calc.py"}),
            ("write_file", {"path": "calc.py", "content": _CALC_FIXED}),
            ("run_shell", {"command": "python3 -B test_calc.py > test_output.txt"}),
        ),
        checks=(
            FileCheck("calc.py", pattern=r"return a \+ b"),
            FileCheck("test_output.txt", content="all tests passed\n"),
        ),
    ),
    WorkspaceTask(
        id="ws-todo-report",
        instruction=(
            "Collect every TODO comment under src/ into TODO.md: a '# TODO' heading, a blank line, then one line "
            "per comment in path order, '- PATH:LINE: TEXT' (TEXT after 'TODO: ')."
        ),
        files={"src/a.py": _MODULE_A, "src/util/b.py": _MODULE_B, "notes.txt": "TODO lists live in TODO.md\n"},
        gold=_calls(
            ("list_files", {"path": "src", "recursive": True}),
            ("grep", {"pattern": "TODO", "path": "src"}),
            ("write_file", {"path": "TODO.md", "content": _TODO_MD}),
            ("read_file", {"path": "TODO.md"}),
        ),
        checks=(FileCheck("TODO.md", content=_TODO_MD),),
    ),
    WorkspaceTask(
        id="ws-sales-total",
        instruction="Sum the amount column of data/sales.csv and write 'total=N' (one line) to data/total.txt.",
        files={"data/sales.csv": _SALES, "data/README": "Amounts are whole euros.\n"},
        gold=_calls(
            ("list_files", {"path": "data"}),
            ("read_file", {"path": "data/sales.csv"}),
            ("run_python", {"code": _TOTAL_CODE}),
            ("read_file", {"path": "data/total.txt"}),
        ),
        checks=(FileCheck("data/total.txt", content="total=550\n"), FileCheck("data/sales.csv", content=_SALES)),
    ),
    WorkspaceTask(
        id="ws-clean-logs",
        instruction="Delete the logs/old directory and every *.tmp file in the workspace; keep everything else.",
        files={
            "logs/app.log": "started\n",
            "logs/old/app.1.log": "old run\n",
            "logs/run.tmp": "partial\n",
            "cache.tmp": "scratch\n",
            "keep.txt": "keep me\n",
        },
        gold=_calls(
            ("list_files", {"recursive": True}),
            ("delete_path", {"path": "logs/old"}),
            ("run_shell", {"command": "find . -name '*.tmp' -type f -delete"}),
            ("list_files", {"path": "logs"}),
        ),
        checks=(
            FileCheck("logs/old", absent=True),
            FileCheck("logs/run.tmp", absent=True),
            FileCheck("cache.tmp", absent=True),
            FileCheck("logs/app.log", content="started\n"),
            FileCheck("keep.txt", content="keep me\n"),
        ),
    ),
    WorkspaceTask(
        id="ws-bump-version",
        instruction=(
            "Bump the version from 1.4.2 to 1.4.3 in VERSION and pkg/__init__.py, and add a '## 1.4.3' section "
            "with the entry '- Bump the version.' at the top of CHANGELOG.md."
        ),
        files={"VERSION": "1.4.2\n", "pkg/__init__.py": _INIT_OLD, "CHANGELOG.md": _CHANGELOG_OLD},
        gold=_calls(
            ("grep", {"pattern": "1\\.4\\.2"}),
            ("read_file", {"path": "CHANGELOG.md"}),
            ("write_file", {"path": "VERSION", "content": "1.4.3\n"}),
            ("write_file", {"path": "pkg/__init__.py", "content": _INIT_NEW}),
            ("write_file", {"path": "CHANGELOG.md", "content": _CHANGELOG_NEW}),
        ),
        checks=(
            FileCheck("VERSION", content="1.4.3\n"),
            FileCheck("pkg/__init__.py", pattern=r'^__version__ = "1\.4\.3"$'),
            FileCheck("CHANGELOG.md", pattern=r"\A# Changelog\n\n## 1\.4\.3\n\n- Bump the version\.\n"),
        ),
    ),
)
"""Every task, in the order the ``all`` split lists them (``small`` is the first two)."""
