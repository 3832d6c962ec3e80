"""The in-sandbox tool runner: one call per process, a JSON request on stdin, a JSON answer on stdout.

This file is copied into every sandbox (a Docker container, a bubblewrap jail)
and run there by the sandbox's own ``python3``.  It therefore imports nothing
but the standard library and stays compatible with Python 3.8.

Modes::

    python3 -I runner.py            # run one op of the program's ops module
    python3 -I runner.py --pack     # write a tar of the given paths (diff commits, Docker)
    python3 -I runner.py --apply    # apply such a tar: delete, then extract
    python3 -I runner.py --init     # PID 1 of a container: reap orphans, survive the reaping

Request of the default mode::

    {"op": "read_file", "args": {"path": "a.txt"}, "ops": "/opt/agentspec/ops.py",
     "workspace": "/workspace", "limits": {"memory_bytes": 536870912}, "reap": true,
     "max_output": 50000}

Answer: ``{"ok": true, "content": "..."}``; a failing op gives ``ok: false`` and
the error text.  With ``reap`` the runner kills every other process it may
signal before it exits, so no process started by a tool outlives its call.
That is only ever asked inside a private PID namespace (Docker, bubblewrap),
and the runner double-checks that PID 1 is a sandbox init before doing it.
(PID 1 itself is immune: kill(-1) skips it.  That is why a container's PID 1
is this runner in ``--init`` mode and not ``sleep`` under docker-init, whose
death would stop the container.)
"""

import json
import os
import signal
import sys

# importlib.util, resource, tarfile and time are imported where needed: every call starts a fresh
# interpreter, and tarfile alone (compression modules) costs more than the rest of the startup.

CHANGES_MEMBER = ".agentspec-deleted.json"
SANDBOX_INITS = ("docker-init", "tini", "tini-static", "bwrap")
INIT_FLAG = "--init"


def _apply_limits(limits):
    import resource

    pairs = (
        ("memory_bytes", resource.RLIMIT_AS),
        ("nofile", resource.RLIMIT_NOFILE),
        ("fsize_bytes", resource.RLIMIT_FSIZE),
        ("nproc", resource.RLIMIT_NPROC),
        ("cpu_s", resource.RLIMIT_CPU),
    )
    for key, which in pairs:
        value = limits.get(key)
        if value:
            resource.setrlimit(which, (int(value), int(value)))


def _load_ops(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("agentspec_sandbox_ops", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OPS


def _in_sandbox_pid_namespace():
    """True when PID 1 is a sandbox's init, i.e. kill(-1) cannot reach the host."""
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            argv = fh.read().decode(errors="replace").rstrip("\0").split("\0")
    except OSError:
        return False
    return os.path.basename(argv[0]) in SANDBOX_INITS or (argv[-1] == INIT_FLAG and argv[-2].endswith("runner.py"))


def init():
    """Be PID 1 of a container: reap every orphan (reaped tools leave some), exit on SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    import time

    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(1.0)  # no child now; orphans adopted later are reaped within a second
        except InterruptedError:
            pass


def _reap():
    # kill(-1) signals every process we may signal except PID 1 and ourselves:
    # in a private PID namespace that is exactly what the tool left behind.
    if _in_sandbox_pid_namespace():
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _truncate(text, limit):
    if limit and len(text) > limit:
        return text[:limit] + "\n[output truncated: %d of %d characters shown]" % (limit, len(text))
    return text


def run_op(request):
    """Run one op and return the answer dict (never raises for op failures)."""
    try:
        os.chdir(request.get("workspace") or ".")
        _apply_limits(request.get("limits") or {})
        ops = _load_ops(request["ops"])
        name = request["op"]
        if name not in ops:
            raise LookupError("unknown op {!r}".format(name))
        content = ops[name](**(request.get("args") or {}))
        answer = {"ok": True, "content": content if isinstance(content, str) else json.dumps(content)}
    except MemoryError:
        answer = {"ok": False, "content": "MemoryError: the tool ran out of memory"}
    except Exception as exc:  # noqa: BLE001 - every op failure is data for the agent
        answer = {"ok": False, "content": str(exc) or type(exc).__name__}
    answer["content"] = _truncate(answer["content"], request.get("max_output") or 0)
    return answer


def pack(paths, out):
    """Write a tar of the paths that exist (directories without their contents) plus the missing ones.

    A changed directory also carries the names it holds: a directory deleted
    and made again in the fork is reported as changed, not its old entries as
    deleted, so the live side must drop what the fork's directory no longer has.
    """
    import io
    import tarfile

    deleted = [p for p in paths if not os.path.lexists(p)]
    listings = {p: sorted(os.listdir(p)) for p in paths if os.path.isdir(p) and not os.path.islink(p)}
    with tarfile.open(fileobj=out, mode="w|") as tf:
        data = json.dumps({"deleted": deleted, "listings": listings}).encode()
        info = tarfile.TarInfo(CHANGES_MEMBER)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        for path in sorted(p for p in paths if os.path.lexists(p)):
            tf.add(path, arcname=path.lstrip("/"), recursive=False)


def _remove(path):
    if os.path.islink(path) or not os.path.isdir(path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    for entry in os.scandir(path):
        _remove(entry.path)
    os.rmdir(path)


def apply(src):
    """Apply a :func:`pack` tar at ``/``: delete what the fork deleted, then write what it changed."""
    import tarfile

    listings = {}
    with tarfile.open(fileobj=src, mode="r|") as tf:
        for member in tf:
            if member.name == CHANGES_MEMBER:
                changes = json.loads(tf.extractfile(member).read())
                listings = changes["listings"]
                for path in changes["deleted"]:
                    _remove(path)
                continue
            target = "/" + member.name
            if os.path.lexists(target) and not (member.isdir() and os.path.isdir(target)):
                _remove(target)  # a file replaced by a directory, a symlink by a file...
            if hasattr(tarfile, "fully_trusted_filter"):  # Python >= 3.12 warns without a filter
                tf.extract(member, "/", set_attrs=not member.isdir(), filter="fully_trusted")
            else:
                tf.extract(member, "/", set_attrs=not member.isdir())
            if member.isdir() and target in listings:
                keep = set(listings[target])
                for name in os.listdir(target):
                    if name not in keep:
                        _remove(os.path.join(target, name))


def main(argv):
    if INIT_FLAG in argv:
        init()
    if "--pack" in argv:
        pack(json.load(sys.stdin)["paths"], sys.stdout.buffer)
        return 0
    if "--apply" in argv:
        apply(sys.stdin.buffer)
        return 0
    request = json.load(sys.stdin)
    answer = run_op(request)
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()
    if request.get("reap"):
        _reap()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
