"""ExecuTorch `.pte` for the BiLSTM, lowered with the XNNPACK partitioner.

`torch.export` cannot trace packed sequences, and it specialises an `nn.LSTM` on
its sequence length, so the program has a fixed shape: batch 1 × `max_length`
tokens, padded. Padding would corrupt a plain bidirectional LSTM (its backward
direction would start on padding), so the exported module runs the two
directions as separate LSTMs: the forward one over the padded row (padding comes
after the text, so it never reaches a real step) and the backward one over the
row reversed within its own length (a gather), so it too starts at the text's
last token. The logits are those of the packed student, exactly.

Optional: needs `pip install executorch` (installs beside torch 2.13).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgekd.errors import EdgeKDError


class FixedLengthBiLSTM(nn.Module):
    """The BiLSTM student, exact on right-padded rows of one fixed length, no packing."""

    def __init__(self, student: Any) -> None:
        super().__init__()
        if student.config.pair:
            raise EdgeKDError("the ExecuTorch export takes single texts; pair models use ONNX")
        self.s = student
        lstm = student.lstm
        self.forward_lstm = nn.LSTM(lstm.input_size, lstm.hidden_size, batch_first=True)
        self.backward_lstm = nn.LSTM(lstm.input_size, lstm.hidden_size, batch_first=True)
        with torch.no_grad():
            for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
                getattr(self.forward_lstm, name).copy_(getattr(lstm, name))
                getattr(self.backward_lstm, name).copy_(getattr(lstm, f"{name}_reverse"))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        s = self.s
        x = s.embedding(input_ids)
        if s.embedding_proj is not None:
            x = s.embedding_proj(x)
        lengths = attention_mask.sum(1, keepdim=True)
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        # Within its length a row is read backwards; padding positions stay in place.
        rev = torch.where(pos < lengths, lengths - 1 - pos, pos)
        index = rev.unsqueeze(-1).expand(-1, -1, x.shape[-1])
        out_f, _ = self.forward_lstm(x)
        out_b_rev, _ = self.backward_lstm(torch.gather(x, 1, index))
        hidden_index = rev.unsqueeze(-1).expand(-1, -1, out_b_rev.shape[-1])
        out_b = torch.gather(out_b_rev, 1, hidden_index)
        if s.config.pooling == "last":
            last = (lengths - 1).unsqueeze(-1).expand(-1, 1, out_f.shape[-1])
            pooled = torch.cat([torch.gather(out_f, 1, last)[:, 0], out_b[:, 0]], dim=1)
        else:
            out = torch.cat([out_f, out_b], dim=-1)
            pad = attention_mask.unsqueeze(-1) == 0
            pooled = out.masked_fill(pad, -1e4).max(dim=1).values
        return s.classifier(torch.relu(s.mlp(pooled)))


def export_pte(student: Any, path: Path, length: int) -> None:
    """Write a batch-1 × `length` `.pte`, XNNPACK-delegated where it can be."""
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )
        from executorch.exir import to_edge_transform_and_lower
    except ImportError:
        raise EdgeKDError(
            "the .pte export needs ExecuTorch: pip install executorch (beside torch 2.13)"
        ) from None
    module = FixedLengthBiLSTM(student).eval()
    example = (torch.ones(1, length, dtype=torch.long), torch.ones(1, length, dtype=torch.long))
    program = torch.export.export(module, example)
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    path.write_bytes(lowered.to_executorch().buffer)


def run_pte(path: Path, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """Logits from the ExecuTorch runtime, one batch-1 row at a time."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(str(path)).load_method("forward")
    out = []
    for feed in feeds:
        for i in range(feed["input_ids"].shape[0]):
            args = [torch.from_numpy(feed[k][i : i + 1]) for k in ("input_ids", "attention_mask")]
            out.append(method.execute(args)[0].numpy())
    return out
