"""The README and docs/ as a newcomer uses them: the Python examples run as written, every command shown parses,
every shown command that needs no model download, network or endpoint runs, the CLI reference page is the
parser's own, and the links resolve."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from sandbox_support import require_bwrap
from scripted_openai_server import ScriptedOpenAIServer

from agentspec.cli import build_parser
from agentspec.cli.reference import REGENERATE, render
from agentspec.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
CLI_PAGE = REPO / "docs" / "cli.md"
# The guide: the README and its pages. Their shell blocks run (below); the experiments' write-ups are only parsed.
GUIDE = [README, *DOCS]
# Documents whose shell blocks a newcomer copies: the guide and the experiments' write-ups.
DOCUMENTS = [*GUIDE, *sorted((REPO / "experiments").glob("*.md"))]
TWO_COMMANDS = [
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/agentspec run --bench tau2-telecom "
    "--split base --agent oracle --data-dir ../shared/data/tau2 --out runs/oracle-base",
    ".venv/bin/python -m pytest",
]
SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "<", "&"}
# A ```bash block, with the comment above it that says how the tests treat it (see ShownBlock).
BLOCK = re.compile(r"(?:<!-- test: (?P<marker>[^>]*?) -->\n)?```bash\n(?P<body>.*?)```", re.S)
# What a shown block may link to from the temporary folder it runs in: the checkout's folders it names.
LINKED = ("tests", "macros", "experiments", "envs")
BLOCK_TIMEOUT_S = 300


def example_code(name: str = "executor", doc: Path = README) -> str:
    """The ```python block of ``doc`` marked ``<!-- example: NAME -->``."""
    text = doc.read_text(encoding="utf-8")
    match = re.search(rf"<!-- example: {name} -->\s*```python\n(.*?)```", text, re.S)
    assert match, f"{doc.relative_to(REPO)} lost its {name} example"
    return match.group(1)


def shell_blocks(text: str) -> list[str]:
    """The bodies of the ```bash blocks of a markdown text, in order."""
    return [match.group("body") for match in BLOCK.finditer(text)]


def agentspec_commands(block: str) -> list[list[str]]:
    """Each ``agentspec`` invocation of a shell block, as the argument list after ``agentspec``.

    Continuation lines are joined and comments dropped; a command ends at a shell
    operator (``|``, ``&&``, ``>``...), so ``... | head -3`` keeps only the agentspec part.  Only a word in a
    command's place counts (``mypy agentspec`` names a folder, not the command).
    """
    commands: list[list[str]] = []
    for line in block.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] | None = None
        starts = True  # the next word is a command's first (after variable assignments such as T=...)
        for token in lexer:
            if token in SHELL_OPERATORS:
                current, starts = None, True
            elif current is not None:
                current.append(token)
            elif starts and (token.endswith("bin/agentspec") or token == "agentspec"):
                current = []
                commands.append(current)
            elif not (starts and re.fullmatch(r"[A-Za-z_]\w*=.*", token)):
                starts = False
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


@dataclass(frozen=True)
class ShownBlock:
    """A shell block of the guide and how the tests treat it, from the comment line right above it:

    * none: it runs here, in seconds;
    * ``<!-- test: skip (REASON) -->``: it cannot run here (a model download, the network, an endpoint, Docker...);
    * ``<!-- test: slow (REASON) -->``: it runs, under the ``slow`` marker (``pytest -m slow``);
    * ``<!-- test: needs bwrap -->`` / ``<!-- test: needs docker -->``: it runs where bubblewrap works / a Docker
      engine answers or can be started (else skips, or fails under ``AGENTSPEC_REQUIRE_ISOLATION=1``, as the
      sandbox tests do).
    """

    where: str
    body: str
    kind: str
    reason: str


def shown_blocks() -> list[ShownBlock]:
    blocks = []
    for doc in GUIDE:
        text = doc.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("body"))
            marker = (match.group("marker") or "").strip()
            kind, _, rest = marker.partition(" ")
            blocks.append(ShownBlock(f"{doc.relative_to(REPO)}:{line}", match.group("body"), kind or "run",
                                     rest.strip().removeprefix("(").removesuffix(")")))
    return blocks


def _param(block: ShownBlock):
    marks = {"slow": [pytest.mark.slow]}.get(block.kind, [])
    return pytest.param(block, id=block.where, marks=marks)


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


def any_agent(request):
    """A scripted endpoint any shown command can talk to: a user simulator states a problem, then ends the
    conversation; an agent ends its task (``done`` where it has the tool, else a closing message)."""
    system = next((m.get("content") or "" for m in request["messages"] if m["role"] == "system"), "")
    tools = {t["function"]["name"] for t in request.get("tools") or []}
    if "playing the role of a customer" in system:  # tau2's user simulator (its own turns are "assistant" ones)
        spoke = any(m["role"] == "assistant" for m in request["messages"])
        return {"content": "###STOP###" if spoke else "My phone shows no service."}
    return {"tool_calls": [{"name": "done", "arguments": {}}]} if "done" in tools else {"content": "Goodbye."}


def _scripted_endpoints(monkeypatch, srv: ScriptedOpenAIServer) -> None:
    monkeypatch.setenv("AGENTSPEC_AGENT_BASE_URL", srv.base_url)
    monkeypatch.setenv("AGENTSPEC_AGENT_MODEL", "authority")
    monkeypatch.setenv("AGENTSPEC_SPECULATOR_BASE_URL", srv.base_url)
    monkeypatch.setenv("AGENTSPEC_SPECULATOR_MODEL", "speculator")


def test_readme_example_runs(monkeypatch, capsys):
    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        _scripted_endpoints(monkeypatch, srv)
        exec(compile(example_code(), "README.md", "exec"), {"__name__": "readme_example"})
        tools_sent = {t["function"]["name"] for t in srv.requests[0]["tools"]}
    out = capsys.readouterr().out
    assert out.strip() == "1 note ['sa', 'sa'] ['buy milk']"
    # The README states what the example prints: keep the two in step.
    assert f"It prints `{out.strip()}`" in README.read_text(encoding="utf-8")
    assert tools_sent == {"add_note", "list_notes", "done"}


def test_sandbox_example_runs(monkeypatch, capsys):
    """The sandbox page's example forks a real copy-mode workspace, runs a shell command confined, and commits it."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: the copy backend refuses to run tools without it")
    page = REPO / "docs" / "sandboxes.md"
    monkeypatch.chdir(REPO)  # the example seeds its workspace from the relative path "macros"
    exec(compile(example_code("sandbox", page), str(page), "exec"), {"__name__": "docs_sandbox_example"})
    shown = sorted(p.name for p in (REPO / "macros").iterdir())
    assert capsys.readouterr().out.strip() == str(sorted([*shown, "note.txt"]))
    assert not (REPO / "macros" / "note.txt").exists(), "the workspace wrote into its source"


