"""What defines a search of ``hba-augment search``: :class:`SearchConfig`, filled in from the paper's
presets (:mod:`~hba_augment.search._presets`), and the names of its choices. :mod:`~hba_augment.search.loop`
runs the hypernetwork and teacher objectives from it; :mod:`~hba_augment.search.population` wraps it.

Importing this module does not import torch (its checks do, when they run), so that the command line takes
its choices from here and ``--help`` stays fast.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hba_augment.search._presets import DEFAULT_PRESET, PRESETS
from hba_augment.search.priors import parse_init, prior_policy

__all__ = ["HYPER_INPUTS", "OBJECTIVES", "TEACHER_ESTIMATORS", "VAL_BN", "SearchConfig"]

# Fields that may differ between the run that wrote a checkpoint and the run that resumes it.
_RESUME_FREE = frozenset({"data_dir", "name", "device", "compile", "cuda_graphs"})
# Fields added after the first checkpoints, and the value those checkpoints were searched with.
_ADDED_FIELDS = {"val_bn": "batch", "init": "paper", "hyper_input": "hparams", "prior_decay": 0.0,
                 "hparam_accumulate": 1, "objective": "hypernetwork", "teacher_decay": 0.99,
                 "teacher_estimator": "applied", "compile": False,
                 "teacher_weight": 1.0}
#: Batch norm in the validation (hyperparameter) steps: the batch's statistics or the running ones.
VAL_BN = ("batch", "running")
#: What ``lambda`` descends: the paper's hypergradient of the validation loss, or the teacher objective.
OBJECTIVES = ("hypernetwork", "teacher")
#: How the teacher objective's gradient is estimated (``SearchConfig.teacher_estimator``).
TEACHER_ESTIMATORS = ("applied", "es")
#: What the hyper-layers are conditioned on (:mod:`~hba_augment.search.hyper_input`): ``"hparams"``, the
#: paper's ``lambda_i``; ``"applied"``, what each image received.
HYPER_INPUTS = ("hparams", "applied")


@dataclass
class SearchConfig:
    """Everything that defines a search. ``SearchConfig.from_preset`` fills in the paper's defaults.

    Attributes:
        dataset: one of ``hba_augment.datasets.DATASETS``.
        data_dir: where the dataset lives (see :func:`hba_augment.datasets.load_dataset`).
        model: a name for :func:`hba_augment.models.create_model`, e.g. ``"wrn-40-2"``.
        strategy: weight-sharing strategy (:data:`hba_augment.search.STRATEGIES`, not ``"none"``).
        epochs: search epochs = schedule entries.
        train_size, val_size: sizes of the disjoint, class-balanced training and validation subsets drawn
            (with ``seed``) from the dataset's training split.
        batch_size: training and validation batch size.
        lr, lr_schedule, lr_milestones, lr_gamma, momentum, nesterov, wd: the SGD on ``phi``.
        hparam_lr: Adam learning rate of ``lambda`` (constant).
        sigma: standard deviation of the per-image perturbation ``eps_i``.
        t_train, t_val: training / validation steps per outer iteration.
        val_bn: batch norm in the validation steps: ``"batch"`` (the validation batch's statistics) or
            ``"running"`` (eval mode: the running statistics); see the module docstring.
        init: the starting policy, a name of :mod:`~hba_augment.search.priors`: ``"paper"`` (the paper's),
            ``"identity"``, ``"zero"``, ``"uniform:F"``, ``"trivialaugment"`` or a schedule file (``*.json``: its last
            entry, recorded with the file's SHA-256).
        prior_decay: after every step of ``lambda``, pull it back towards its start by the fraction
            ``hparam_lr * prior_decay`` of the distance (decoupled, as AdamW's weight decay pulls towards 0;
            ``0``: no pull, the paper). Adam moves a coordinate by about ``hparam_lr`` per step whatever the
            gradient's size, so a coordinate whose gradient keeps its sign settles about
            ``1 / prior_decay`` logits from its start, while one whose gradient is noise stays within about
            ``sqrt(hparam_lr / (2 prior_decay))`` logits of it instead of random-walking away.
        hparam_accumulate: gradients of ``lambda`` (one per validation step; one per training step with the
            teacher objective) whose mean makes one step (``1``: a step per gradient, the paper). Averaging
            ``n`` gradients divides the noise of a step by ``sqrt(n)`` and the number of steps by ``n``.
        objective: what ``lambda`` learns from. ``"hypernetwork"`` (the paper): the validation loss of the
            hypernetwork conditioned on ``lambda``, differentiated through the hyper-layers (the validation
            steps). ``"teacher"``: TeachAugment's objective (Suzuki, CVPR 2022) in this search space, with no
            validation steps: an augmentation should be hard for the network and easy for its teacher, an
            exponential moving average of the network's weights (``teacher_decay``). Each training image
            ``i`` scores ``r_i = CE(network(x_i)) - CE(teacher(x_i))`` on its augmented version, and the
            batch gives an estimate of the gradient of the mean score (``teacher_estimator``), which
            ``lambda`` ascends (one step per training step). It costs one forward pass of the teacher per
            training step and no validation images.
        teacher_estimator: how the teacher objective's gradient is estimated from the batch: ``"applied"``
            (default) from what each image applied (see :meth:`_Search._applied_ascent`), ``"es"`` from the
            perturbations alone, ``sum_i (r_i - mean r) eps_i / (n sigma)``.
        teacher_weight: ``w`` in the score ``r_i = CE(network(x_i)) - w CE(teacher(x_i))``. TeachAugment's is
            1; then an image that augmentation made unrecognisable scores about the gap between the network's
            and the teacher's confidence on noise, which a search can climb (measured: `benchmarks/RESULTS.md`);
            ``w > 1`` makes such images score below recognisable ones.
        teacher_decay: the teacher's weights follow the network's as ``t <- decay t + (1 - decay) w``
            after every training step (``objective="teacher"``). TeachAugment's 0.999 spans about 2.6 epochs
            of full CIFAR-10 (390 steps each); the default 0.99 spans about 3 epochs of the paper's 4,000
            images (32 steps each).
        hyper_input: what the hyper-layers are conditioned on: ``"hparams"`` (the paper: each image's
            perturbed ``lambda_i``) or ``"applied"`` (what each image received; see
            :mod:`~hba_augment.search.hyper_input`).
        seed: seeds the split, the model initialisation and every random stream.
        device: e.g. ``"cpu"``, ``"cuda"``, ``"cuda:1"``.
        image_size, classes, download: passed to ``load_dataset``.
        flip, crop_padding, cutout: the baseline augmentation after the policy (``0`` disables).
        count_probs: distribution of the number of ops per image (the contract, section 2); ``None``: the starting
            policy's (PBA's ``(0.2, 0.3, 0.5)``, or ``(1/14, 13/14)`` for ``trivialaugment``).
        channels_last: keep activations in channels-last memory format (``None``: on CPU only, where it
            measured about 15% faster for WRN-40-2; a layout choice, results agree up to rounding).
        amp: bfloat16 autocast for the network's forward passes (for GPUs, and CPUs with bfloat16 matrix
            units such as Intel AMX; the losses, the policy and ``lambda`` stay float32).
        compile: run the training steps through ``torch.compile`` (for GPUs, where a step is bound by
            kernel launches; the hyperparameter steps and the teacher use the plain network), and on
            accelerators the augmentation's pixel work too (``functional.augment``'s ``compile``, same
            pixels). Changes speed and rounding, not the search.
        cuda_graphs: on CUDA, replay work of every full training batch from a captured CUDA graph: the
            hypernetwork and teacher objectives' augmentation call
            (:class:`~hba_augment._graphs.CapturedCall`), a population member's whole step
            (:mod:`~hba_augment.search._member`); elsewhere, and for short batches, the same calls run
            eagerly. Changes speed, not the search.
        name: the schedule's name.
        preset: the preset these defaults came from (recorded in the provenance).
    """

    dataset: str = "cifar10"
    data_dir: str = "."
    model: str = "wrn-40-2"
    strategy: str = "first-bn"
    epochs: int = 200
    train_size: int = 4000
    val_size: int = 10000
    batch_size: int = 128
    lr: float = 0.05
    lr_schedule: str = "cosine"
    lr_milestones: tuple[int, ...] = ()
    lr_gamma: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    wd: float = 0.005
    hparam_lr: float = 0.03
    sigma: float = 1.0
    t_train: int = 2
    t_val: int = 1
    val_bn: str = "batch"
    init: str = "paper"
    prior_decay: float = 0.0
    hparam_accumulate: int = 1
    objective: str = "hypernetwork"
    teacher_decay: float = 0.99
    teacher_estimator: str = "applied"
    teacher_weight: float = 1.0
    hyper_input: str = "hparams"
    seed: int = 0
    device: str = "cpu"
    image_size: int | None = None
    classes: int | tuple[str, ...] | None = None
    download: bool = False
    flip: bool = True
    crop_padding: int = 4
    cutout: int = 16
    count_probs: tuple[float, ...] | None = None
    channels_last: bool | None = None
    amp: bool = False
    compile: bool = False
    cuda_graphs: bool = False
    name: str = "custom"
    preset: str = "cifar10"

    def __post_init__(self) -> None:
        if self.count_probs is None and isinstance(self.init, str):
            try:
                self.count_probs = prior_policy(self.init).count_probs
            except ValueError:
                pass  # validate() names the bad init
        elif isinstance(self.count_probs, list):  # e.g. from JSON
            self.count_probs = tuple(self.count_probs)

    @classmethod
    def from_preset(cls, preset: str | None = None, **overrides: Any) -> SearchConfig:
        """The paper's settings for ``preset`` (default: the dataset's, see ``DEFAULT_PRESET``), then overrides.

        ``None`` values in ``overrides`` are ignored (handy for unset command-line options).
        """
        overrides = {k: v for k, v in overrides.items() if v is not None}
        dataset = overrides.get("dataset", cls.dataset)
        if preset is None:
            preset = DEFAULT_PRESET.get(dataset, "cifar10")
        if preset not in PRESETS:
            raise ValueError(f"Unknown preset {preset!r}; expected one of {list(PRESETS)}")
        values = {**PRESETS[preset], **overrides, "preset": preset}
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown SearchConfig field(s) {sorted(unknown)}")
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        from hba_augment import _runner, functional
        from hba_augment.datasets import DATASETS
        from hba_augment.search._hyperize import STRATEGIES

        if self.dataset not in DATASETS:
            raise ValueError(f"Unknown dataset {self.dataset!r}; expected one of {list(DATASETS)}")
        if self.strategy not in STRATEGIES or self.strategy == "none":
            raise ValueError(f"Unknown strategy {self.strategy!r}; expected one of "
                             f"{[s for s in STRATEGIES if s != 'none']}")
        for name in ("epochs", "train_size", "batch_size", "t_train", "val_size", "hparam_accumulate"):
            _runner.check_int(self, name, 1)
        for name in ("t_val", "crop_padding", "cutout", "seed"):
            _runner.check_int(self, name, 0)
        for name in ("lr", "hparam_lr"):
            _runner.check_nonneg_number(self, name, positive=True)
        for name in ("wd", "sigma", "momentum", "lr_gamma", "prior_decay"):
            _runner.check_nonneg_number(self, name)
        if self.hparam_lr * self.prior_decay > 1:
            raise ValueError(f"hparam_lr * prior_decay must be at most 1 (the pull is that fraction of the distance "
                             f"to the start per step), got {self.hparam_lr} * {self.prior_decay}")
        _runner.check_lr_schedule(self)
        if self.val_bn not in VAL_BN:
            raise ValueError(f"val_bn must be one of {list(VAL_BN)}, got {self.val_bn!r}")
        parse_init(self.init)
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {self.objective!r}")
        _runner.check_nonneg_number(self, "teacher_weight")
        if not (isinstance(self.teacher_decay, (int, float)) and 0.0 <= self.teacher_decay < 1.0):
            raise ValueError(f"teacher_decay must be a number in [0, 1), got {self.teacher_decay!r}")
        if self.teacher_estimator not in TEACHER_ESTIMATORS:
            raise ValueError(f"teacher_estimator must be one of {list(TEACHER_ESTIMATORS)}, got "
                             f"{self.teacher_estimator!r}")
        if self.objective == "teacher":
            if not self.sigma > 0:
                raise ValueError(f"objective 'teacher' estimates its gradient from the per-image perturbations: "
                                 f"sigma must be > 0, got {self.sigma!r}")
            if self.hyper_input != "hparams" or self.val_bn != "batch":
                raise ValueError("objective 'teacher' has no validation steps: hyper_input must be 'hparams' and "
                                 "val_bn 'batch'")
        if self.hyper_input not in HYPER_INPUTS:
            raise ValueError(f"hyper_input must be one of {list(HYPER_INPUTS)}, got {self.hyper_input!r}")
        if self.image_size is not None and (isinstance(self.image_size, bool) or not isinstance(
                self.image_size, int) or self.image_size < 1):
            raise ValueError(f"image_size must be a positive int or None, got {self.image_size!r}")
        functional.check_count_probs(self.count_probs)
        _runner.check_device(self.device)
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-compatible values (tuples become lists)."""
        from hba_augment import _runner

        return _runner.config_to_dict(self)
