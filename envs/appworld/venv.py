"""AppWorld's own venv: made and filled by agentspec (``agentspec bench setup appworld``), idempotently.

AppWorld pins pydantic<2, fastapi<0.111, SQLAlchemy 1.4 and more, so it cannot share agentspec's venv.  Its venv
lives at ``$AGENTSPEC_APPWORLD_VENV`` or ``~/.cache/agentspec/appworld/venv``; setting it up pip-installs
``appworld==APPWORLD_VERSION`` from PyPI and runs ``appworld install`` (which unpacks the app sources; offline).
:class:`~agentspec.pinned_venv.PinnedVenv` does both; the venv counts as ready once every app's sources are there.

    >>> info = ensure_venv()          # creates it the first time (minutes), then only checks it (seconds)
    >>> info["appworld_version"]
    '0.1.3.post1'
"""

from __future__ import annotations

from agentspec.pinned_venv import PinnedVenv

APPWORLD_VERSION = "0.1.3.post1"
VENV_ENV = "AGENTSPEC_APPWORLD_VENV"
# Installed is not enough: ``appworld install`` must have unpacked every app's sources.
_PROBE = (
    "import appworld, os, sys; from appworld.apps import get_all_apps; "
    "all(os.path.exists(os.path.join(os.path.dirname(appworld.__file__), 'apps', a, 'apis.py')) "
    "for a in get_all_apps()) or sys.exit('apps not unpacked'); print(appworld.__version__)"
)
VENV = PinnedVenv(name="appworld", label="AppWorld", package="appworld", version=APPWORLD_VERSION, env_var=VENV_ENV,
                  probe=_PROBE, scripts=(("appworld", "install"),))

# The venv's operations under the names callers import (ensure_venv returns {"venv", "python", "appworld_version",
# "created"}).
venv_path = VENV.path
venv_python = VENV.python
installed_version = VENV.installed_version
ensure_venv = VENV.ensure
