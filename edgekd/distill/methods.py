"""Training-time methods: what a distillation run adds to the plain loop, on one hook
protocol.

A method is a class registered in `edgekd.registry.AUGMENTERS` (listed by the user in
`augment.methods`, e.g. `--augment tang,mixup`) whose `stage` is not "text", or one the
run implies (`IMPLIED`: early exit, which the student's own config turns on). The loop
(`edgekd.distill.trainer.train_student`) knows none of them by name; it calls, in order:

1. `check(cfg, student_cls, options)` before any data loads: refuse what cannot work;
2. `build(options, run)` once the student, tokenizer and teacher exist: the method for
   this run, or None when it has nothing to do here;
3. per epoch, `select(teacher_logits, student_logits)` for the one method that
   `selects` (minimax): which augmented candidates fill the epoch's extra slots;
4. per step, `loss(step)` in the prediction stage: a term added to the loss, or None;
5. `state()` when a checkpoint is written and read: its trainable modules and random
   generators, so a resumed run goes on where it stopped.

Adding one is a module with a subclass of `TrainingMethod` plus one registry line
(tests/test_extending.py does it from a temporary package).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from edgekd.errors import EdgeKDError

if TYPE_CHECKING:
    from collections.abc import Callable

    from edgekd.config import DistillConfig
    from edgekd.distill.states import TokenStates
    from edgekd.students.tokenizer import StudentTokenizer


@dataclass
class MethodRun:
    """What `build` gets: the run's config, student and teacher, and the transfer set's
    shape (`sources`: each augmented row's source text; `n_original`: rows before them)."""

    cfg: DistillConfig
    student: Any
    tok: StudentTokenizer
    teacher: Any
    teacher_tok: Any
    sources: np.ndarray
    n_original: int
    pairs: bool = False
    # The transfer rows' teacher token states, in row order (`token_states`), or None.
    states: TokenStates | None = None


class Step:
    """What `loss` gets for one training batch. `model` is the student as the loop runs
    it (perhaps wrapped by accelerate), `student` the same module unwrapped; `batch` its
    inputs; `logits` its output on them (in the graph: a term on them trains it);
    `gold` the rows' labels (NO_LABEL for augmented rows); `rows` their indices in the
    transfer set; `features` the student's hidden states when a method asked for them
    (`needs_features`)."""

    def __init__(
        self,
        model: Any,
        student: Any,
        batch: dict[str, torch.Tensor],
        logits: torch.Tensor,
        gold: torch.Tensor,
        epoch: int,
        texts: Callable[[], list[Any]],
        features: Any = None,
        rows: torch.Tensor | None = None,
    ) -> None:
        self.model, self.student, self.batch, self.gold = model, student, batch, gold
        self.logits, self.rows = logits, rows
        self.epoch, self.features, self._texts = epoch, features, texts

    @cached_property
    def texts(self) -> list[Any]:
        """The batch's rows as text, read on first use only (most methods never do)."""
        return self._texts()


@dataclass
class MethodState:
    """What a checkpoint keeps of a method, by keys unique across methods."""

    modules: dict[str, torch.nn.Module] = field(default_factory=dict)
    generators: dict[str, np.random.Generator] = field(default_factory=dict)
    torch_generators: dict[str, torch.Generator] = field(default_factory=dict)


class TrainingMethod:
    """The hooks a training-time method may implement; each default does nothing."""

    stage: ClassVar[str] = "batch"  # "batch": a term per step; "select": picks rows
    needs_teacher: ClassVar[bool] = False  # keep the PyTorch teacher loaded for it
    needs_features: ClassVar[bool] = False  # the student's hidden states in `Step`
    selects: ClassVar[bool] = False  # fills `n_selected` slots per epoch via `select`
    n_selected: int = 0

    @classmethod
    def check(cls, cfg: DistillConfig, student_cls: Any, options: Any) -> None:
        """Refuse, with an EdgeKDError naming the fix, what cannot work (no data yet)."""

    @classmethod
    def build(cls, options: Any, run: MethodRun) -> TrainingMethod | None:
        raise NotImplementedError(f"{cls.__name__} must define build(options, run)")

    def select(self, teacher: np.ndarray, student: np.ndarray) -> np.ndarray:
        """Indices of the augmented candidates that fill this epoch's extra slots."""
        raise NotImplementedError(f"{type(self).__name__} selects but defines no select")

    def loss(self, step: Step) -> torch.Tensor | None:
        """This step's extra term (added to the loss as is), or None."""
        return None

    def parameters(self) -> list[torch.nn.Parameter]:
        """Weights of its own the student's optimiser trains beside the student."""
        return []

    def state(self) -> MethodState:
        return MethodState()


class EarlyExit(TrainingMethod):
    """FastBERT's exits' self-distillation (Liu et al. 2020, "FastBERT: a Self-distilling
    BERT with Adaptive Inference Time", arXiv:2004.02178): L = Σ_{m<M} KL(p_m ‖ p_M),
    p_m the exit after layer m and p_M the student's own last layer, as the paper writes
    it, weighted by the student's `exit_weight`. On when the student has exits
    (`--student bert -s student.options.early_exit=true`)."""

    needs_features: ClassVar[bool] = True

    def __init__(self, weight: float) -> None:
        self.weight = weight

    @classmethod
    def build(cls, options: Any, run: MethodRun) -> EarlyExit | None:
        if not len(getattr(run.student, "exits", ())):
            return None
        weight = float(run.student.config.exit_weight)
        return cls(weight) if weight > 0 else None

    def loss(self, step: Step) -> torch.Tensor:
        return self.weight * exit_self_distillation(step.student, step.features)


def exit_self_distillation(model: Any, features: Any) -> torch.Tensor:
    """`EarlyExit`'s term. The exits read detached hidden states and the last layer's
    distribution is a fixed target: the paper freezes the backbone while the branches
    learn, and so does this term, though it trains beside the prediction loss, which
    alone moves the backbone."""
    import torch.nn.functional as F

    hidden = tuple(h.detach() for h in features.hidden)
    final = features.logits.detach()
    *branches, _ = model.layer_logits(hidden, final, features.mask)
    log_final = F.log_softmax(final, dim=-1)
    loss = final.new_zeros(())
    for logits in branches:
        log_p = F.log_softmax(logits, dim=-1)
        loss = loss + (log_p.exp() * (log_p - log_final)).sum(-1).mean()
    return loss


class TokenStateLoss(TrainingMethod):
    """The teacher's per-token states as a second target (`token_states: k`): a linear
    map W of the student's token states (`encode_tokens`) regresses the teacher's, in
    its top-k principal coordinates, unit variance each (`edgekd.distill.states`):

        L = β · Σ_{rows r, tokens j, components c} (W·s_rj − t_rjc)² / (k · tokens)

    over the tokens both read (student token j is teacher token j + 1: the same
    WordPiece piece, [CLS] dropped), β = `token_states_weight`. W is trained with the
    student and dropped at export: the shipped model is unchanged."""

    needs_features: ClassVar[bool] = True

    def __init__(self, states: TokenStates, width: int, weight: float) -> None:
        self.states, self.weight = states, weight
        self.head = torch.nn.Linear(width, states.k)

    @classmethod
    def check(cls, cfg: DistillConfig, student_cls: Any, options: Any) -> None:
        if not cfg.token_states:
            return
        if "token_states" not in student_cls.capabilities:
            raise EdgeKDError(
                f"token_states align the student's tokens with the teacher's; student "
                f"{cfg.student.name!r} has none to align: use --student bilstm or cnn, or "
                "drop token_states"
            )
        if cfg.extra_teachers:
            raise EdgeKDError("token_states come from one teacher; drop extra_teachers or them")

    @classmethod
    def build(cls, options: Any, run: MethodRun) -> TokenStateLoss | None:
        if not run.cfg.token_states:
            return None
        if run.pairs:
            raise EdgeKDError("token_states align single texts; for sentence pairs drop them")
        if getattr(run.student.config, "vocab", None) != "wordpiece":
            raise EdgeKDError(
                "token_states need the student to read the teacher's WordPiece pieces "
                "(student.options.vocab: wordpiece, which needs a WordPiece teacher)"
            )
        if run.states is None:
            raise EdgeKDError("token_states: the labelling gave no token states; rerun distill")
        width = run.student.token_width(run.student.config)
        return cls(run.states, width, run.cfg.token_states_weight)

    def loss(self, step: Step) -> torch.Tensor:
        assert step.rows is not None and step.features is not None
        tokens = step.features.hidden[-1]  # batch × T × width
        target, mask = self.states.padded(step.rows.cpu().numpy(), tokens.shape[1])
        device = tokens.device
        target_t = torch.from_numpy(target).to(device)
        mask_t = torch.from_numpy(mask).to(device) * step.features.mask.to(tokens.dtype)
        err = (self.head(tokens) - target_t).pow(2).mean(-1)  # batch × T
        return self.weight * (err * mask_t).sum() / mask_t.sum().clamp_min(1.0)

    def parameters(self) -> list[torch.nn.Parameter]:
        return list(self.head.parameters())

    def state(self) -> MethodState:
        return MethodState(modules={"token_states_head": self.head})


# Methods no one lists: each decides from the run whether it applies (`build` → None).
IMPLIED: tuple[type[TrainingMethod], ...] = (EarlyExit, TokenStateLoss)


def listed_methods(cfg: DistillConfig) -> list[tuple[type[TrainingMethod], Any]]:
    """(class, validated options) of each training-time method `cfg` lists, in order."""
    from edgekd.registry import AUGMENTERS

    found = []
    for component in cfg.augment.listed:
        cls = AUGMENTERS.get(component.name)
        if cls.stage == "text":
            continue
        if not (isinstance(cls, type) and issubclass(cls, TrainingMethod)):
            raise EdgeKDError(
                f"augmenter {component.name!r} has stage {cls.stage!r} but is no "
                "TrainingMethod (edgekd.distill.methods); subclass it"
            )
        found.append((cls, AUGMENTERS.options(component, "augment")))
    selecting = [cls.__name__ for cls, _ in found if cls.selects]
    if len(selecting) > 1:
        raise EdgeKDError(
            f"{' and '.join(selecting)} both choose the epoch's rows; list one of them"
        )
    return found


def check_methods(cfg: DistillConfig, student_cls: Any) -> None:
    """Every listed and implied method's `check`, before any data is read."""
    for cls, options in listed_methods(cfg):
        cls.check(cfg, student_cls, options)
    for implied in IMPLIED:
        implied.check(cfg, student_cls, None)


def build_methods(run: MethodRun) -> list[TrainingMethod]:
    """This run's methods: those listed, then the implied ones that apply."""
    built = [cls.build(options, run) for cls, options in listed_methods(run.cfg)]
    built += [cls.build(None, run) for cls in IMPLIED]
    return [m for m in built if m is not None]


def methods_state(methods: list[TrainingMethod]) -> MethodState:
    """All methods' checkpoint state in one; a key two methods claim is refused."""
    merged = MethodState()
    for method in methods:
        part = method.state()
        claimed = set(merged.modules) | set(merged.generators) | set(merged.torch_generators)
        clash = claimed & (set(part.modules) | set(part.generators) | set(part.torch_generators))
        if clash:
            raise EdgeKDError(
                f"{type(method).__name__} keeps checkpoint state under {sorted(clash)[0]!r}, "
                "which another method uses; rename it"
            )
        merged.modules.update(part.modules)
        merged.generators.update(part.generators)
        merged.torch_generators.update(part.torch_generators)
    return merged
