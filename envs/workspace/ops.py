"""What the workspace tools do, run *inside* the sandbox by ``agentspec/sandbox/runner.py``.

Standard library only, Python 3.8+: the sandbox's own python3 imports this
file.  The current directory is the workspace root; every path argument is
relative to it (or absolute inside it) and may not escape it.  Processes a
tool starts live only as long as its call: each command runs in its own
process group, killed when the command ends or times out.
"""

import os
import sys

# Other modules are imported inside the ops that need them: each call is a fresh interpreter.

MAX_FILE_BYTES = 5_000_000


def _resolve(path):
    root = os.getcwd()
    full = os.path.normpath(os.path.join(root, path))
    if full != root and not full.startswith(root.rstrip("/") + "/"):
        raise ValueError("path {!r} is outside the workspace".format(path))
    return full


def _rel(full):
    return os.path.relpath(full, os.getcwd())


def read_file(path, offset=0, limit=100_000):
    with open(_resolve(path), encoding="utf-8", errors="replace") as fh:
        return fh.read()[offset : offset + limit]


def write_file(path, content, append=False):
    full = _resolve(path)
    os.makedirs(os.path.dirname(full) or ".", exist_ok=True)
    with open(full, "a" if append else "w", encoding="utf-8") as fh:
        fh.write(content)
    return "wrote %d characters to %s" % (len(content), _rel(full))


def delete_path(path):
    full = _resolve(path)
    if full == os.getcwd():
        raise ValueError("refusing to delete the workspace root")
    if os.path.isdir(full) and not os.path.islink(full):
        import shutil

        shutil.rmtree(full)
    else:
        os.unlink(full)
    return "deleted {}".format(_rel(full))


def list_files(path=".", recursive=False):
    full = _resolve(path)
    if not recursive:
        names = sorted(os.listdir(full))
        return "\n".join(n + "/" if os.path.isdir(os.path.join(full, n)) else n for n in names)
    found = []
    for dirpath, dirnames, filenames in os.walk(full):
        dirnames.sort()
        found.extend(_rel(os.path.join(dirpath, name)) for name in sorted(filenames))
    return "\n".join(found)


def _text_lines(path):
    if os.path.getsize(path) > MAX_FILE_BYTES:
        return []
    with open(path, "rb") as fh:
        data = fh.read()
    if b"\0" in data[:8192]:
        return []  # binary file
    return data.decode("utf-8", errors="replace").splitlines()


def grep(pattern, path=".", ignore_case=False, max_matches=200):
    import re

    regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    full = _resolve(path)
    files = [full] if os.path.isfile(full) else []
    for dirpath, dirnames, filenames in os.walk(full):
        dirnames.sort()
        files.extend(os.path.join(dirpath, name) for name in sorted(filenames))
    matches = []
    for file in files:
        if os.path.islink(file) or not os.path.isfile(file):
            continue
        for number, line in enumerate(_text_lines(file), 1):
            if regex.search(line):
                matches.append("%s:%d:%s" % (_rel(file), number, line))
                if len(matches) >= max_matches:
                    return "\n".join(matches + ["[stopped after %d matches]" % max_matches])
    return "\n".join(matches) if matches else "no matches"


def _run(argv, timeout_s):
    """Run a command in its own process group; the group dies with the command (or at the timeout)."""
    import signal
    import subprocess
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # Files, not pipes: a background child holding a pipe open would block us until the timeout.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        timed_out = False
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", errors="replace")
        stderr = err.read().decode("utf-8", errors="replace")
    text = stdout
    if stderr:
        text += ("\n" if text and not text.endswith("\n") else "") + "[stderr]\n" + stderr
    if timed_out:
        raise TimeoutError("timed out after {}s\n{}".format(timeout_s, text))
    if code:
        text += ("\n" if text and not text.endswith("\n") else "") + (
            "[killed by signal %d]" % -code if code < 0 else "[exit code %d]" % code
        )
    return text


def run_shell(command, timeout_s=30.0):
    return _run(["/bin/sh", "-c", command], timeout_s)


def run_python(code, timeout_s=30.0):
    # `-c`, not a temporary file: a traceback then names "<string>", the same on every run, where a random file
    # name made the next model request differ between runs (a recorded run could not be replayed).
    if "\0" in code:
        raise ValueError("the code contains a NUL byte")
    return _run([sys.executable, "-c", code], timeout_s)


OPS = {
    "read_file": read_file,
    "write_file": write_file,
    "delete_path": delete_path,
    "list_files": list_files,
    "grep": grep,
    "run_shell": run_shell,
    "run_python": run_python,
}
