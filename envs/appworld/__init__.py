"""AppWorld (Trivedi et al., ACL 2024) on its own engine, in its own venv: see :mod:`envs.appworld.bench`."""
