"""Local weights on the CPU with HF transformers: convert once, load once per process.

:func:`load_model` returns a :class:`LocalModel` (the torch module, its
tokenizer and what the server needs to know about them).  A model is loaded
at most once per process and shared: half the time of a slow test suite is
model loading::

    source = resolve("smollm2-135m")       # agentspec.models.registry
    model = load_model(source)             # seconds; the same object next time
    model.encode("Hi")                     # token ids

torch, transformers and llguidance are the ``[hf]`` extra; they are imported
lazily, with an install hint when missing.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from agentspec.engine.grouped_attention import use_grouped_attention
from agentspec.engine.packed_linear import LINEAR_KINDS, can_pack, pack_linears
from agentspec.errors import ConfigError

__all__ = ["LocalModel", "ModelSource", "convert_gguf", "load_model"]

_HINT = "local models need the [hf] extra: pip install 'agentspec[hf]'"


def require(module: str) -> Any:
    """Import a module of the ``[hf]``/``[server]`` extras, or raise :class:`ConfigError` with the install hint."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"{_HINT} ({exc})") from exc


def _quiet_transformers() -> None:
    # Progress bars and advisory logs would interleave with the server's stderr.
    logging = require("transformers.utils.logging")
    logging.disable_progress_bar()
    logging.set_verbosity_error()


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Something :func:`load_model` can load, and the id to serve it under.

    :func:`agentspec.models.registry.resolve` makes one from what a user typed."""

    id: str
    path: str
    """A folder (HF layout), the folder holding ``gguf_file``, or a hub id."""
    gguf_file: str | None = None


@dataclass(eq=False)
class LocalModel:
    """A loaded causal LM with its tokenizer; read-only after loading (the server serialises forwards)."""

    id: str
    model: Any
    tokenizer: Any
    context_length: int
    stop_token_ids: frozenset[int]
    linear: str = "stock"
    """``packed`` when the linear layers run from oneDNN-packed weights (:mod:`agentspec.engine.packed_linear`)."""
    _token_bytes: dict[int, bytes] = field(default_factory=dict, repr=False)

    @cached_property
    def ll_tokenizer(self) -> Any:
        """The llguidance tokenizer (built once, about a second)."""
        hf = require("llguidance.hf")
        return hf.from_tokenizer(self.tokenizer, n_vocab=self.vocab_size)

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.get_text_config().vocab_size)

    @cached_property
    def supports_tools(self) -> bool:
        """Whether the chat template renders ``tools`` itself (else the server describes them in the system prompt)."""
        template = self.tokenizer.chat_template or ""
        return "tools" in template

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token ``token_id`` stands for (special tokens as their text)."""
        cached = self._token_bytes.get(token_id)
        if cached is None:
            if self.ll_tokenizer.is_special_token(token_id):
                cached = self.tokenizer.convert_ids_to_tokens(token_id).encode()
            else:
                cached = self.ll_tokenizer.decode_bytes([token_id])
            self._token_bytes[token_id] = cached
        return cached


_loaded: dict[tuple[ModelSource, str], LocalModel] = {}
_load_lock = threading.Lock()


def load_model(source: ModelSource, *, linear: str | None = None) -> LocalModel:
    """Load ``source`` on the CPU in float32, or return the copy this process already loaded.

    ``linear`` is ``packed`` (the default where torch has oneDNN: weights
    packed once, see :mod:`agentspec.engine.packed_linear`) or ``stock``;
    ``AGENTSPEC_LINEAR`` sets the default.
    """
    kind = linear or os.environ.get("AGENTSPEC_LINEAR") or _default_linear()
    if kind not in LINEAR_KINDS:
        raise ConfigError(f"unknown linear kind {kind!r}; expected one of {', '.join(LINEAR_KINDS)}")
    with _load_lock:
        if (source, kind) not in _loaded:
            _loaded[source, kind] = _load(source, kind)
        return _loaded[source, kind]


def _default_linear() -> str:
    try:
        return "packed" if can_pack() else "stock"
    except ImportError:
        return "stock"


def _load(source: ModelSource, linear: str) -> LocalModel:
    torch = require("torch")
    transformers = require("transformers")
    _quiet_transformers()
    kwargs: dict[str, Any] = {"gguf_file": source.gguf_file} if source.gguf_file else {}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source.path, **kwargs)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            source.path, dtype=torch.float32, attn_implementation="sdpa", **kwargs
        )
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load model {source.id} from {source.path}: {exc}") from exc
    model.eval()
    use_grouped_attention(model)
    if linear == "packed":
        pack_linears(model)
    return LocalModel(
        id=source.id,
        model=model,
        tokenizer=tokenizer,
        context_length=_context_length(model.config),
        stop_token_ids=_stop_ids(model, tokenizer),
        linear=linear,
    )


def _context_length(config: Any) -> int:
    text = config.get_text_config()
    return int(getattr(text, "max_position_embeddings", None) or 2048)


def _stop_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """EOS ids from the generation config and tokenizer, plus the chat turn end when the vocabulary has one."""
    ids: set[int] = set()
    for value in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        ids.update(value if isinstance(value, list) else [value] if value is not None else [])
    for text in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        token = tokenizer.convert_tokens_to_ids(text)
        if isinstance(token, int) and token != tokenizer.unk_token_id:
            ids.add(token)
    return frozenset(ids)


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` into a float32 safetensors folder ``out`` (model, tokenizer, chat template)."""
    torch = require("torch")
    transformers = require("transformers")
    _quiet_transformers()
    kwargs = {"gguf_file": gguf.name}
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kwargs)
    # The weights are plain float32 now; a saved GGUF quantizer config would make loading expect GGUF again.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
