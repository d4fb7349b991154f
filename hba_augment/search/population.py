"""A population-based search over HBA's schedule space (``hba-augment search --objective population``).

PBA's search (Ho et al., ICML 2019: Population-Based Training, Jaderberg et al. 2017) in the policy space of
the contract, sections 2-4. Why: the paper's hypernetwork objective gives ``lambda`` a gradient that is
noise (its validation loss moves by at most 0.003 nats when ``lambda`` moves by 4 logits), and the teacher
objective drifts to weak augmentation that trains a worse network. A population's signal is real by
construction: the validation accuracy of networks actually trained with each policy.

The algorithm:

1. ``population`` members, each a plain network of the search's model, trained with the search's
   optimiser, learning-rate schedule, batch size and baseline augmentation for the search's epochs, each
   with its own constant policy ``(prob, mag)`` between rounds. With ``member_start="explored"`` member 0
   starts at the ``init`` policy itself and every other member at an explored copy of it
   (:func:`~hba_augment.search.pbt.explore`), so that they differ and the start stays in the race; with
   ``"same"`` every member starts at the ``init`` policy, as PBA's members do.
2. A *round* is ``exploit_every`` epochs. After each, every member is tested on the search's validation
   images (clean, eval mode; with ``score_ema``, an exponential moving average of its weights is tested
   instead, so that the score is not the high learning rate's bounce); then truncation selection
   (:func:`~hba_augment.search.pbt.truncation_selection`): each member of the bottom 25% copies the weights
   and optimiser state of a random member of the top 25% and an explored copy of its policy (with
   ``amount="held"`` shifted back to the start's amount of augmentation, :func:`~hba_augment.search.pbt.hold_amount`,
   so that selection chooses the mix only; with ``resample="prior"`` a resampled value returns to the start's,
   :func:`~hba_augment.search.pbt.resample_anchor`, so that the walk does not forget the start; with
   ``vary="magnitudes"`` only the magnitudes are explored). The others go
   on unchanged, except that with ``amount="profile"`` every member is shifted to the next round's target, the
   ``amount_profile`` schedule's amount at that round's first epoch (:func:`~hba_augment.search.pbt.amount_targets`).
3. After the last round, the schedule is the lineage of the best member
   (:func:`~hba_augment.search.pbt.lineage`): for every epoch, the policy that the network which became
   the final best one was trained with, following its copies back through the members it copied from.

Members run in ``population_procs`` processes on the one device (``torch.multiprocessing`` 'spawn', each
process persistent and holding its members' networks; :mod:`~hba_augment.search._member`), or in this
process one after another (``population_procs=0``). Weights travel between processes through state files
in ``OUT/population/round_NNNN/``; the driver reads numbers from the processes once per round only. Every
random draw comes from generators seeded from ``seed`` and the member's index, so a search is reproducible
(bit for bit on the CPU) whatever the number of processes.

Files: ``schedule.json`` (with provenance), ``metrics.jsonl`` (one line per round: every member's
validation accuracy, the copies made, the policies' means), ``schedule.png`` and ``checkpoint.pt``
(after every round, with the members' files of the last round: ``resume=True`` continues at a round
boundary, bit for bit on the CPU). The members' files are removed once the schedule is written. An ``init``
schedule file is read only as a session starts; its SHA-256 is among the checkpoint's settings, so a
session refuses to resume from a file edited since the search began.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from hba_augment import _cli_common, _distributed, _runner
from hba_augment._version import __version__
from hba_augment.schedule import Schedule
from hba_augment.search import pbt
from hba_augment.search._member import FusedWorker, Worker, serve
from hba_augment.search.loop import (
    CHECKPOINT_FILE,
    METRICS_FILE,
    PLOT_FILE,
    SCHEDULE_FILE,
    SearchConfig,
    SearchDivergedError,
    SearchResult,
    finite_provenance,
    load_search_data,
    training_provenance,
)
from hba_augment.search.priors import (
    Prior,
    amount_profile,
    init_provenance,
    prior_policy,
    profile_provenance,
    schedule_file,
)

__all__ = ["MEMBERS_FOLDER", "PopulationConfig", "run_population_search"]

#: The folder of the output folder that holds the members' state files between rounds.
MEMBERS_FOLDER = "population"
_CHECKPOINT_FORMAT = "hba-population-checkpoint"
_CHECKPOINT_VERSION = 1
# May differ between the session that wrote a checkpoint and the one that resumes it.
_RESUME_FREE = frozenset({"data_dir", "name", "device", "compile", "population_procs", "population_lanes",
                          "cuda_graphs"})
# Fields added after checkpoints were first written, with the value such a checkpoint ran with. (population_fuse
# is not resume-free: a fused process's members share one augmentation stream, which each member's state file
# holds, so members resumed apart would draw alike.)
_ADDED_FIELDS = {"member_start": "explored", "score_ema": None, "amount": "free", "resample": "uniform",
                 "population_fuse": False, "amount_profile": None, "vary": "all"}


@dataclass
class PopulationConfig:
    """A population search: the search's settings and the population's.

    Attributes:
        search: the :class:`~hba_augment.search.config.SearchConfig` whose data split, model, optimiser,
            learning-rate schedule, epochs, baseline augmentation, ``init``, ``count_probs``, ``seed``,
            ``device``, ``amp`` and ``channels_last`` every member uses (its hypernetwork and teacher
            settings are not used; ``compile`` is not supported).
        population: members, >= 2 (PBA: 16; default 8, what one H100 trains side by side).
        exploit_every: epochs per round (``None``: :func:`~hba_augment.search.pbt.default_exploit_every`,
            PBA's 3 per 200 epochs scaled to the search's epochs).
        population_procs: worker processes (``None``: one per member, or one for them all with
            ``population_fuse``; ``0``: every member in the calling process). At most ``population``.
        population_lanes: members a process trains at the same time, each in a lane of its own
            (:mod:`hba_augment._lanes`: a thread and, on CUDA, a stream; on a GPU, with ``cuda_graphs``,
            their kernels share it where processes take turns); 1: one after another.
        population_fuse: each process trains its members as one fused network
            (:class:`~hba_augment.search._member.FusedWorker`: WRNs, not with ``cuda_graphs`` or lanes);
            a member's augmentation draws then depend on which members share its process.
        resample_prob, max_shift, quantile: PBA's explore and exploit settings (:mod:`~hba_augment.search.pbt`).
        member_start: how round 0's members start, one of :data:`~hba_augment.search.pbt.MEMBER_STARTS`
            (``"explored"``: member 0 at ``init``, the others at explored copies; ``"same"``: all at ``init``,
            as PBA's search).
        score_ema: score each member on an exponential moving average of its weights with this decay per
            training step, in (0, 1) (:class:`~hba_augment._runner.WeightEMA`; ``None``: on its weights, as
            PBA). The schedule is still the lineage of policies; only the score changes.
        amount: one of :data:`~hba_augment.search.pbt.AMOUNTS`: ``"free"`` (PBA), ``"held"`` (every explored
            policy, round 0's included, is shifted back to the ``init`` policy's mean probability and mean
            magnitude fraction; :func:`~hba_augment.search.pbt.hold_amount`) or ``"profile"`` (every member is
            shifted, as each round starts, to ``amount_profile``'s amount at the round's first epoch;
            :func:`~hba_augment.search.pbt.amount_targets`).
        amount_profile: with ``amount="profile"`` only: a schedule file whose amount over time the members
            follow (stretched to the search's epochs; :func:`~hba_augment.search.priors.amount_profile`).
        resample: one of :data:`~hba_augment.search.pbt.RESAMPLES`: ``"uniform"`` (PBA: a resampled value is a
            uniform draw over its range) or ``"prior"`` (it returns to the ``init`` policy's value;
            :func:`~hba_augment.search.pbt.resample_anchor`).
        vary: one of :data:`~hba_augment.search.pbt.VARIES`: ``"all"`` (PBA: explore varies every value) or
            ``"magnitudes"`` (the probabilities stay the ``init`` policy's, shifted to the held amount if any,
            and selection chooses the magnitudes only).

    The search's ``cuda_graphs`` (:class:`~hba_augment.search.config.SearchConfig`) replays each member's full
    training batches from a captured CUDA graph (:mod:`~hba_augment.search._member`); elsewhere the same
    steps run eagerly. It changes speed and rounding, not the search.
    """

    search: SearchConfig
    population: int = pbt.DEFAULT_POPULATION
    exploit_every: int | None = None
    population_procs: int | None = None
    population_lanes: int = 1
    population_fuse: bool = False
    resample_prob: float = pbt.EXPLORE_RESAMPLE_PROB
    max_shift: int = pbt.EXPLORE_MAX_SHIFT
    quantile: float = pbt.TRUNCATION_QUANTILE
    member_start: str = pbt.DEFAULT_MEMBER_START
    score_ema: float | None = None
    amount: str = "free"
    amount_profile: str | None = None
    resample: str = "uniform"
    vary: str = "all"

    @property
    def every(self) -> int:
        """Epochs per round, the default resolved."""
        if self.exploit_every is None:
            return pbt.default_exploit_every(self.search.epochs)
        return self.exploit_every

    @property
    def procs(self) -> int:
        """Worker processes, the default resolved (0: in the calling process; fused members: one process)."""
        if self.population_procs is None:
            return 1 if self.population_fuse else self.population
        return self.population_procs

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        if not isinstance(self.search, SearchConfig):
            raise ValueError(f"search must be a SearchConfig, got {type(self.search).__name__}")
        self.search.validate()
        _runner.check_int(self, "population", 2)
        _runner.check_int(self, "exploit_every", 1, optional=True)
        _runner.check_int(self, "population_procs", 0, optional=True)
        _runner.check_int(self, "population_lanes", 1)
        if self.procs > self.population:
            raise ValueError(f"{_cli_common.option('population_procs')} must be at most "
                             f"{_cli_common.option('population')} ({self.population}), got {self.procs}")
        if self.population_fuse:
            from hba_augment.models.fused import fuses

            if not fuses(self.search.model):
                raise ValueError(f"{_cli_common.option('population_fuse', True)} needs a WRN model, got "
                                 f"{self.search.model!r}")
            # A process's members are one network: no lanes, no graphs of a member's step.
            for name, value, refused in (("cuda_graphs", self.search.cuda_graphs, self.search.cuda_graphs),
                                         ("population_lanes", self.population_lanes, self.population_lanes > 1)):
                if refused:
                    raise ValueError(f"{_cli_common.option('population_fuse', True)} does not take "
                                     f"{_cli_common.option(name, value)}")
        if self.search.compile:
            raise ValueError(f"the population search does not support {_cli_common.option('compile', True)}: "
                             "every worker process would compile its own networks")
        if self.search.objective != "hypernetwork":
            raise ValueError(f"the population search has no objective of its own to combine with, got objective "
                             f"{self.search.objective!r} in its SearchConfig (leave it at 'hypernetwork')")
        pbt.check_settings(resample_prob=self.resample_prob, max_shift=self.max_shift, quantile=self.quantile,
                           member_start=self.member_start, score_ema=self.score_ema, amount=self.amount,
                           resample=self.resample, vary=self.vary)
        if self.amount == "profile":
            if self.amount_profile is None:
                raise ValueError(f"{_cli_common.option('amount', 'profile')} needs "
                                 f"{_cli_common.option('amount_profile', 'SCHEDULE.json', placeholder=True)}")
            schedule_file(self.amount_profile, _cli_common.option("amount_profile"))
        elif self.amount_profile is not None:
            raise ValueError(f"{_cli_common.option('amount_profile', self.amount_profile)} goes with "
                             f"{_cli_common.option('amount', 'profile')} only, got "
                             f"{_cli_common.option('amount', self.amount)}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-compatible values, the search's fields first (one flat record)."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "search"}
        return {**self.search.to_dict(), **own, "exploit_every": self.every, "population_procs": self.procs}


class _Init(NamedTuple):
    """What a session reads of the search's ``init`` once, as it starts (:func:`_read_init`): a schedule file
    edited while the search runs changes nothing of that session, and a session that resumes refuses an
    edited file (its hash, in ``provenance``, is among the checkpoint's settings)."""

    prior: Prior
    holds: list[tuple[float, float]] | None  # per round, the amount the members are held to (None: free)
    anchor: tuple[np.ndarray, np.ndarray] | None  # what a resampled value returns to (None: a uniform draw)
    provenance: dict[str, Any]  # init_provenance and profile_provenance: names, and files' hashes

    def hold(self, r: int) -> tuple[float, float] | None:
        """The amount round ``r``'s policies are held to (``None``: free)."""
        return None if self.holds is None else self.holds[r]


def _read_init(config: PopulationConfig) -> _Init:
    prior = prior_policy(config.search.init)
    starts = pbt.round_starts(config.search.epochs, config.every)
    profile, provenance = None, init_provenance(config.search.init)
    if config.amount_profile is not None:
        profile = amount_profile(config.amount_profile, config.search.epochs)
        provenance = {**provenance, **profile_provenance(config.amount_profile)}
    return _Init(prior, pbt.amount_targets(config.amount, prior, starts, profile),
                 pbt.resample_anchor(config.resample, prior), provenance)


@dataclass
class _History:
    """What the rounds so far decided: the driver's whole state (saved in ``checkpoint.pt``)."""

    parents: list[list[int]] = field(default_factory=list)  # per round: whose weights each member started with
    prob: list[np.ndarray] = field(default_factory=list)  # per round: (N, 2, 15), the members' policies
    mag: list[np.ndarray] = field(default_factory=list)
    val_acc: list[list[float]] = field(default_factory=list)
    plan_parents: list[int] = field(default_factory=list)  # the next round's
    plan_prob: np.ndarray | None = None
    plan_mag: np.ndarray | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0
    sessions: int = 1

    @property
    def rounds(self) -> int:
        return len(self.parents)

    def state(self) -> dict[str, Any]:
        def stack(arrays: list[np.ndarray]) -> torch.Tensor:
            return torch.from_numpy(np.stack(arrays)) if arrays else torch.zeros(0)

        return {
            "parents": [list(p) for p in self.parents],
            "prob": stack(self.prob),
            "mag": stack(self.mag),
            "val_acc": [list(v) for v in self.val_acc],
            "plan_parents": list(self.plan_parents),
            "plan_prob": torch.from_numpy(self.plan_prob),
            "plan_mag": torch.from_numpy(self.plan_mag),
            "metrics": self.metrics,
            "wall_seconds": self.wall_seconds,
            "sessions": self.sessions,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _History:
        rounds = len(state["parents"])
        return cls(
            parents=[list(p) for p in state["parents"]],
            prob=[state["prob"][r].numpy() for r in range(rounds)],
            mag=[state["mag"][r].numpy() for r in range(rounds)],
            val_acc=[list(v) for v in state["val_acc"]],
            plan_parents=list(state["plan_parents"]),
            plan_prob=state["plan_prob"].numpy(),
            plan_mag=state["plan_mag"].numpy(),
            metrics=list(state["metrics"]),
            wall_seconds=float(state["wall_seconds"]),
            sessions=int(state["sessions"]) + 1,
        )


def _plain(data: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    return data.images.numpy(), data.labels.numpy(), list(data.classes)


class _Pool:
    """The members' workers: processes (each a :class:`~hba_augment.search._member.Worker`) or one
    in-process worker. Member ``m`` lives in process ``m % procs``."""

    def __init__(self, config: PopulationConfig, train: Any, val: Any) -> None:
        n, procs = config.population, config.procs
        self.local: Worker | None = None
        self.processes: list[Any] = []
        self.inboxes: list[Any] = []
        if procs == 0:
            self.groups = [list(range(n))]
            worker = FusedWorker if config.population_fuse else Worker
            self.local = worker(config.search, train, val, self.groups[0], config.score_ema, config.population_lanes)
            return
        self.groups = [list(range(p, n, procs)) for p in range(procs)]
        ctx = torch.multiprocessing.get_context("spawn")
        self.results = ctx.Queue()
        # The images travel as numpy arrays, pickled through each process's inbox: torch tensors would go
        # through shared memory, which a container's small /dev/shm (64 MiB by default) may not hold.
        train, val = _plain(train), _plain(val)
        # The processes share the machine's cores (on a GPU they only feed it).
        threads = max(1, torch.get_num_threads() // procs)
        try:
            for group in self.groups:
                inbox = ctx.Queue()
                proc = ctx.Process(target=serve, args=(config.search, group, threads, inbox, self.results,
                                                       config.score_ema, config.population_lanes,
                                                       config.population_fuse), daemon=True)
                proc.start()
                self.processes.append(proc)
                self.inboxes.append(inbox)
                # The images follow as the first message, not as the process's arguments: 'spawn' writes its
                # arguments into a pipe that the new process reads only once it has started, so a process
                # that dies while starting (say, a __main__ it cannot import) blocked that write, and this
                # driver, for good. A queue writes from a thread of its own; _receive sees the death.
                inbox.put((train, val))
            for _ in self.groups:
                self._receive("ready")
        except BaseException:
            self.close()
            raise

    def _receive(self, expected: str) -> Any:
        """The next answer of any process; raises the error a process reported, or that one died."""
        while True:
            try:
                message = self.results.get(timeout=2.0)
            except queue.Empty:
                dead = [(i, p.exitcode) for i, p in enumerate(self.processes) if p.exitcode is not None]
                if dead:
                    i, code = dead[0]
                    raise RuntimeError(f"population worker process {i} (members {self.groups[i]}) exited with "
                                       f"status {code}; the last checkpoint is intact (--resume continues)") from None
                continue
            if message[0] == "error":
                _, kind, text = message
                raise (ValueError if kind == "value" else RuntimeError)(f"in a population worker process: {text}")
            if message[0] != expected:
                raise RuntimeError(f"population worker answered {message[0]!r}, expected {expected!r}")
            return message[1]

    def run(self, tasks: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """Run one round: ``{member: task}`` -> ``{member: record}`` (see ``Worker.run_round``)."""
        if self.local is not None:
            records = self.local.run_round([tasks[m] for m in self.groups[0]])
        else:
            for inbox, group in zip(self.inboxes, self.groups, strict=True):
                inbox.put([tasks[m] for m in group])
            records = [r for _ in self.groups for r in self._receive("ok")]
        return {r["member"]: r for r in records}

    def close(self) -> None:
        """Stop the processes (they finish their current message first; stragglers are terminated)."""
        for inbox in self.inboxes:
            inbox.put(None)
        for proc in self.processes:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        for inbox in self.inboxes:
            # What a process did not read (it died) must not keep this one from exiting: its queue's
            # writing thread would wait on the full pipe forever.
            inbox.cancel_join_thread()
        self.processes, self.inboxes = [], []


def _round_0(config: PopulationConfig, init: _Init) -> _History:
    """Round 0's plan: member 0 at the start policy, the others at explored copies of it or at the start
    itself (``config.member_start``)."""
    prob, mag = pbt.start_policies(init.prior.prob, init.prior.mag, config.population, config.search.seed,
                                   member_start=config.member_start, resample_prob=config.resample_prob,
                                   max_shift=config.max_shift, hold=init.hold(0), anchor=init.anchor,
                                   hold_all=config.amount == "profile", vary=config.vary)
    return _History(plan_parents=list(range(config.population)), plan_prob=prob, plan_mag=mag)


def _round_dir(out: Path, r: int) -> Path:
    return out / MEMBERS_FOLDER / f"round_{r:04d}"


def _tasks(out: Path, history: _History, r: int, epochs: int, resumed: bool) -> dict[int, dict[str, Any]]:
    """Round ``r``'s task for every member. A member that copies (or every member, in the first round of a
    resumed session) loads its weights from last round's file of its parent; a resumed member also loads
    its own random streams."""
    tasks = {}
    previous = _round_dir(out, r - 1)
    for m, parent in enumerate(history.plan_parents):
        load = r > 0 and (parent != m or resumed)
        tasks[m] = {
            "member": m,
            "prob": history.plan_prob[m],
            "mag": history.plan_mag[m],
            "epochs": epochs,
            "save": str(_round_dir(out, r) / f"member_{m}.pt"),
            "weights": previous / f"member_{parent}.pt" if load else None,
            "streams": previous / f"member_{m}.pt" if load and resumed else None,
        }
    return tasks


def _exploit(config: PopulationConfig, init: _Init, history: _History, scores: list[float],
             r: int) -> list[tuple[int, int]]:
    """Truncation selection on ``scores`` and the next round's plan (copies with explored policies)."""
    history.plan_parents, history.plan_prob, history.plan_mag, copies = pbt.exploit(
        history.plan_prob, history.plan_mag, scores, config.search.seed, r, quantile=config.quantile,
        resample_prob=config.resample_prob, max_shift=config.max_shift, hold=init.hold(r + 1), anchor=init.anchor,
        hold_all=config.amount == "profile", vary=config.vary)
    return copies


def _round_metrics(r: int, first: int, last: int, records: dict[int, dict[str, Any]], prob: np.ndarray,
                   mag: np.ndarray, copies: list[tuple[int, int]], lr: float, seconds: float) -> dict[str, Any]:
    n = len(records)
    members = [records[m] for m in range(n)]
    mean_prob = prob.reshape(n, -1).mean(1)
    mean_frac = pbt.mag_fractions(mag).reshape(n, -1).mean(1)
    val_acc = [x["val_acc"] for x in members]
    return {
        "round": r,
        "epochs": [first, last],  # the round trained epochs first..last - 1
        "val_acc": val_acc,
        "val_loss": [x["val_loss"] for x in members],
        "train_loss": [x["train_loss"] for x in members],
        "train_acc": [x["train_acc"] for x in members],
        "best_member": pbt.ranking(val_acc)[0],
        "best_val_acc": max(val_acc),
        "mean_val_acc": float(np.mean(val_acc)),
        "copies": [{"to": loser, "from": donor} for loser, donor in copies],
        "mean_prob": mean_prob.tolist(),
        "mean_mag_fraction": mean_frac.tolist(),
        "population_mean_prob": float(mean_prob.mean()),
        "population_mean_mag_fraction": float(mean_frac.mean()),
        "lr": lr,
        "member_seconds": [x["seconds"] for x in members],
        "round_seconds": seconds,
    }


def _schedule(config: PopulationConfig, history: _History, starts: list[int], provenance: dict[str, Any]) -> Schedule:
    """The best member's lineage as one entry per epoch."""
    final = history.val_acc[-1]
    best = pbt.ranking(final)[0]
    chain = pbt.lineage(history.parents, best)
    prob, mag = pbt.lineage_policies(history.prob, history.mag, chain, starts, config.search.epochs)
    provenance = {**provenance, "best_member": best, "final_val_acc": final[best], "final_val_accs": final,
                  "lineage": chain}
    provenance = finite_provenance(provenance)
    return Schedule(prob, mag, name=config.search.name, count_probs=config.search.count_probs, provenance=provenance)


def _provenance(config: PopulationConfig, init: _Init, history: _History, train: Any, val: Any, source: str,
                device: torch.device, command: str, commit: str | None) -> dict[str, Any]:
    cfg = config.search
    return {
        "dataset": cfg.dataset,
        "data_source": source,
        "train_images": len(train.labels),
        "val_images": len(val.labels),
        "classes": len(train.classes),
        "image_size": list(train.images.shape[-2:]),
        "model": cfg.model,
        "search_epochs": cfg.epochs,
        "seed": cfg.seed,
        "wall_seconds": round(history.wall_seconds, 1),
        "device": _runner.describe_device(device),
        "package_version": __version__,
        "git_commit": commit,
        "command": command,
        "objective": "population",
        "population": config.population,
        "exploit_every": config.every,
        "rounds": history.rounds,
        "population_procs": config.procs,
        "population_lanes": config.population_lanes,
        "population_fuse": config.population_fuse,
        "cuda_graphs": config.search.cuda_graphs,
        "explore": {"resample_prob": config.resample_prob, "max_shift": config.max_shift,
                    "levels": pbt.EXPLORE_LEVELS},
        "truncation_quantile": config.quantile,
        **training_provenance(cfg),
        **init.provenance,
        "member_start": config.member_start,
        "score_ema": config.score_ema,
        "amount": config.amount,
        # What each round was held to, so that a replay (benchmarks/pbt_null.py) needs no profile file.
        **({} if config.amount != "profile" else {"amount_targets": [list(t) for t in init.holds]}),
        "resample": config.resample,
        "vary": config.vary,
        "amp": cfg.amp,
        "channels_last": cfg.channels_last,
        "baseline": {"flip": cfg.flip, "crop_padding": cfg.crop_padding, "cutout": cfg.cutout},
        "sessions": history.sessions,
    }


def run_population_search(
    config: PopulationConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    data: tuple[Any, Any] | None = None,
    command: str | None = None,
    log: Callable[[str], None] | None = None,
    plot: bool = True,
) -> SearchResult:
    """Run (or resume) a population search and write its files into ``out_dir`` (see the module docstring).

    Args:
        config: the settings (validated here).
        out_dir: output folder (created if missing).
        resume: continue from ``out_dir/checkpoint.pt`` if it exists (at the round it had finished).
            Without it, a folder that already holds a checkpoint or a schedule is refused.
        data: ``(train, val)`` :class:`~hba_augment.datasets.ImageData` instead of the search's split of
            ``config.search.dataset``.
        command: the command line recorded in the provenance (``None``: ``sys.argv``).
        log: receives one line per round and status messages (default: stderr).
        plot: write ``schedule.png`` (skipped with a warning without matplotlib).

    Returns:
        :class:`~hba_augment.search.loop.SearchResult` (``metrics``: one record per round).

    Raises:
        ValueError: bad settings, data that does not fit, an incompatible checkpoint, or under torchrun.
        SearchDivergedError: a member's loss became NaN or infinite; no schedule is written.
    """
    config.validate()
    session_start = time.perf_counter()
    commit = _runner.source_commit()  # the code this session runs: taken now, not when the schedule is written
    if _distributed.current().distributed:
        raise ValueError("the population search runs its members as processes on one device; start it without "
                         "torchrun")
    cfg = config.search
    out, files, command, log = _runner.open_run(
        out_dir, {"schedule": SCHEDULE_FILE, "metrics": METRICS_FILE, "plot": PLOT_FILE, "checkpoint": CHECKPOINT_FILE},
        ("schedule", "checkpoint"), device=cfg.device, resume=resume, command=command, log=log, what="search",
        amp=cfg.amp,
    )
    if plot:
        from hba_augment.search.plot import missing_plot_dependency

        missing = missing_plot_dependency()  # checked before the work, as the search does
        if missing is not None:
            log(f"warning: {missing}; {PLOT_FILE} will not be written")
            plot = False
    if data is None:
        train, val, source = load_search_data(cfg)
    else:
        train, val = data
        source = "in-memory data passed to run_population_search"
    device = torch.device(cfg.device)
    fingerprint = _runner.fingerprint(train.images, train.labels, val.images, val.labels)
    init = _read_init(config)
    settings = {**config.to_dict(), **init.provenance}  # with a schedule file's hash: an edited file does not resume
    history = _round_0(config, init)
    resumed = False
    if resume and files["checkpoint"].exists():
        state = torch.load(files["checkpoint"], map_location="cpu", weights_only=True)
        _runner.check_checkpoint(state, files["checkpoint"], format=_CHECKPOINT_FORMAT, version=_CHECKPOINT_VERSION,
                                 kind="population search", config=settings, resume_free=_RESUME_FREE,
                                 added_fields=_ADDED_FIELDS,
                                 data_fingerprint=fingerprint, settings="the search settings", device=device,
                                 data_mismatch="the training/validation images differ from the checkpoint's")
        history = _History.from_state(state)
        resumed = True
        log(f"resuming {files['checkpoint']} after round {history.rounds}")
    starts = pbt.round_starts(cfg.epochs, config.every)
    steps_per_epoch = math.ceil(len(train.labels) / cfg.batch_size)
    log(f"population search: {config.population} x {cfg.model} on {len(train.labels)} train / {len(val.labels)} val "
        f"images, {_runner.plural(cfg.epochs, 'epoch')} in {_runner.plural(len(starts), 'round')} of "
        f"{_runner.plural(min(config.every, cfg.epochs), 'epoch')}, "
        + (f"{_runner.plural(config.procs, 'process', 'processes')}" if config.procs else "in this process")
        + f", device {_runner.describe_device(device)}")
    history.wall_seconds += time.perf_counter() - session_start
    pool = None
    first = history.rounds  # a resumed session's first round also loads every member's own state
    try:
        for r in range(first, len(starts)):
            start = time.perf_counter()
            if pool is None:
                pool = _Pool(config, train, val)
            last = starts[r + 1] if r + 1 < len(starts) else cfg.epochs
            _round_dir(out, r).mkdir(parents=True, exist_ok=True)
            records = pool.run(_tasks(out, history, r, last - starts[r], resumed and r == first))
            bad = [m for m in range(config.population) if not records[m]["finite"]]
            if bad:
                raise SearchDivergedError(
                    f"search diverged: member {bad[0]}'s loss became non-finite in round {r + 1} (epochs "
                    f"{starts[r] + 1}-{last}); no schedule was written. Try a smaller --lr. The last checkpoint "
                    f"holds {_runner.plural(history.rounds, 'round')}.")
            scores = [records[m]["val_acc"] for m in range(config.population)]
            prob, mag = history.plan_prob, history.plan_mag
            history.parents.append(list(history.plan_parents))
            history.prob.append(prob)
            history.mag.append(mag)
            history.val_acc.append(scores)
            copies = _exploit(config, init, history, scores, r) if r + 1 < len(starts) else []
            seconds = time.perf_counter() - start
            history.wall_seconds += seconds
            lr = _runner.lr_at(cfg, last * steps_per_epoch - 1, steps_per_epoch)
            metrics = _round_metrics(r, starts[r], last, records, prob, mag, copies, lr, seconds)
            metrics["wall_seconds"] = history.wall_seconds
            history.metrics.append(metrics)
            _runner.save_checkpoint(
                {"format": _CHECKPOINT_FORMAT, "version": _CHECKPOINT_VERSION, "config": settings,
                 "data_fingerprint": fingerprint, **history.state()}, files["checkpoint"])
            _runner.write_jsonl(files["metrics"], history.metrics)
            # Every load of this round happened before its training: last round's files are done with.
            shutil.rmtree(_round_dir(out, r - 1), ignore_errors=True)
            shown = ", ".join(f"{loser}<-{donor}" for loser, donor in copies) or "none"
            log(f"round {r + 1}/{len(starts)} (epochs {starts[r] + 1}-{last}): val acc best "
                f"{metrics['best_val_acc']:.3f} (member {metrics['best_member']}), mean {metrics['mean_val_acc']:.3f}, "
                f"worst {min(scores):.3f} | copies {shown} | mean p {metrics['population_mean_prob']:.3f} | "
                f"{seconds:.1f} s, ETA {(len(starts) - r - 1) * seconds / 60:.1f} min")
    finally:
        if pool is not None:
            pool.close()
    provenance = _provenance(config, init, history, train, val, source, device, command, commit)
    schedule = _schedule(config, history, starts, provenance)
    schedule.save(files["schedule"])
    _runner.write_jsonl(files["metrics"], history.metrics)
    shutil.rmtree(out / MEMBERS_FOLDER, ignore_errors=True)
    if plot:
        from hba_augment.search.plot import plot_schedule

        try:
            plot_schedule(schedule, files["plot"])
        except ImportError as e:
            log(f"warning: could not write {files['plot']} ({e}); the schedule is in {files['schedule']}")
            plot = False
    if not plot:
        files.pop("plot")
    log(f"wrote {files['schedule']} ({_runner.plural(schedule.epochs, 'entry', 'entries')}, lineage of member "
        f"{schedule.provenance['best_member']}, val acc {schedule.provenance['final_val_acc']:.3f}, "
        f"{history.wall_seconds:.0f} s)")
    return SearchResult(schedule=schedule, metrics=list(history.metrics), out_dir=out, files=files)
