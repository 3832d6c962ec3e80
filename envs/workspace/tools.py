"""The workspace tools as the agent sees them: file tools plus Python and shell, run in a sandbox.

Each tool only names the op to run (see :mod:`agentspec.sandbox.program`); the
op itself runs inside the sandbox (``ops.py``), confined to the workspace.
Reads are ``read_only`` (a speculative read may answer the authority's read);
everything that can change files, including running code, is ``mutating``.
"""

from __future__ import annotations

from agentspec.sandbox.program import Op
from agentspec.tools import Toolkit, tool
from agentspec.types import Effect


class WorkspaceTools(Toolkit):
    """Files and commands in a working directory (paths are relative to the workspace root)."""

    @tool(Effect.READ_ONLY)
    def read_file(self, path: str, offset: int = 0, limit: int = 100_000) -> Op:
        """Read a text file of the workspace.

        Args:
            path: File path relative to the workspace root.
            offset: First character to return.
            limit: Most characters to return.
        """
        return Op.of("read_file", path=path, offset=offset, limit=limit)

    @tool(Effect.MUTATING)
    def write_file(self, path: str, content: str, append: bool = False) -> Op:
        """Write (or append to) a text file, creating parent directories as needed.

        Args:
            path: File path relative to the workspace root.
            content: The text to write.
            append: Append instead of replacing the file.
        """
        return Op.of("write_file", path=path, content=content, append=append)

    @tool(Effect.MUTATING)
    def delete_path(self, path: str) -> Op:
        """Delete a file or a whole directory.

        Args:
            path: Path relative to the workspace root.
        """
        return Op.of("delete_path", path=path)

    @tool(Effect.READ_ONLY)
    def list_files(self, path: str = ".", recursive: bool = False) -> Op:
        """List a directory (directories end with '/'), or every file below it.

        Args:
            path: Directory relative to the workspace root.
            recursive: List all files below the directory instead of its entries.
        """
        return Op.of("list_files", path=path, recursive=recursive)

    @tool(Effect.READ_ONLY)
    def grep(self, pattern: str, path: str = ".", ignore_case: bool = False, max_matches: int = 200) -> Op:
        """Search text files for a regular expression; prints path:line:text for each match.

        Args:
            pattern: A Python regular expression.
            path: File or directory to search, relative to the workspace root.
            ignore_case: Match case-insensitively.
            max_matches: Stop after this many matches.
        """
        return Op.of("grep", pattern=pattern, path=path, ignore_case=ignore_case, max_matches=max_matches)

    @tool(Effect.MUTATING)
    def run_python(self, code: str, timeout_s: float = 30.0) -> Op:
        """Run a Python program in the workspace and return its output.

        Args:
            code: The program's source.
            timeout_s: Kill the program after this many seconds.
        """
        return Op.of("run_python", code=code, timeout_s=timeout_s)

    @tool(Effect.MUTATING)
    def run_shell(self, command: str, timeout_s: float = 30.0) -> Op:
        """Run a shell command (/bin/sh -c) in the workspace and return its output.

        Args:
            command: The command line.
            timeout_s: Kill the command after this many seconds.
        """
        return Op.of("run_shell", command=command, timeout_s=timeout_s)
