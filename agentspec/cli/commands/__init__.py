"""What each ``agentspec`` command does, behind its parser: one module per command (``evaluate``, ``tasks``, ``data``,
``bench``, ``mine``, ``report``, ``models``, ``sandbox``, ``speculator``, ``serve``), each a ``*_command(args)``
handler taking the parsed flags and returning the command's JSON summary.

The parsers (:mod:`agentspec.cli.run`, :mod:`agentspec.cli.mine`...) name their handler here as
``"module:function"``, imported only when that command runs, so ``agentspec --help`` loads none of them.  The
library packages (bench, mining, report, models, sandbox, speculator, serve) take typed values, never parsed
flags: no module outside :mod:`agentspec.cli` imports argparse.
"""
