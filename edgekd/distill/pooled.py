"""A classifier on the mean of an encoder's token states, for encoders trained that way.

Sentence encoders (sentence-transformers' all-MiniLM-L6-v2, the default base) were
trained on the *mean* of their last layer's token states; their [CLS] vector and
pooler were never trained for what they now carry. A linear probe on the frozen
encoder says how much that matters (CLINC150 test, logistic regression, C = 1):
mean-pooled 0.953, [CLS] state 0.903, pooler output 0.838 (benchmarks/tasks.py).
Hugging Face's `BertForSequenceClassification` classifies from the pooler only, so
`edgekd teacher` reads the base's own pooling config and, when it says mean, builds
this model instead: the same encoder, a dropout and one linear layer on the masked
mean of the last layer.

Its folder is an ordinary Hugging Face folder (config.json, model.safetensors,
tokenizer) whose config.json carries `edgekd_pooling: mean` and the architecture
`EdgeKDPooledClassifier`; `load_teacher` and `export_teacher` read it, and every
other part of edgekd sees the interface of an HF classifier (`.config`,
`.base_model`, `model(**batch).logits`, `output_hidden_states`). Plain transformers
would load its encoder under other names and warn that every weight is new, rather
than classify silently from an untrained pooler.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgekd.artifacts import POOLED_ARCHITECTURE as ARCHITECTURE
from edgekd.artifacts import POOLING_KEY, is_pooled

__all__ = ["ARCHITECTURE", "POOLING_KEY", "PooledClassifier", "base_pooling", "is_pooled"]
WEIGHTS = "model.safetensors"


# A sentence-transformers pooling or modules file is a few hundred bytes; one past this
# is no such file (or crafted), and reads as "cls".
POOLING_FILE_BYTES = 1 << 20


def base_pooling(base: str | Path) -> str:
    """How a base encoder's sentence vector was trained: "mean" when its
    sentence-transformers files say so (modules.json names a Pooling module whose
    config sets `pooling_mode_mean_tokens`), else "cls" (the HF classifier head).
    `base` is a folder or a hub id (its two files fetched like the model's, from the
    cache when offline). Anything unreadable reads as "cls": the standard head is
    always valid."""
    read = _folder_file(Path(base)) if Path(base).is_dir() else _hub_file(str(base))
    try:
        modules = json.loads(read("modules.json"))
        pooling = next(
            m["path"] for m in modules if str(m.get("type", "")).endswith("models.Pooling")
        )
        # The module's path is a folder name inside the base (e.g. "1_Pooling").
        config = json.loads(read(f"{pooling}/config.json"))
    except (OSError, ValueError, TypeError, KeyError, StopIteration, AttributeError):
        return "cls"
    return "mean" if config.get("pooling_mode_mean_tokens") is True else "cls"


def _capped(path: Path) -> bytes:
    with path.open("rb") as f:
        data = f.read(POOLING_FILE_BYTES + 1)
    if len(data) > POOLING_FILE_BYTES:
        raise ValueError(f"{path.name} is over {POOLING_FILE_BYTES} bytes")
    return data


def _folder_file(root: Path) -> Any:
    def read(name: str) -> bytes:
        path = (root / name).resolve()
        if not path.is_relative_to(root.resolve()):
            raise ValueError(f"{name} is outside the base")
        return _capped(path)

    return read


def _hub_file(repo: str) -> Any:
    def read(name: str) -> bytes:
        # A name the repository gives could climb out of the hub cache: only plain
        # relative names are fetched.
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"{name} is outside the base")
        from huggingface_hub import hf_hub_download

        try:
            path = hf_hub_download(repo, name)
        except Exception as e:  # the hub client raises a dozen kinds
            # No such file, no network and no cache, a gated repo: all mean the base
            # says nothing about its pooling.
            raise OSError(f"{repo}/{name}: {type(e).__name__}") from None
        return _capped(Path(path))  # in the hub cache (a link to its blob), not the base

    return read


def bare_encoder(load: Any, *args: Any, **kw: Any) -> Any:
    """`load(*args, **kw)` (AutoModel.from_pretrained or .from_config) without the
    pooler layer the mean never reads (unused weights would also trip multi-process
    training), for architectures that have the option (BERT-likes; DistilBERT has no
    pooler and no option)."""
    try:
        return load(*args, add_pooling_layer=False, **kw)
    except TypeError:
        return load(*args, **kw)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `hidden` (batch × length × width) over the positions where `mask` is 1."""
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0)


class PooledClassifier(nn.Module):
    """Encoder → masked mean of the last layer → dropout → linear (num_labels)."""

    def __init__(self, encoder: Any) -> None:
        super().__init__()
        self.base_model = encoder
        self.config: Any = encoder.config
        setattr(self.config, POOLING_KEY, "mean")
        self.config.architectures = [ARCHITECTURE]
        rate: Any = getattr(self.config, "classifier_dropout", None)
        rate = getattr(self.config, "hidden_dropout_prob", 0.1) if rate is None else rate
        self.dropout = nn.Dropout(float(rate))
        self.classifier = nn.Linear(self.config.hidden_size, self.config.num_labels)

    def get_input_embeddings(self) -> Any:
        """The encoder's word table (a large task's students start from it; MixKD mixes
        its rows), as HF models give it."""
        return self.base_model.get_input_embeddings()

    def pooled(
        self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor, **kw: Any
    ) -> Any:
        encoder: Any = self.base_model
        out = encoder(input_ids=input_ids, attention_mask=attention_mask, **kw)
        return mean_pool(out.last_hidden_state, attention_mask), out

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        inputs_embeds: torch.Tensor | None = None,
        **kw: Any,
    ) -> Any:
        """Logits from `input_ids`, or from `inputs_embeds` (MixKD's mixed word vectors),
        as an HF classifier takes either."""
        from transformers.modeling_outputs import SequenceClassifierOutput

        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give input_ids or inputs_embeds, not both or neither")
        if attention_mask is None:
            given = input_ids if input_ids is not None else inputs_embeds
            assert given is not None
            attention_mask = torch.ones(given.shape[:2], dtype=torch.long, device=given.device)
        if inputs_embeds is not None:
            kw["inputs_embeds"] = inputs_embeds
        vector, out = self.pooled(
            input_ids, attention_mask, output_hidden_states=output_hidden_states, **kw
        )
        logits = self.classifier(self.dropout(vector))
        return SequenceClassifierOutput(logits=logits, hidden_states=out.hidden_states)

    def save_pretrained(self, folder: str | Path, safe_serialization: bool = True) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.config.save_pretrained(folder)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / WEIGHTS), metadata={"format": "pt"})

    @classmethod
    def from_pretrained(cls, name_or_path: str, config: Any) -> PooledClassifier:
        """Load a saved one (a folder, or a hub id through transformers' file cache);
        every weight must be present: a missing or extra one is refused."""
        from safetensors.torch import load_file
        from transformers import AutoModel
        from transformers.utils import cached_file

        encoder = bare_encoder(AutoModel.from_config, config, attn_implementation="eager")
        model = cls(encoder)
        path = cached_file(name_or_path, WEIGHTS)
        if path is None:
            raise OSError(f"{name_or_path}: no {WEIGHTS}")
        model.load_state_dict(load_file(path), strict=True)
        return model.float().eval()