def test_mcp_example_runs(monkeypatch, capsys):
    """The API page's MCP example: a real stdio server (tests/servers/notes_server.py), scripted endpoints."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'agentspec[mcp]')")
    page = REPO / "docs" / "api.md"
    monkeypatch.chdir(REPO)  # the example starts tests/servers/notes_server.py by its relative path
    with ScriptedOpenAIServer(responder, models=("authority", "speculator")) as srv:
        _scripted_endpoints(monkeypatch, srv)
        exec(compile(example_code("mcp", page), str(page), "exec"), {"__name__": "docs_mcp_example"})
    out = capsys.readouterr().out.strip()
    assert out == "1 note ['authority', 'sa']"
    assert f"It prints `{out}`" in page.read_text(encoding="utf-8")


def test_the_two_commands_come_first():
    """The first commands a newcomer meets are the two the README promises, exactly."""
    first = shell_blocks(README.read_text(encoding="utf-8"))[0]
    assert first.strip().splitlines() == TWO_COMMANDS


def test_the_readme_is_a_short_guide():
    """Issue 39: under about 300 lines, its first command before line 40, and a link to every page of docs/."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    first_command = next(i for i, line in enumerate(lines, 1) if line.startswith("```bash")) + 1
    assert len(lines) <= 300 and first_command < 40, (len(lines), first_command)
    assert [page.name for page in DOCS if f"](docs/{page.name})" not in text] == []


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


def test_every_block_says_how_it_is_tested():
    """A block that does not run says why; only the markers the runner knows are used."""
    blocks = shown_blocks()
    assert [b.where for b in blocks if b.kind not in ("run", "skip", "slow", "needs")] == []
    assert [b.where for b in blocks if b.kind == "skip" and not b.reason] == []
    assert [b.where for b in blocks if b.kind == "needs" and b.reason not in ("bwrap", "docker")
            and not re.fullmatch(r"endpoint 127\.0\.0\.1:\d+", b.reason)] == []
    assert sum(b.kind in ("run", "slow", "needs") for b in blocks) >= 10, "most shown commands should run"


def _workdir(tmp_path: Path) -> Path:
    """A folder to run shown commands in, as a checkout's root looks to them: ``.venv/bin/agentspec`` and
    ``.venv/bin/python`` (this interpreter), and links to the checkout's folders they read."""
    work = tmp_path / "work"
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, run in (("agentspec", f'"{sys.executable}" -m agentspec.cli'), ("python", f'"{sys.executable}"')):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec {run} "$@"\n', encoding="utf-8")
        script.chmod(0o755)
    for name in LINKED:
        (work / name).symlink_to(REPO / name)
    return work


def run_shown(body: str, tmp_path: Path, data_root: Path) -> subprocess.CompletedProcess[str]:
    """Run a shown block with bash (errors and failed pipes stop it), ``../shared/data`` read from ``data_root``,
    and ``$AGENTSPEC_RUNS`` (where a run without ``--out`` goes) a temporary folder."""
    work = _workdir(tmp_path)
    env = {**os.environ, "AGENTSPEC_RUNS": str(tmp_path / "default-runs"),
           "PATH": f"{work / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = body.replace("../shared/data", str(data_root))
    return subprocess.run(["bash", "-e", "-u", "-o", "pipefail", "-c", script], cwd=work, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)


@pytest.mark.parametrize("block", [_param(b) for b in shown_blocks()])
def test_shown_commands_run(block: ShownBlock, tmp_path, tau2_dir, request):
    """Every shell block of the README and docs/ runs as shown, unless its comment says why it cannot here."""
    if block.kind == "skip":
        pytest.skip(f"{block.where}: {block.reason}")
    if block.kind == "needs" and block.reason == "bwrap":
        require_bwrap()
    if block.kind == "needs" and block.reason == "docker":
        request.getfixturevalue("docker_client")  # an engine (DOCKER_HOST set), or the skip saying why not
    if block.kind == "needs" and block.reason.startswith("endpoint "):
        port = int(block.reason.rsplit(":", 1)[1])
        try:
            endpoint = ScriptedOpenAIServer(any_agent, port=port).__enter__()
        except OSError as exc:
            pytest.skip(f"{block.where}: port {port} of 127.0.0.1 is in use here ({exc.strerror}): the block's endpoint")
        try:
            done = run_shown(block.body, tmp_path, tau2_dir.parent)
        finally:
            endpoint.__exit__(None, None, None)
    else:
        endpoint, done = None, run_shown(block.body, tmp_path, tau2_dir.parent)
    assert done.returncode == 0, (f"{block.where} failed (exit {done.returncode}):\n{block.body}\n"
                                  f"--- stdout (end)\n{done.stdout[-2000:]}\n--- stderr (end)\n{done.stderr[-3000:]}")
    assert endpoint is None or endpoint.requests, f"{block.where}: the shown command never asked its endpoint"


def test_the_first_command_runs(tmp_path, tau2_dir):
    """The main job of the first of the two commands (what follows its install), as written."""
    job = TWO_COMMANDS[0][TWO_COMMANDS[0].index(".venv/bin/agentspec"):]
    done = run_shown(job, tmp_path, tau2_dir.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    results = tmp_path / "work" / "runs" / "oracle-base" / "results.json"
    assert results.is_file(), done.stdout[-2000:]


def test_cli_reference_is_current():
    """docs/cli.md is what the parser renders: a flag added or changed without regenerating the page fails here."""
    assert CLI_PAGE.is_file(), f"docs/cli.md is missing: make it with `{REGENERATE}`"
    assert CLI_PAGE.read_text(encoding="utf-8") == render(), (
        f"docs/cli.md differs from the parser's help: regenerate it with `{REGENERATE}`")


def test_cli_reference_covers_every_command():
    """Each subcommand (``speculator fit`` included) has its section, with its usage line."""
    page = CLI_PAGE.read_text(encoding="utf-8")
    for command in ("agentspec run", "agentspec report", "agentspec data pull", "agentspec speculator fit"):
        assert f"## `{command}`" in page and f"usage: {command}" in page, command


def anchors_of(text: str) -> set[str]:
    """The link targets a markdown text defines: ``<a id>`` tags and GitHub's heading slugs."""
    ids = set(re.findall(r'<a id="([^"]+)">', text))
    return ids | {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: str(d.relative_to(REPO)))
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
