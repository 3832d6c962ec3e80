"""A working directory an agent edits and runs code in, over any sandbox backend."""

from envs.workspace.environment import open_workspace, workspace_program
from envs.workspace.tools import WorkspaceTools

__all__ = ["WorkspaceTools", "open_workspace", "workspace_program"]
