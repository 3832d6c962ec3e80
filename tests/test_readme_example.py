"""The README as a newcomer uses it: its Python examples run as written, its commands parse, its links resolve."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from scripted_openai_server import ScriptedOpenAIServer

from agentspec.cli import build_parser
from agentspec.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
# Documents whose shell blocks a newcomer copies: the README and the experiments' write-ups.
DOCUMENTS = [README, *sorted((REPO / "experiments").glob("*.md"))]
TWO_COMMANDS = [
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/agentspec run --bench tau2-telecom "
    "--split base --agent oracle --data-dir ../shared/data/tau2 --out runs/oracle-base",
    ".venv/bin/python -m pytest",
]
SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "&"}


def example_code(name: str = "executor") -> str:
    """The README's ```python block marked ``<!-- example: NAME -->``."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- example: {name} -->\s*```python\n(.*?)```", text, re.S)
    assert match, f"README lost its {name} example"
    return match.group(1)


def shell_blocks(text: str) -> list[str]:
    """The bodies of the ```bash blocks of a markdown text, in order."""
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def agentspec_commands(block: str) -> list[list[str]]:
    """Each ``agentspec`` invocation of a shell block, as the argument list after ``agentspec``.

    Continuation lines are joined and comments dropped; a command ends at a shell
    operator (``|``, ``&&``, ``>``...), so ``... | head -3`` keeps only the agentspec part.
    """
    commands: list[list[str]] = []
    for line in block.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] | None = None
        for token in lexer:
            if token in SHELL_OPERATORS:
                current = None
            elif current is not None:
                current.append(token)
            elif token.endswith("bin/agentspec") or token == "agentspec":
                current = []
                commands.append(current)
    return commands


def documented_commands() -> list[tuple[str, list[str]]]:
    found = [
        (f"{doc.relative_to(REPO)}: agentspec {' '.join(argv)}", argv)
        for doc in DOCUMENTS
        for block in shell_blocks(doc.read_text(encoding="utf-8"))
        for argv in agentspec_commands(block)
    ]
    assert len(found) >= 5, "the README's shell blocks were not found"
    return found


def responder(request):
    """Scripted authority and speculator: add the note, list notes, answer."""
    done = sum(1 for m in request["messages"] if m["role"] == "tool")
    plan = [
        {"name": "add_note", "arguments": {"text": "buy milk"}},
        {"name": "list_notes", "arguments": {}},
        {"name": "done", "arguments": {"answer": "1 note"}},
    ]
    reply = {"tool_calls": [plan[min(done, 2)]]}
    if request["model"] == "authority":
        reply["delay_s"] = 0.2
    return reply


def test_readme_example_runs(monkeypatch, capsys):
    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        monkeypatch.setenv("AGENTSPEC_AGENT_BASE_URL", srv.base_url)
        monkeypatch.setenv("AGENTSPEC_AGENT_MODEL", "authority")
        monkeypatch.setenv("AGENTSPEC_SPECULATOR_BASE_URL", srv.base_url)
        monkeypatch.setenv("AGENTSPEC_SPECULATOR_MODEL", "speculator")
        exec(compile(example_code(), "README.md", "exec"), {"__name__": "readme_example"})
        tools_sent = {t["function"]["name"] for t in srv.requests[0]["tools"]}
    out = capsys.readouterr().out
    assert out.strip() == "1 note ['sa', 'sa'] ['buy milk']"
    # The README states what the example prints: keep the two in step.
    assert f"It prints `{out.strip()}`" in README.read_text(encoding="utf-8")
    assert tools_sent == {"add_note", "list_notes", "done"}


def test_readme_sandbox_example_runs(monkeypatch, capsys):
    """The sandbox example forks a real copy-mode workspace, runs a shell command confined, and commits it."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: the copy backend refuses to run tools without it")
    monkeypatch.chdir(REPO)  # the example seeds its workspace from the relative path "macros"
    exec(compile(example_code("sandbox"), "README.md", "exec"), {"__name__": "readme_sandbox_example"})
    shown = sorted(p.name for p in (REPO / "macros").iterdir())
    assert capsys.readouterr().out.strip() == str(sorted([*shown, "note.txt"]))
    assert not (REPO / "macros" / "note.txt").exists(), "the workspace wrote into its source"


def test_the_two_commands_come_first():
    """The first commands a newcomer meets are the two the README promises, exactly."""
    first = shell_blocks(README.read_text(encoding="utf-8"))[0]
    assert first.strip().splitlines() == TWO_COMMANDS


@pytest.mark.parametrize(("where", "argv"), documented_commands(), ids=lambda v: v if isinstance(v, str) else None)
def test_documented_command_parses(where, argv):
    """Every agentspec command shown in a shell block names real subcommands and flags."""
    try:
        build_parser().parse_args(argv)
    except (UsageError, SystemExit) as exc:
        pytest.fail(f"{where}\n  is rejected by the CLI: {exc}")


def test_documented_commands_write_under_runs():
    """Example commands write under runs/ (ignored by git), never over a tracked file such as macros/*.json."""
    outs = [(where, argv[argv.index("--out") + 1]) for where, argv in documented_commands() if "--out" in argv]
    assert outs, "no documented command writes anything"
    assert [(where, out) for where, out in outs if not out.startswith("runs/")] == []


def anchors_of(text: str) -> set[str]:
    """The link targets a markdown text defines: ``<a id>`` tags and GitHub's heading slugs."""
    ids = set(re.findall(r'<a id="([^"]+)">', text))
    return ids | {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: d.name)
def test_links_resolve(doc):
    """Relative links point at files of the checkout, and #anchors at an id or heading of the file they name."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists() or (anchor and anchor not in anchors_of(file.read_text(encoding="utf-8"))):
            broken.append(target)
    assert broken == []
