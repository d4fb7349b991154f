"""What defines a training run of ``hba-augment train``: :class:`TrainConfig`, the paper's evaluation
hyperparameters it starts from (:data:`PAPER_HPARAMS`, :data:`EVAL_PRESETS`) and the policy names it takes
(:func:`parse_policy`). :mod:`~hba_augment.train.trainer` runs it.

Importing this module does not import torch (its checks do, when they run), so that the command line takes
its choices from here and ``--help`` stays fast.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hba_augment import _cli_common
from hba_augment._baselines import BASELINES

__all__ = [
    "DEFAULT_PRESET",
    "EVAL_PRESETS",
    "EVAL_SPLITS",
    "PAPER_HPARAMS",
    "POLICY_KINDS",
    "TrainConfig",
    "model_family",
    "parse_policy",
]

#: Policy kinds; ``hba`` is written ``hba:<shipped name or schedule path>``.
POLICY_KINDS = ("none", "baseline", "cutout", "autoaugment", "randaugment", "trivialaugment", "hba")
_PER_IMAGE = ("autoaugment", "randaugment", "trivialaugment")

#: The paper's appendix table "Hyperparameters for policy evaluation" (which follows PBA except for
#: ImageNet): ``PAPER_HPARAMS[preset][model family] = (lr, weight decay, batch size, epochs)``.
PAPER_HPARAMS: dict[str, dict[str, tuple[float, float, int, int]]] = {
    "cifar10": {
        "wrn": (0.1, 0.0005, 128, 200),
        "shake-shake": (0.01, 0.001, 128, 1800),
        "pyramidnet": (0.05, 0.00005, 64, 1800),
    },
    "cifar100": {
        "wrn": (0.1, 0.0005, 128, 200),
        "shake-shake": (0.01, 0.0025, 128, 1800),
        "pyramidnet": (0.025, 0.0005, 64, 1800),
    },
    "svhn": {
        "wrn": (0.005, 0.001, 128, 160),
        "shake-shake": (0.01, 0.00015, 128, 160),
    },
    "imagenet": {
        "resnet": (0.1, 0.0001, 256, 270),
    },
}

#: Per-preset settings besides the table: learning-rate schedule, the baseline augmentation (the same as
#: the search's presets) and torchvision's AutoAugment policy.
EVAL_PRESETS: dict[str, dict[str, Any]] = {
    "cifar10": {"lr_schedule": "cosine", "lr_milestones": (), "autoaugment_policy": "CIFAR10",
                **BASELINES["cifar10"]},
    "cifar100": {"lr_schedule": "cosine", "lr_milestones": (), "autoaugment_policy": "CIFAR10",
                 **BASELINES["cifar10"]},
    "svhn": {"lr_schedule": "cosine", "lr_milestones": (), "autoaugment_policy": "SVHN",
             **BASELINES["svhn"]},
    # Paper: ImageNet uses a step decay at epochs 90, 180, 240. Its 224x224 baseline (random resized crop,
    # colour and PCA jitter) does not apply to the small ImageFolder copies here: flip + pad-4 crop, as
    # the search's ImageNet preset.
    "imagenet": {"lr_schedule": "step", "lr_milestones": (90, 180, 240), "autoaugment_policy": "IMAGENET",
                 **BASELINES["imagenet"]},
}
#: Preset used for each dataset when none is named (``imagefolder`` + ``--preset cifar10`` for CIFAR-10 JPEG).
DEFAULT_PRESET = {"cifar10": "cifar10", "cifar100": "cifar100", "svhn": "svhn", "imagefolder": "imagenet"}
#: What a run is tested on: the test split, or held-out images of the train split (for tuning).
EVAL_SPLITS = ("test", "val")
# May differ between the run that wrote a checkpoint and the one that resumes it (they do not change
# what is trained).
_RESUME_FREE = frozenset({"data_dir", "device", "num_workers", "eval_every", "eval_batch_size", "download", "compile",
                          "cuda_graphs", "checkpoint_every"})
# Fields added after the first checkpoints, and the value those checkpoints were trained with.
_ADDED_FIELDS = {"eval_split": "test", "compile": False, "cuda_graphs": False, "checkpoint_every": 1}


def model_family(model: str) -> str:
    """The family of a model name, as used in :data:`PAPER_HPARAMS` (``"wrn-40-2"`` -> ``"wrn"``)."""
    name = model.strip().lower()
    for family in ("wrn", "shake-shake", "pyramidnet", "resnet", "alexnet"):
        if name.startswith(family):
            return family
    return name


def parse_policy(policy: str) -> tuple[str, str | None]:
    """Split a policy string into ``(kind, argument)``: ``"hba:cifar10"`` -> ``("hba", "cifar10")``.

    Raises:
        ValueError: an unknown kind, or ``hba`` without a schedule.
    """
    if not isinstance(policy, str):
        raise ValueError(f"policy must be a string, got {policy!r}")
    text = policy.strip()
    kind, sep, arg = text.partition(":")
    kind = kind.strip().lower()
    if kind == "hba":
        if not sep or not arg.strip():
            raise ValueError(f"policy {policy!r}: write hba:<shipped name or schedule JSON path>, e.g. hba:cifar10")
        return "hba", arg.strip()
    if sep or kind not in POLICY_KINDS:
        names = ", ".join(k for k in POLICY_KINDS if k != "hba")
        raise ValueError(f"Unknown policy {policy!r}; expected one of {names} or hba:<name or path>")
    return kind, None


def _check_model_name(name: str) -> None:
    import torch

    from hba_augment.models import create_model

    # On the meta device nothing is allocated, so this is cheap even for WRN-28-10.
    with torch.device("meta"):
        create_model(name, 2)


def _load_hba(schedule: str, total_epochs: int, compile: bool = False) -> Any:
    from hba_augment.policy import HBAPolicy

    try:
        return HBAPolicy(policy=schedule, total_epochs=total_epochs, compile=compile)
    except OSError as e:
        raise ValueError(f"cannot read HBA schedule {schedule!r}: {e}") from None


def _paper_defaults(preset: str, model: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """The paper's settings for ``preset`` and ``model``'s family, and where they came from (``hparams_source``).

    A family without a row in the preset takes the preset's first row. The step schedule's milestones are
    scaled by ``epochs / table epochs`` when ``overrides`` sets ``epochs`` and not ``lr_milestones``.
    """
    if preset not in EVAL_PRESETS:
        raise ValueError(f"Unknown preset {preset!r}; expected one of {list(EVAL_PRESETS)}")
    table = PAPER_HPARAMS[preset]
    family = model_family(model) if isinstance(model, str) else ""
    row_family = family if family in table else next(iter(table))
    lr, wd, batch_size, epochs = table[row_family]
    source = f"paper table: {preset} / {row_family}"
    if row_family != family:
        source += f" (no row for {family!r}; using the preset's first row)"
    values: dict[str, Any] = {
        "lr": lr, "wd": wd, "batch_size": batch_size, "epochs": epochs,
        **{k: v for k, v in EVAL_PRESETS[preset].items() if k != "autoaugment_policy"},
        "hparams_source": source,
    }
    if "epochs" in overrides and "lr_milestones" not in overrides and values["lr_milestones"]:
        scale = overrides["epochs"] / epochs
        values["lr_milestones"] = tuple(sorted({max(1, round(m * scale)) for m in values["lr_milestones"]}))
    return values


@dataclass
class TrainConfig:
    """Everything that defines a training run. ``TrainConfig.from_preset`` fills in the paper's defaults.

    Attributes:
        dataset: one of ``hba_augment.datasets.DATASETS``.
        data_dir: where it lives (see :func:`hba_augment.datasets.load_dataset`).
        model: a :func:`~hba_augment.models.create_model` name.
        policy: ``none``, ``baseline``, ``cutout``, ``autoaugment``, ``randaugment``, ``trivialaugment`` or
            ``hba:<shipped name or path>``.
        preset: ``cifar10``, ``cifar100``, ``svhn`` or ``imagenet``: the protocol whose settings are used.
        epochs: training epochs (>= 1).
        train_size, test_size: class-balanced subsets of the train / test split (``None``: all).
        subset_seed: seed of those subsets (``None``: ``seed``).
        eval_split: ``"test"``: test on the test split; ``"val"``: test on held-out images of the train
            split instead, disjoint from the ``train_size`` training images (``test_size`` of them, default
            all the rest), for tuning without looking at the test split. The training images are the same
            for both (the same ``subset_seed``).
        batch_size, lr, lr_schedule, lr_milestones, lr_gamma, momentum, nesterov, wd: the SGD.
        seed: model initialisation and every random stream of training.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        image_size, classes, download: passed to ``load_dataset``.
        flip, crop_padding, cutout: the baseline augmentation and the Cutout size.
        num_workers: DataLoader workers for the per-image (torchvision) policies; ``None``: automatic
            (``min(8, cores - 1)``). Results do not depend on it.
        eval_every: test every this many epochs (0: only after the last; the last is always tested).
        eval_batch_size: batch size of testing.
        checkpoint_every: write ``checkpoint.pt`` every this many epochs and after the last (0: only after the
            last): what an interrupted run loses, against the time a checkpoint takes
            (:func:`~hba_augment._runner.checkpoint_due`).
        channels_last: run the model in channels-last memory format (faster convolutions).
        amp: bfloat16 autocast for the forward pass.
        compile: train through ``torch.compile(model)`` (for GPUs, where a step is bound by kernel launches;
            testing uses the plain model), and on accelerators an ``hba:`` policy's pixel work too
            (``HBAPolicy(compile=True)``, same pixels). Changes speed and rounding, not the training.
        cuda_graphs: on CUDA, replay each full training batch's whole step (the batched policy, the baseline
            augmentation, forward, backward and a fused SGD step) from one captured CUDA graph
            (:class:`~hba_augment._runner.CapturedStep`); elsewhere the same step runs eagerly. One process,
            not with ``compile``. Changes speed and rounding, not the training.
        hparams_source: where the defaults came from (filled in by ``from_preset``).
    """

    dataset: str = "cifar10"
    data_dir: str = "."
    model: str = "wrn-40-2"
    policy: str = "cutout"
    preset: str = "cifar10"
    epochs: int = 200
    train_size: int | None = None
    test_size: int | None = None
    subset_seed: int | None = None
    eval_split: str = "test"
    batch_size: int = 128
    lr: float = 0.1
    lr_schedule: str = "cosine"
    lr_milestones: tuple[int, ...] = ()
    lr_gamma: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    wd: float = 0.0005
    seed: int = 0
    device: str = "cpu"
    image_size: int | None = None
    classes: int | tuple[str, ...] | None = None
    download: bool = False
    flip: bool = True
    crop_padding: int = 4
    cutout: int = 16
    num_workers: int | None = None
    eval_every: int = 10
    eval_batch_size: int = 500
    checkpoint_every: int = 1
    channels_last: bool = True
    amp: bool = False
    compile: bool = False
    cuda_graphs: bool = False
    hparams_source: str = "custom"

    @classmethod
    def from_preset(cls, preset: str | None = None, **overrides: Any) -> TrainConfig:
        """The paper's settings for ``preset`` and the model's family, then ``overrides``.

        ``None`` values in ``overrides`` are ignored (unset command-line options). ``preset`` defaults to
        ``DEFAULT_PRESET[dataset]``. A model family that the paper's table has no row for in that preset
        takes the preset's first row (WRN for CIFAR and SVHN, ResNet for ImageNet). The step schedule's
        milestones are scaled by ``epochs / table epochs`` when ``epochs`` is overridden and
        ``lr_milestones`` is not.
        """
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if preset is None:
            preset = DEFAULT_PRESET.get(overrides.get("dataset", cls.dataset), "cifar10")
        defaults = _paper_defaults(preset, overrides.get("model", cls.model), overrides)
        values = {**defaults, **overrides, "preset": preset, "hparams_source": defaults["hparams_source"]}
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown TrainConfig field(s) {sorted(unknown)}")
        if isinstance(values.get("lr_milestones"), list):
            values["lr_milestones"] = tuple(values["lr_milestones"])
        config = cls(**values)
        config.validate()
        return config

    @property
    def policy_kind(self) -> str:
        return parse_policy(self.policy)[0]

    def augmentation(self) -> dict[str, Any]:
        """What is applied to training images: ``{"policy", "flip", "crop_padding", "cutout"}``."""
        kind = self.policy_kind
        if kind == "none":
            return {"policy": None, "flip": False, "crop_padding": 0, "cutout": 0}
        return {"policy": None if kind in ("baseline", "cutout") else self.policy, "flip": self.flip,
                "crop_padding": self.crop_padding, "cutout": 0 if kind == "baseline" else self.cutout}

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field (the model name and HBA schedule included)."""
        from hba_augment import _runner
        from hba_augment.datasets import DATASETS

        if self.dataset not in DATASETS:
            raise ValueError(f"Unknown dataset {self.dataset!r}; expected one of {list(DATASETS)}")
        if self.preset not in EVAL_PRESETS:
            raise ValueError(f"Unknown preset {self.preset!r}; expected one of {list(EVAL_PRESETS)}")
        for name in ("epochs", "batch_size", "eval_batch_size"):
            _runner.check_int(self, name, 1)
        for name in ("train_size", "test_size"):
            _runner.check_int(self, name, 1, optional=True)
        for name in ("seed", "crop_padding", "cutout", "eval_every", "checkpoint_every"):
            _runner.check_int(self, name, 0)
        _runner.check_int(self, "subset_seed", 0, optional=True)
        if self.eval_split not in EVAL_SPLITS:
            raise ValueError(f"eval_split must be one of {list(EVAL_SPLITS)}, got {self.eval_split!r}")
        if self.eval_split == "val" and self.train_size is None:
            raise ValueError(f"{_cli_common.option('eval_split', 'val')} needs {_cli_common.option('train_size')}: "
                             "the validation images are the train split's images outside the training subset")
        _runner.check_int(self, "num_workers", 0, optional=True)
        _runner.check_int(self, "image_size", 1, optional=True)
        _runner.check_nonneg_number(self, "lr", positive=True)
        for name in ("wd", "momentum", "lr_gamma"):
            _runner.check_nonneg_number(self, name)
        _runner.check_lr_schedule(self)
        _runner.check_device(self.device)
        if not isinstance(self.model, str):
            raise ValueError(f"model must be a string, got {self.model!r}")
        _check_model_name(self.model)
        kind, arg = parse_policy(self.policy)
        if kind == "cutout" and self.cutout == 0:
            raise ValueError(f"policy 'cutout' needs a Cutout size, but the {self.preset} preset has none; "
                             f"pass {_cli_common.option('cutout', 'SIZE', placeholder=True)}")
        if kind == "hba":
            _load_hba(arg, self.epochs)
        if self.cuda_graphs and self.compile:
            raise ValueError(f"{_cli_common.option('cuda_graphs', True)} and {_cli_common.option('compile', True)} "
                             "exclude each other: choose one")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-compatible values (tuples become lists)."""
        from hba_augment import _runner

        return _runner.config_to_dict(self)
