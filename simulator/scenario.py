"""Scenario files: schema, defaults, loading, ``--set`` overrides and validation.

A scenario is a YAML mapping with the blocks ``name``, ``seed``, ``secure_rng``, ``data``, ``model``, ``federation``,
``mechanism``, ``protocol``, ``resources``, ``ray`` and, for gradient-inversion attacks, ``attack`` (every key is
documented in the scenario reference of the documentation). Validation
turns every problem into one [`ScenarioError`][simulator.errors.ScenarioError] naming the field, the value and what is
allowed; a file that cannot be read as a YAML mapping is one [`ScenarioFileError`][simulator.errors.ScenarioFileError] naming
the file (and the line and column of a YAML syntax error). Scripts rely on these key names: extend the schema,
never rename a key. This module loads neither torch nor Ray (``privsilo validate`` uses it).
"""
from __future__ import annotations

import copy
import math
import typing
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SerializeAsAny, ValidationError, field_validator, model_validator

from mechanisms.base import FederationShape, MechanismParams
from mechanisms.registry import MECHANISM_NAMES, mechanism_class
from mechanisms.server_optimizers import DEFAULT_LR, DEFAULT_SETTINGS, SERVER_OPTIMIZERS, ServerOptimizer
from simulator.errors import MISSING, ScenarioError, ScenarioFileError

if TYPE_CHECKING:
    from protocols.fixed_point import FixedPointCodec
    from simulator.data import DatasetInfo


class _Block(BaseModel):
    """A block of the scenario; the docstring under each field is its description in the scenario reference."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True,
                              allow_inf_nan=False)  # inf and nan are never a setting


def _name_alone(data: Any) -> Any:
    """A block chosen by its ``name`` may be written as the name alone: ``model: cnn`` is ``model: {name: cnn}``."""
    return {"name": data} if isinstance(data, str) else data


class UsersConfig(_Block):
    """``data.users``: record owners across silos (ULDP-FL; see simulator.data.users)."""

    count: int = Field(ge=1)
    """Give every training record an owner among this many users (ids shared by all silos; needed by `uldp`; at most the number of training records). Without `partition: natural` the silos come from the users' allocation (`partition` must stay `iid`); with `natural` (heart_disease) records keep their hospital and only owners are drawn."""
    records: Literal["uniform", "zipf"] = "uniform"
    """Records to users: `uniform`, or `zipf` (user i = 1..count with probability proportional to i^-0.5)."""
    silos: Literal["uniform", "zipf"] = "uniform"
    """A user's records to silos: `uniform`, or `zipf` (per user, a random ranking of the silos, rank r with probability proportional to r^-2); with `natural`, a record of hospital h gets user u with probability proportional to p_records(u) p_silos(h | u)."""


class DataConfig(_Block):
    dataset: str = "digits"
    """A built-in dataset (`digits`, `breast_cancer`, `heart_disease`, `mnist`, `mnist_5k`, `fashion_mnist`, `lfw`, `synthetic_linear`; see Datasets), a name an installed package registers under the entry-point group `privsilo.datasets`, or a loader of your own, `package.module:loader` (see Your own model and data)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to your own dataset's loader (built-in datasets take none)."""
    partition: Literal["iid", "shards", "dirichlet", "natural"] = "iid"
    """`iid`; `shards` (McMahan et al. non-IID: sort by label, each silo gets `shards_per_silo` shards); `dirichlet` (per-class Dirichlet(`alpha`) proportions); `natural` (the dataset's own institutions; heart_disease only)."""
    silos: int = Field(5, ge=1, le=1000)
    """Number of silos; `natural` needs exactly the dataset's number (4 for heart_disease)."""
    alpha: float | None = Field(None, gt=0)
    """Dirichlet concentration, required by `dirichlet`."""
    shards_per_silo: int = Field(2, ge=1)
    """Shards per silo for `shards`."""
    path: str | None = None
    """Directory with the dataset's files (heart_disease, mnist, fashion_mnist); `null`: the data cache (`privsilo data fetch`)."""
    users: UsersConfig | None = None
    """Record owners across silos (ULDP-FL): the `data.users.*` keys."""
    rotations: list[int] | None = None
    """Rotated images (IFCA's clustered benchmark): distinct angles among 0, 90, 180, 270 (at most `data.silos`); silo i's images are rotated counter-clockwise by `rotations[i mod k]`, the silos of one angle form a true group, and the test set holds one rotated copy per angle (image datasets; not with `data.users`)."""
    max_records_per_silo: int | None = Field(None, ge=1)
    """Each silo keeps at most this many of its records (the first in the partition's seeded order), e.g. a silo holding exactly one batch in attack experiments; not with `data.users`."""
    _source: Any = PrivateAttr(default=None)

    @property
    def source(self) -> Any:
        """The dataset object or loader ``privsilo.run(dataset=...)`` attached (None for names and import strings)."""
        return self._source

    @property
    def builtin(self) -> bool:
        """True for one of privsilo's own datasets (not a user's loader, registered name or object)."""
        from simulator.data import DATASETS

        return self._source is None and self.dataset in DATASETS

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        from simulator.data import DATASETS
        from simulator.user_code import check_name

        check_name("dataset", value, sorted(DATASETS))
        return value


class ModelConfig(_Block):
    name: str = "logistic_regression"
    """`logistic_regression`; `linear_regression` (one bias-free linear output, for `synthetic_linear` only, which needs it); `mlp` (2 hidden layers of 200); `mlp_128` (1 hidden layer of 128); `cnn` (McMahan et al. 2017 2-layer CNN; images only); `small_cnn` (the 21,840-parameter CNN of the ULDP-FL and PLDP-FL papers; images of at least 14x14); `lenet` (the DLG LeNet; images only); or a name an installed package registers under the entry-point group `privsilo.models`, or a factory of your own, `package.module:factory` returning a `torch.nn.Module` (see Your own model and data)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to your own model's factory (built-in models take none)."""
    _factory: Any = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return _name_alone(data)

    @property
    def factory(self) -> Any:
        """The model factory object ``privsilo.run(model=...)`` attached (None for names and import strings)."""
        return self._factory

    @property
    def builtin(self) -> bool:
        """True for one of privsilo's own models (not a user's factory, registered name or object)."""
        from simulator.models import MODELS

        return self._factory is None and self.name in MODELS

    @field_validator("name")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from simulator.models import MODELS
        from simulator.user_code import check_name

        check_name("model", value, MODELS)
        return value


class ServerOptimizerConfig(_Block):
    """``federation.server_optimizer``: an optimiser applied to the aggregate (FedOpt, Reddi et al. 2021, Algorithm 2;
    see mechanisms.server_optimizers). Keys the named optimiser does not use must be absent (or null)."""

    name: Literal["sgd", "momentum", "adagrad", "adam", "yogi"]
    """`sgd` (x + lr Delta, Delta = aggregate - global model), `momentum` (FedAvgM: m = beta1 m + Delta, x + lr m), `adagrad`, `adam` or `yogi` (FedAdagrad / FedAdam / FedYogi: x + lr m / (sqrt(v) + tau))."""
    lr: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Server learning rate; `null`: 1 for `sgd` (with 1, exactly FedAvg) and `momentum`, 0.1 for `adagrad`, `adam` and `yogi` (tune it with tau, as the paper does)."""
    beta1: float | None = Field(None, ge=0, lt=1)
    """Momentum (`momentum`) or first-moment decay (`adagrad`, `adam`, `yogi`) beta1 in [0, 1); `null`: 0.9. Not for `sgd`."""
    beta2: float | None = Field(None, ge=0, lt=1)
    """Second-moment decay beta2 in [0, 1) of `adam` and `yogi`; `null`: 0.99."""
    tau: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Adaptivity tau > 0 of `adagrad`, `adam` and `yogi` (v starts at tau^2); `null`: 0.001."""

    @model_validator(mode="before")
    @classmethod
    def _settings_of_the_named_optimizer(cls, data: Any) -> Any:
        """Fill in the defaults of the keys the named optimiser uses; refuse a key it does not use."""
        data = _name_alone(data)
        if not isinstance(data, dict) or data.get("name") not in SERVER_OPTIMIZERS:
            return data
        name = data["name"]
        uses = SERVER_OPTIMIZERS[name].uses
        for key in sorted(set(DEFAULT_SETTINGS) - set(uses)):
            if data.get(key) is not None:
                raise ValueError(f"{key}: server optimizer '{name}' does not use it (it takes lr{''.join(', ' + k for k in uses)}); remove it")
        given = {key: value for key, value in data.items() if value is not None}
        return {"lr": DEFAULT_LR[name], **{key: DEFAULT_SETTINGS[key] for key in uses}, **given}

    def build(self) -> ServerOptimizer:
        """A fresh optimiser with these settings (no state yet)."""
        return SERVER_OPTIMIZERS[self.name](**self.model_dump(exclude={"name"}, exclude_none=True))


class FederationConfig(_Block):
    rounds: int = Field(10, ge=1)
    """Rounds T."""
    client_rate: float = Field(1.0, gt=0, le=1)
    """Client-level Poisson sampling rate lambda: each silo takes part in a round independently with this probability (who took part is recorded)."""
    local_steps: int = Field(20, ge=1)
    """Local SGD steps tau per round."""
    batch_size: int = Field(32, ge=1)
    """Batch size; for DP-SGD the *expected* Poisson batch size (q = batch_size / silo records) or, with `mechanism.sampling_rate`, only the public divisor of the noisy sum; for rpdp the public divisor of the noisy sum (rates come from the budgets)."""
    lr: float = Field(0.1, gt=0)
    """Local learning rate."""
    server_optimizer: ServerOptimizerConfig | None = None
    """The server's optimiser on the aggregate (FedOpt): the `federation.server_optimizer.*` keys; absent: the mechanism's aggregate is the next global model (FedAvg). Refused where the aggregate is not the global model plus an update (`pldp` with `perturb: weights`)."""
    proximal_mu: float = Field(0.0, ge=0, allow_inf_nan=False)
    """FedProx's mu (Li et al. 2020): every local step also descends mu/2 ||w - w_global||^2 (in DP-SGD added after clipping and noise); 0: plain local training. Refused where local training takes no step from the global model (`uldp` variant `sgd`)."""
    round_timeout: float = Field(600.0, gt=0, allow_inf_nan=False)
    """Seconds the server waits for the silo workers at each step of a round; a worker that has not answered by then is treated as crashed: its silos drop out of the round (its late answer is never used), its process is restarted and its silos come back from their snapshots for the next round, as after a crash (needs snapshots: an output directory with checkpoints, or a faults block)."""


class ProtocolConfig(_Block):
    secure_aggregation: bool = False
    """Sum the silos' updates with pairwise-masking secure aggregation."""
    fractional_bits: int = Field(24, ge=8, le=40)
    """Fixed-point precision of secure aggregation (precision 2^-bits); each bit more halves the range a silo's update may span."""
    min_participants: int = Field(1, ge=1)
    """A round in which fewer silos are sampled is skipped (no training, no privacy cost; `skipped` in `metrics.csv`). Default 2 with secure aggregation (one masked update is its own sum, so at least 2 there), else 1; at most `data.silos`."""
    threshold: int | None = None
    """Secure aggregation's Shamir threshold: how many of a silo's share holders (itself and its neighbours) must answer to unmask it; `null`: a majority of them (with `neighbours: auto`: chosen with it). At least 2, at most the silos that share."""
    neighbours: int | Literal["all", "auto"] | None = None
    """Secure aggregation's graph: `all` (every pair of participants masks and shares), a number K (SecAgg+: a random K-regular Harary graph per round, K+1 if K and the round size are odd), or `auto` (K and threshold from `corrupt_fraction` and `dropout_rate`, security failure <= 2^-40, unmaskable rounds <= 2^-20). Unset: `auto` wherever it has safe parameters for `data.silos` (it never shares more widely than `all`), else `all` (and with a `threshold`); `summary.json` says which and why."""
    corrupt_fraction: float = Field(0.05, allow_inf_nan=False)
    """Assumed fraction of silos colluding with the server, for `neighbours: auto` and the failure bounds in `summary.json`; in [0, 1)."""
    dropout_rate: float = Field(0.05, allow_inf_nan=False)
    """Assumed fraction of a round's participants that drop out, for `neighbours: auto` and the failure bounds in `summary.json`; in [0, 1)."""
    server: Literal["honest_but_curious", "may_lie"] = "honest_but_curious"
    """What secure aggregation's silos assume of the server: `honest_but_curious` (it follows the protocol and only looks; no protection against a server that lies, which can unmask any silo whenever the threshold is below the share set), or `may_lie` (it may withhold, replay or forge messages and tell each silo its own story: identity keys registered at set-up, committed and signed round keys, two consistency exchanges before unmasking, threshold above half the share set; the bound assumes an authentic registry, a coalition fixed before the run and honestly sampled participants). See docs/threat-model.md."""

    @field_validator("neighbours", mode="before")
    @classmethod
    def _all_auto_or_count(cls, value: Any) -> Any:
        if value is None or value in ("all", "auto") or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        raise ValueError("must be 'all', 'auto' or a whole number >= 1 of neighbours")

    @model_validator(mode="before")
    @classmethod
    def _default_min_participants(cls, data: Any) -> Any:
        """An absent (or null) ``min_participants`` is 2 with secure aggregation (one masked vector is its own
        sum) and 1 without."""
        if isinstance(data, dict) and data.get("min_participants") is None:
            return {**data, "min_participants": 2 if data.get("secure_aggregation") is True else 1}
        return data


class ActorResources(_Block):
    num_cpus: float = Field(0.5, ge=0)
    """Ray CPUs of the actor."""
    num_gpus: float = Field(0, ge=0)
    """Ray GPUs of the actor; may be fractional (0.25: four workers share one GPU)."""


def _server_resources() -> ActorResources:
    return ActorResources(num_cpus=0.5, num_gpus=0)


class ResourcesConfig(_Block):
    """Ray resources of the server actor and of each silo worker actor, and how many silos a worker hosts."""

    server: ActorResources = Field(default_factory=_server_resources)
    """Ray resources of the server actor (`num_cpus` 0.5, `num_gpus` 0)."""
    silo: ActorResources = Field(default_factory=ActorResources)
    """Ray resources of each silo worker actor."""
    silos_per_actor: int | Literal["auto"] = "auto"
    """Logical silos per worker actor: a number N (ceil(silos / N) workers), or `auto`: one worker per silo while the server's and every worker's shares fit this machine's cores (a cluster: its CPUs and GPUs), else as many workers as fit."""

    @field_validator("silos_per_actor", mode="before")
    @classmethod
    def _whole_number_or_auto(cls, value: Any) -> Any:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError("must be 'auto' or a whole number >= 1 of silos per worker actor")


class RayConfig(_Block):
    address: str | None = None
    """Join this Ray cluster (`HOST:PORT` of the head's GCS, as `ray start --head` prints it) instead of starting Ray locally (`--address` overrides it)."""
    connect_timeout: float = Field(30.0, gt=0, allow_inf_nan=False)
    """Seconds to wait for the head at `ray.address` to answer before giving up (exit 2)."""
    pool_idle_timeout: float = Field(600.0, ge=0, allow_inf_nan=False)
    """With `ray.address`: seconds a server or silo worker actor stays in the cluster's warm pool after a run hands it back, for the next run to reuse (0: stop it at once); `privsilo pool status` and `privsilo pool stop` show and empty the pool."""
    ship_code: Literal["auto", "always", "never"] = "auto"
    """With `ray.address`: which of your own code (the modules of `model.name` and `data.dataset` as `package.module:callable`, or of the objects given to `privsilo.run`) the run uploads with its Ray job, for the cluster's workers to import: `auto`, the modules found under the current directory; `always`, every one of them (also those installed here); `never`, none (install them on every node)."""


class AttackConfig(_Block):
    """``attack``: a gradient-inversion attack by the honest-but-curious server on one round's uploads
    (``privsilo attack``, and sweeps whose scenarios carry the block); see ``simulator.attacks``."""

    method: Literal["dlg", "idlg"] = "dlg"
    """`dlg` (Zhu et al. 2019) or `idlg` (Zhao et al. 2020; one record: batch size 1). Attackable mechanisms: `none`, `dp_sgd`, `rpdp` and `dprivacy`; `uldp` and `pldp` exit 2."""
    target_silo: int | list[int] = 0
    """The silo (or a list of silos) whose upload the server inverts."""
    round: int = Field(1, ge=1)
    """The attacked round, 1-based as in `metrics.csv` (at most `federation.rounds`; the attack run stops after it)."""
    batch_size: int | None = Field(None, ge=1)
    """The batch of every silo's local steps in a run with this block: replaces `federation.batch_size` (`null`: keep it); at most the target silo's records."""
    iterations: int = Field(300, ge=1)
    """L-BFGS outer steps."""
    seeds: int | list[int] = 1
    """Attack seeds (a count N: 0..N-1, or a list) for the dummy initialisation; every (target silo, seed) is one Ray task."""
    line_search: Literal["strong_wolfe", "none"] = "strong_wolfe"
    """L-BFGS line search: `strong_wolfe`, or `none` (the original DLG code)."""
    success_psnr: float = Field(30.0, gt=0, allow_inf_nan=False)
    """An attack succeeds when its mean PSNR over the paired images reaches this many dB."""
    num_cpus: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Ray CPUs (and torch threads) of each attack task."""

    @field_validator("target_silo")
    @classmethod
    def _silo_ids(cls, value: int | list[int]) -> int | list[int]:
        ids = [value] if isinstance(value, int) else value
        if not ids or any(i < 0 for i in ids) or len(set(ids)) != len(ids):
            raise ValueError("a silo id >= 0 or a non-empty list of distinct silo ids")
        return value

    @field_validator("seeds")
    @classmethod
    def _seed_list(cls, value: int | list[int]) -> int | list[int]:
        if isinstance(value, int) and value < 1:
            raise ValueError("a seed count must be >= 1")
        if isinstance(value, list) and (not value or any(s < 0 for s in value) or len(set(value)) != len(value)):
            raise ValueError("a seed count N (seeds 0..N-1) or a non-empty list of distinct integers >= 0")
        return value

    @property
    def targets(self) -> tuple[int, ...]:
        return (self.target_silo,) if isinstance(self.target_silo, int) else tuple(self.target_silo)

    @property
    def seed_list(self) -> tuple[int, ...]:
        return tuple(range(self.seeds)) if isinstance(self.seeds, int) else tuple(self.seeds)


class CrashConfig(_Block):
    """One injected crash: the worker process hosting ``silo`` exits in ``round`` at the point ``at``."""

    silo: int = Field(ge=0)
    """The silo whose worker process dies (with several silos per worker, all of that worker's silos crash)."""
    round: int = Field(ge=1)
    """The round, 1-based as in `metrics.csv` (at most `federation.rounds`)."""
    at: Literal["setup", "before_upload", "after_upload"]
    """`setup`: when the round starts, before local training (during the round's key set-up under secure aggregation); `before_upload`: after local training, before the update leaves the silo; `after_upload`: after the server received the update, before the round is finished (secure aggregation's unmasking step)."""


class FaultsConfig(_Block):
    """``faults``: silos that crash mid-run (see Failures, dropouts and resume)."""

    crashes: list[CrashConfig] = Field(default_factory=list)
    """Crashes at fixed places: a list of `{silo, round, at}`; at most one per silo and round."""
    silo_failure_rate: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)
    """Each silo's worker crashes in each round it takes part in with this probability, at a point drawn uniformly from `setup`, `before_upload`, `after_upload` (drawn from the run's seed, so the same seed crashes the same way)."""

    @property
    def any(self) -> bool:
        """True when the run injects crashes."""
        return bool(self.crashes) or self.silo_failure_rate > 0


class CheckpointConfig(_Block):
    every: int = Field(1, ge=0)
    """Write a checkpoint after every this many rounds (into the output directory, `checkpoint.pkl`; `privsilo run --resume` continues from it); 0: none."""


class AuditConfig(_Block):
    """``audit``: an empirical privacy audit with canaries (``privsilo audit``; see Auditing)."""

    unit: Literal["record", "user", "client"] | None = None
    """What a canary is: a `record`, a `user` or a `client` (`null`: the unit the mechanism protects: record for `dp_sgd` and `rpdp`, user for `uldp`, client for `pldp`, `dprivacy` and `none`)."""
    kind: Literal["gradient", "input"] = "gradient"
    """`gradient`: white-box canaries whose clipped gradient (a record) or update (a user, a client) is a fixed random direction, scored by the cosine between the final model's change and that direction; `input`: out-of-distribution records (random Gaussian features, random labels) added to the silos' data, scored by minus the final model's loss on them (records of `dp_sgd` only)."""
    canaries: int = Field(1000, ge=2)
    """How many canaries M; each is included independently with probability 1/2 (at most the training records for input canaries, the users, or 1,000 per silo for client canaries; gradient canary records are not limited by the records)."""
    confidence: float = Field(0.95, gt=0, lt=1, allow_inf_nan=False)
    """Confidence of the empirical lower bound on epsilon."""
    seed: int | None = Field(None, ge=0)
    """Seed of the canaries' inclusion and directions (`null`: derived from the scenario's `seed`)."""
    view: Literal["final_model", "uploads", "auto"] = "final_model"
    """What the auditor scores: the `final_model`; each canary's host silo's `uploads` summed over the rounds (what the server sees without secure aggregation; `none`, `dp_sgd`, `rpdp` gradient canaries); `auto`: `uploads` where allowed, else `final_model`."""
    score: Literal["sum", "likelihood"] = "sum"
    """How the `uploads` view scores a canary: `sum`, the cosine with its host silo's uploads summed over the rounds; `likelihood`, the subsampled Gaussian's log-likelihood ratio of each round's upload, added over the rounds (`dp_sgd` only; the `final_model` view takes `sum`)."""
    canary_direction: Literal["gaussian", "dirac", "quiet"] = "gaussian"
    """A gradient canary's direction: `gaussian`, a random unit vector; `dirac`, a coordinate of the model of its own, drawn at random; `quiet`, a coordinate of its own among those the data's gradients move least at the initial model (Dirac canaries: at most one per model parameter)."""


class MechanismConfig(_Block):
    name: str = "none"
    """`none` (FedAvg, no protection), `dp_sgd`, `rpdp`, `uldp`, `pldp` or `dprivacy`; the further keys of `mechanism` are the mechanism's parameters (tables below)."""
    params: SerializeAsAny[MechanismParams] = Field(default_factory=MechanismParams)


class Scenario(_Block):
    """A validated scenario. ``to_dict()`` gives the resolved YAML form written to ``summary.json``."""

    name: str = "scenario"
    """Run name; the default output directory is `runs/<name>`."""
    seed: int = Field(0, ge=0)
    """Root seed of every random draw: partition, model initialisation, client sampling, each silo's batches and noise (with `secure_rng: false`)."""
    secure_rng: bool = False
    """`true`: each silo re-keys its generator from OS entropy after set-up, so its batches and noise cannot be replayed from `seed`, and the server draws `uldp`'s user sample from OS entropy; the keys are never recorded and runs are no longer bit-reproducible (see Threat model)."""
    data: DataConfig = Field(default_factory=DataConfig)
    """The dataset and how it is split over silos."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The model every silo trains."""
    federation: FederationConfig = Field(default_factory=FederationConfig)
    """Rounds, client sampling and local training."""
    mechanism: MechanismConfig = Field(default_factory=MechanismConfig)
    """The privacy mechanism and its parameters."""
    protocol: ProtocolConfig = Field(default_factory=ProtocolConfig)
    """How the server sums the silos' updates."""
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    """Ray resources of the actors."""
    ray: RayConfig = Field(default_factory=RayConfig)
    """Which Ray to run on."""
    attack: AttackConfig | None = None
    """A gradient-inversion attack by the server (`privsilo attack` and attacked sweeps)."""
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    """Injected silo crashes."""
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Checkpoints for `--resume`."""
    audit: AuditConfig | None = None
    """An empirical privacy audit (`privsilo audit`; the defaults where the block is absent)."""

    def to_dict(self, *, every_key: bool = False) -> dict[str, Any]:
        """The resolved form (``summary.json``'s ``config``): every setting's value, except, at their defaults,
        the keys added later (`LATER_KEYS`) and the mechanism's settings that do nothing here (its
        ``inert_settings``); ``every_key``: none left out. Validated again, it gives this scenario back."""
        raw = self.model_dump(mode="json")
        params, written = self.mechanism.params, raw["mechanism"]["params"]
        for key in () if every_key else params.inert_settings():  # written out, defaults would read as the user's
            if getattr(params, key) == type(params).model_fields[key].get_default(call_default_factory=True):
                del written[key]
        for block, keys in () if every_key else LATER_KEYS.items():  # at their defaults, keys added later are left out
            model, target = self, raw
            for part in block.split(".") if block else ():
                model, target = getattr(model, part), target[part]
            for key in keys:
                field = type(model).model_fields.get(key)
                if field is not None and key in target and getattr(model, key) == field.get_default(call_default_factory=True):
                    del target[key]
        mech = raw.pop("mechanism")
        raw["mechanism"] = {"name": mech["name"], **mech["params"]}
        order = ("name", "seed", "secure_rng", "data", "model", "federation", "mechanism", "protocol", "resources", "ray",
                 *LATER_KEYS[None])
        return {key: raw[key] for key in order if key in raw}

    def explicit_dict(self) -> dict[str, Any]:
        """The settings the scenario was given (and those its validation filled in), none of the defaults:
        validated again, it gives this scenario with the same settings explicit (a mechanism refuses some
        settings only when they are given, e.g. another variant's)."""
        raw = self.model_dump(mode="json", exclude_unset=True)
        raw["mechanism"] = {"name": self.mechanism.name, **self.mechanism.params.model_dump(mode="json", exclude_unset=True)}
        return raw


# Keys added after scenarios were first written and journaled, by block (None: the top level): at their defaults
# ``Scenario.to_dict`` leaves them out, so a scenario keeps the form (and sweep-journal hash) it had before them.
# A dotted block is a path of attributes; ``mechanism.params`` lists keys of the mechanisms that have them.
LATER_KEYS: dict[str | None, tuple[str, ...]] = {
    None: ("attack", "faults", "checkpoint", "audit"),
    "data": ("kwargs",),
    "model": ("kwargs",),
    "federation": ("server_optimizer", "proximal_mu", "round_timeout"),
    "protocol": ("threshold", "neighbours", "corrupt_fraction", "dropout_rate", "server"),
    "ray": ("pool_idle_timeout", "ship_code"),
    "mechanism.params": ("accountant",),
}


def resolve_scenario(scenario: Scenario | Mapping[str, Any] | str | Path, overrides: list[str] | None = None) -> Scenario:
    """Accept a Scenario, a raw mapping or a YAML path; apply ``key=value`` overrides; validate."""
    if isinstance(scenario, Scenario):
        return _revalidated(scenario, apply_overrides(scenario.explicit_dict(), overrides)) if overrides else scenario
    raw = load_scenario_file(scenario) if isinstance(scenario, (str, Path)) else dict(scenario)
    return validate_scenario(apply_overrides(raw, overrides or []))


def with_changes(scenario: Scenario, changes: Mapping[str, Any]) -> Scenario:
    """``scenario`` with ``changes`` (blocks of keys, e.g. ``{"ray": {"address": ...}}``) merged into its explicit
    settings and checked again: what it left at the defaults stays at the defaults, not given."""
    return _revalidated(scenario, _merged(scenario.explicit_dict(), changes))


def _merged(raw: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(raw)
    for key, value in changes.items():
        old = merged.get(key)
        merged[key] = _merged(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return merged


def _revalidated(scenario: Scenario, raw: Mapping[str, Any]) -> Scenario:
    """``raw`` (a changed form of ``scenario``'s explicit settings) validated, with the objects ``scenario`` carries."""
    return validate_scenario(raw, model=scenario.model.factory, dataset=scenario.data.source)


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping that gives one key twice (YAML forbids it; PyYAML would keep the last silently)."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key (naming the key and both lines)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable) and key in first:
                lines = (first[key].start_mark.line + 1, key_node.start_mark.line + 1)
                where = "" if lines[0] == lines[1] else f", on line {lines[0]} and on line {lines[1]}"
                raise DuplicateKeyError(None, None, f"the key {key!r} is given twice{where}; keep one", key_node.start_mark)
            if isinstance(key, Hashable):
                first[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """``text`` parsed as YAML with PyYAML's safe loader, a repeated key refused (`DuplicateKeyError`)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)


def load_scenario_file(path: str | Path) -> dict[str, Any]:
    """Read a scenario (or sweep grid) file into a raw mapping, not yet validated.

    A file that is missing, not UTF-8, not YAML, empty or not a mapping raises one error naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise ScenarioError("scenario", str(path), "must be an existing YAML file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8")
        line, column = _line_and_column(before, len(before))
        problem = f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        raise ScenarioFileError(path, problem, line=line, column=column) from None
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        raise _yaml_file_error(path, text, exc) from None
    expected = "a YAML mapping of keys such as `name:` and `data:`"
    if raw is None:
        raise ScenarioFileError(path, f"the file is empty; expected {expected}")
    if not isinstance(raw, dict):
        raise ScenarioFileError(path, f"the top level is a {type(raw).__name__}; expected {expected}")
    return raw


def _line_and_column(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of character ``index`` of ``text``."""
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


def _yaml_file_error(path: Path, text: str, exc: yaml.YAMLError) -> ScenarioFileError:
    """PyYAML's diagnosis in one line, at the file's line and column (PyYAML names the text "<unicode string>")."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark, context = exc.problem_mark, ""
        if exc.context and exc.context_mark is not None and exc.context_mark.line != mark.line:
            context = f" ({exc.context} that starts at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1})"
        elif exc.context:
            context = f" ({exc.context})"
        return ScenarioFileError(path, f"invalid YAML: {exc.problem}{context}", line=mark.line + 1, column=mark.column + 1)
    if isinstance(exc, yaml.reader.ReaderError):  # a control character
        line, column = _line_and_column(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return ScenarioFileError(path, f"invalid YAML: the character U+{code:04X} is not allowed", line=line, column=column)
    return ScenarioFileError(path, f"invalid YAML: {' '.join(str(exc).split())}")


def apply_overrides(raw: Mapping[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (values parsed as YAML) to a copy of ``raw``."""
    result = copy.deepcopy(dict(raw))
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ScenarioError("--set", item, "must look like key.path=value")
        node = result
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ScenarioError(".".join(parts[: i + 1]), child, "is not a block, so it has no sub-keys")
            node = child
        try:
            node[parts[-1]] = load_yaml(text) if text else None
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
            raise ScenarioError("--set", item, f"the value must be YAML, as in a scenario file ({problem})") from None
    return result


def validate_scenario(raw: Mapping[str, Any] | Scenario, *, model: Any = None, dataset: Any = None) -> Scenario:
    """Validate a raw scenario mapping; raise ScenarioError on the first problem.

    ``model`` (a factory returning an ``nn.Module``) and ``dataset`` (a loader, its return value or a ``Dataset``)
    are objects of the user's, attached to the ``model`` and ``data`` blocks (see ``privsilo.run``).
    """
    if isinstance(raw, Scenario) and model is None and dataset is None:
        return raw
    raw = raw.explicit_dict() if isinstance(raw, Scenario) else dict(raw)
    mechanism_raw = raw.pop("mechanism", {})
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise _to_scenario_error(exc, Scenario) from None
    if model is not None:
        scenario.model._factory = model
    if dataset is not None:
        scenario.data._source = dataset
    scenario = scenario.model_copy(update={"mechanism": _validate_mechanism(mechanism_raw)})
    scenario = _with_attack_batch(scenario)
    _check_consistency(scenario)
    return scenario


def with_attack_block(scenario: Scenario, *, address: str | None = None) -> Scenario:
    """The scenario with an ``attack`` block (the defaults where it has none) and, if given, ``ray.address``."""
    if scenario.attack is not None and not address:
        return scenario
    return with_changes(scenario, {"attack": {}, **({"ray": {"address": address}} if address else {})})


def _with_attack_batch(scenario: Scenario) -> Scenario:
    """``attack.batch_size``, when set, is the batch of every silo's local steps in the run: it replaces
    ``federation.batch_size`` (so the attacked upload and a sweep's accuracy come from the same training)."""
    attack = scenario.attack
    if attack is None or attack.batch_size is None or attack.batch_size == scenario.federation.batch_size:
        return scenario
    return scenario.model_copy(update={"federation": scenario.federation.model_copy(update={"batch_size": attack.batch_size})})


def _validate_mechanism(raw: Any) -> MechanismConfig:
    raw = _name_alone(raw)
    if not isinstance(raw, dict):
        raise ScenarioError("mechanism", raw, "must be a mechanism's name or a mapping with at least a 'name' key")
    params = dict(raw)
    name = params.pop("name", "none")
    if name not in MECHANISM_NAMES:
        raise ScenarioError("mechanism.name", name, f"allowed: {', '.join(MECHANISM_NAMES)}")
    params_class = mechanism_class(name).Params
    try:
        validated = params_class.model_validate(params)
    except ValidationError as exc:
        raise _to_scenario_error(exc, params_class, prefix=("mechanism",)) from None
    return MechanismConfig(name=name, params=validated)


def _check_consistency(scenario: Scenario) -> None:
    """Checks that span several fields."""
    data = scenario.data
    info = _dataset_info(scenario)
    if data.partition == "dirichlet" and data.alpha is None:
        raise ScenarioError("data.alpha", None, "partition 'dirichlet' needs a concentration alpha > 0")
    if info.records_per_silo is not None and data.partition != "natural":
        raise ScenarioError("data.partition", data.partition, f"dataset '{data.dataset}' is drawn as one user of {info.records_per_silo} records per silo; use natural")
    if data.partition == "natural" and info.natural_silos is None and info.records_per_silo is None:
        raise ScenarioError("data.partition", "natural", f"dataset '{data.dataset}' has no natural silos; use iid, shards or dirichlet")
    if data.partition == "natural" and info.natural_silos is not None and data.silos != info.natural_silos:
        raise ScenarioError("data.silos", data.silos, f"the natural partition of '{data.dataset}' has exactly {info.natural_silos} silos")
    if data.users is None and data.partition != "natural" and info.train_records is not None:
        needed = data.silos * (data.shards_per_silo if data.partition == "shards" else 1)
        if info.train_records < needed:
            per = f"{data.shards_per_silo} shards of at least one record" if data.partition == "shards" else "at least one record"
            raise ScenarioError("data.silos", data.silos, f"dataset '{data.dataset}' has {info.train_records} training records; "
                                f"partition '{data.partition}' gives every silo {per}, so at most {info.train_records // (needed // data.silos)} silos")
    if data.path is not None and not Path(data.path).expanduser().is_dir():
        raise ScenarioError("data.path", data.path, "must be an existing directory holding the dataset's files")
    num_parameters = _check_model(scenario, info)
    if data.users is not None and data.max_records_per_silo is not None:
        raise ScenarioError("data.max_records_per_silo", data.max_records_per_silo, "cannot be combined with data.users (the users' records decide the silos)")
    if data.users is not None and data.partition not in ("iid", "natural"):
        raise ScenarioError("data.partition", data.partition, "with data.users the silos come from the user allocation; use iid (the default) or natural")
    if data.users is not None and info.train_records is not None and data.users.count > info.train_records:
        raise ScenarioError("data.users.count", data.users.count, f"must not exceed the {info.train_records} training records of '{data.dataset}'")
    _check_task(scenario, kind=info.kind)
    mechanism = mechanism_class(scenario.mechanism.name)
    if mechanism.needs_users and data.users is None:
        raise ScenarioError("data.users", None, f"mechanism '{mechanism.name}' needs record owners: set data.users.count")
    if mechanism.needs_every_silo and scenario.federation.client_rate != 1.0:
        raise ScenarioError("federation.client_rate", scenario.federation.client_rate, f"mechanism '{mechanism.name}' needs every silo in every round; set it to 1.0")
    if not scenario.protocol.secure_aggregation and scenario.mechanism.params.needs_secure_aggregation():
        raise ScenarioError(
            "protocol.secure_aggregation", False,
            f"mechanism '{mechanism.name}' with these parameters adds only part of the noise in each silo, which protects "
            "the sum of the uploads, not each upload: set it to true",
        )
    if scenario.protocol.secure_aggregation and mechanism.needs_individual_contributions:
        raise ScenarioError("protocol.secure_aggregation", True, f"mechanism '{mechanism.name}' needs individual updates; set it to false")
    _check_mechanism_fits(scenario, num_parameters=num_parameters)
    _check_optimisation(scenario)
    _check_protocol(scenario)
    _check_faults(scenario)
    packing = scenario.resources.silos_per_actor
    if packing != "auto" and packing > data.silos:
        raise ScenarioError("resources.silos_per_actor", packing, f"must not exceed data.silos = {data.silos}")
    if scenario.attack is not None:
        _check_attack(scenario, info)
    if scenario.audit is not None:
        from simulator.audit.config import check_audit

        check_audit(scenario, train_records=info.train_records)
    for role in ("server", "silo"):
        gpus = getattr(scenario.resources, role).num_gpus
        if gpus > 1 and gpus != int(gpus):
            raise ScenarioError(f"resources.{role}.num_gpus", gpus, "must be a fraction <= 1 or a whole number")


def _dataset_info(scenario: Scenario) -> DatasetInfo:
    """The dataset's registry entry, or a user's dataset loaded and checked (its problems name ``data.dataset``)."""
    from simulator.data.sources import scenario_dataset_info
    from simulator.user_code import UserCodeError

    data = scenario.data
    if data.builtin and data.kwargs:
        raise ScenarioError("data.kwargs", data.kwargs, f"built-in dataset '{data.dataset}' takes no kwargs (they are for your own loader)")
    if not data.builtin and data.path is not None:
        raise ScenarioError("data.path", data.path, "is for built-in datasets read from files; pass your loader a path in data.kwargs")
    try:
        return scenario_dataset_info(data, seed=scenario.seed)
    except UserCodeError as exc:
        raise ScenarioError("data.dataset", data.dataset, str(exc)) from None


def _check_model(scenario: Scenario, info: DatasetInfo) -> int:
    """The model against the data and the mechanism; returns its number of parameters d. A built-in model is
    checked without torch; a user's is built once (on zeros: its outputs must be (batch, classes)) and, for
    mechanisms that clip per-record gradients, searched for layers that make them impossible."""
    from simulator.models import model_supports, parameter_count

    model = scenario.model
    if model.builtin:
        if model.kwargs:
            raise ScenarioError("model.kwargs", model.kwargs, f"built-in model '{model.name}' takes no kwargs (they are for your own factory)")
        if not model_supports(model.name, info.feature_shape):
            raise ScenarioError("model.name", model.name, f"does not fit dataset '{scenario.data.dataset}' (input shape {info.feature_shape})")
        return parameter_count(model.name, feature_shape=info.feature_shape, num_classes=info.num_classes)
    return _check_user_model(scenario, info)


def _check_user_model(scenario: Scenario, info: DatasetInfo) -> int:
    import torch

    from simulator.model_checks import model_problem
    from simulator.models import build_scenario_model
    from simulator.user_code import UserCodeError

    name = scenario.model.name
    try:
        built = build_scenario_model(scenario.model, feature_shape=info.feature_shape, num_classes=info.num_classes)
        with torch.no_grad():
            outputs = built.eval()(torch.zeros((2, *info.feature_shape)))
    except UserCodeError as exc:
        raise ScenarioError("model.name", name, str(exc)) from None
    except Exception as exc:  # the user's forward pass on the dataset's shape
        raise ScenarioError("model.name", name, f"fails on inputs shaped (batch, {', '.join(map(str, info.feature_shape))}) of "
                            f"dataset '{scenario.data.dataset}': {type(exc).__name__}: {exc}") from None
    want = (2, info.num_classes) if info.kind != "regression" else (2, 1)
    if tuple(outputs.shape) != want:
        raise ScenarioError("model.name", name, f"maps a batch of 2 records to outputs shaped {tuple(outputs.shape)}; "
                            f"dataset '{scenario.data.dataset}' needs (batch, {want[1]})")
    params = scenario.mechanism.params
    problem = model_problem(built, feature_shape=info.feature_shape, independent_records=params.needs_independent_records(),
                            clips_record_gradients=params.clips_record_gradients())
    if problem:
        raise ScenarioError("model.name", name, f"with mechanism '{scenario.mechanism.name}': {problem}")
    return sum(p.numel() for p in built.parameters())


def secure_aggregation_codec(config: ProtocolConfig, *, num_silos: int) -> FixedPointCodec:
    """The fixed-point codec of a federation's secure aggregation: headroom for a sum over every silo."""
    from protocols.fixed_point import FixedPointCodec

    return FixedPointCodec(fractional_bits=config.fractional_bits, max_summands=num_silos)


def _check_mechanism_fits(scenario: Scenario, *, num_parameters: int) -> None:
    """The mechanism's parameters against the federation's public sizes (silos, model parameters)."""
    params, protocol = scenario.mechanism.params, scenario.protocol
    limit = secure_aggregation_codec(protocol, num_silos=scenario.data.silos).max_abs_value if protocol.secure_aggregation else None
    shape = FederationShape(num_silos=scenario.data.silos, num_parameters=num_parameters,
                            client_rate=scenario.federation.client_rate, upload_limit=limit,
                            upload_fractional_bits=protocol.fractional_bits if protocol.secure_aggregation else None)
    try:
        params.check_federation(shape)
    except ValueError as exc:
        key, _, problem = str(exc).partition(": ")
        if "." in key:  # another block's key that the mechanism's parameters do not fit
            block, _, field = key.partition(".")
            raise ScenarioError(key, getattr(getattr(scenario, block), field), problem) from None
        raise ScenarioError(f"mechanism.{key}", getattr(params, key, None), problem) from None


def _check_optimisation(scenario: Scenario) -> None:
    """The server optimiser and FedProx against the mechanism's parameters."""
    federation, params, name = scenario.federation, scenario.mechanism.params, scenario.mechanism.name
    optimizer = federation.server_optimizer
    if optimizer is not None and (reason := params.server_optimizer_refusal()):
        raise ScenarioError("federation.server_optimizer.name", optimizer.name, f"not with mechanism '{name}': {reason}")
    if federation.proximal_mu > 0 and (reason := params.proximal_term_refusal()):
        raise ScenarioError("federation.proximal_mu", federation.proximal_mu, f"not with mechanism '{name}': {reason}")


def _check_task(scenario: Scenario, *, kind: str) -> None:
    """Regression data, its model and mechanism; ``data.rotations``."""
    data, model = scenario.data, scenario.model.name
    if kind == "regression" and scenario.model.builtin and model != "linear_regression":
        raise ScenarioError("model.name", model, f"dataset '{data.dataset}' has real-valued targets; use linear_regression")
    if kind != "regression" and model == "linear_regression":
        raise ScenarioError("model.name", model, f"linear_regression is for regression datasets (synthetic_linear), not '{data.dataset}'")
    mechanism = mechanism_class(scenario.mechanism.name)
    if kind == "regression" and not mechanism.supports_regression:
        fitting = [name for name in MECHANISM_NAMES if mechanism_class(name).supports_regression]
        raise ScenarioError("mechanism.name", mechanism.name, f"dataset '{data.dataset}' is a regression task; mechanisms for it: {', '.join(fitting)}")
    angles = data.rotations
    if angles is None:
        return
    if kind != "image":
        raise ScenarioError("data.rotations", angles, f"rotations need an image dataset, not '{data.dataset}' ({kind})")
    if not angles or any(a % 90 or not 0 <= a < 360 for a in angles) or len(set(angles)) != len(angles):
        raise ScenarioError("data.rotations", angles, "a non-empty list of distinct angles in degrees among 0, 90, 180, 270")
    if len(angles) > data.silos:
        raise ScenarioError("data.rotations", angles, f"more angles than data.silos = {data.silos} (silo i gets angle i mod {len(angles)})")
    if data.users is not None:
        raise ScenarioError("data.rotations", angles, "rotations group silos, data.users groups records across silos: use one of them")


# Keys of ``protocol`` that only secure aggregation reads: set to anything but their default without it, they would
# do nothing, so they are refused (as a mechanism's inert settings are).
SECURE_AGGREGATION_KEYS = ("threshold", "neighbours", "corrupt_fraction", "dropout_rate")


def _check_protocol(scenario: Scenario) -> None:
    """``protocol.min_participants``, the graph and the threshold against secure aggregation and the number of
    silos."""
    protocol, silos = scenario.protocol, scenario.data.silos
    if not protocol.secure_aggregation:
        for key in SECURE_AGGREGATION_KEYS:
            value = getattr(protocol, key)
            if value != ProtocolConfig.model_fields[key].get_default():
                raise ScenarioError(f"protocol.{key}", value, "does nothing without secure aggregation (protocol.secure_aggregation "
                                    "is false); remove it or set protocol.secure_aggregation: true")
    if protocol.secure_aggregation and protocol.min_participants < 2:
        raise ScenarioError(
            "protocol.min_participants", protocol.min_participants,
            "secure aggregation needs at least 2 (a round of one silo would hand the server its update unmasked)",
        )
    if protocol.min_participants > silos:
        raise ScenarioError(
            "protocol.min_participants", protocol.min_participants,
            f"must not exceed data.silos = {silos}, or every round would be skipped"
            + (" (secure aggregation needs 2, so at least 2 silos)" if protocol.secure_aggregation else ""),
        )
    for name in ("corrupt_fraction", "dropout_rate"):
        if not 0 <= getattr(protocol, name) < 1:
            raise ScenarioError(f"protocol.{name}", getattr(protocol, name), "must be in [0, 1)")
    neighbours = protocol.neighbours
    if neighbours not in (None, "all", "auto") and not 1 <= neighbours <= silos - 1:
        raise ScenarioError("protocol.neighbours", neighbours, f"must be 'all', 'auto' or a number in [1, data.silos - 1 = {silos - 1}]")
    if protocol.threshold is not None:
        if neighbours == "auto":
            raise ScenarioError("protocol.threshold", protocol.threshold, "must be null with neighbours: auto, which chooses it")
        complete = neighbours in (None, "all")  # unset with a threshold: the complete graph
        sharing = silos if complete else min(neighbours + 1, silos)
        if not 2 <= protocol.threshold <= sharing:
            raise ScenarioError(
                "protocol.threshold", protocol.threshold,
                f"must be in [2, {sharing}]: at least 2 (one share would be the secret), at most the {sharing} silos that "
                + ("share (data.silos)" if complete else "share (neighbours + 1)"),
            )
        if protocol.server == "may_lie" and 2 * protocol.threshold <= sharing:
            raise ScenarioError("protocol.threshold", protocol.threshold,
                                f"must exceed half the {sharing} silos that share with protocol.server: may_lie")


def _check_faults(scenario: Scenario) -> None:
    """Injected crashes name silos and rounds of this run, at most one per silo and round, and no attack."""
    if scenario.attack is not None and scenario.faults.any:
        raise ScenarioError("faults", scenario.faults.model_dump(), "a gradient-inversion attack (the attack block) runs without injected crashes; remove one of the two blocks")
    seen = set()
    for index, crash in enumerate(scenario.faults.crashes):
        field = f"faults.crashes[{index}]"
        if crash.silo >= scenario.data.silos:
            raise ScenarioError(f"{field}.silo", crash.silo, f"silo ids run from 0 to {scenario.data.silos - 1} (data.silos = {scenario.data.silos})")
        if crash.round > scenario.federation.rounds:
            raise ScenarioError(f"{field}.round", crash.round, f"rounds run from 1 to {scenario.federation.rounds} (federation.rounds)")
        if (crash.silo, crash.round) in seen:
            raise ScenarioError(field, crash.model_dump(), "a silo crashes at most once per round; another entry names the same silo and round")
        seen.add((crash.silo, crash.round))


def _check_attack(scenario: Scenario, info: DatasetInfo) -> None:
    """The ``attack`` block against the rest of the scenario (what is known before any data is partitioned)."""
    from simulator.attacks.config import ATTACKABLE_MECHANISMS, EPOCH_MECHANISMS
    from simulator.data import DATASETS

    attack, name = scenario.attack, scenario.mechanism.name
    if info.pixel_scale is None:
        images = ", ".join(sorted(n for n, d in DATASETS.items() if d.pixel_scale is not None))
        raise ScenarioError("data.dataset", scenario.data.dataset, f"attacks reconstruct images; use one of {images}")
    if name not in ATTACKABLE_MECHANISMS:
        raise ScenarioError(
            "mechanism.name", name,
            f"the attack reads a silo's upload as the model change of its local SGD steps ([weight x delta, weight], or "
            f"the trained parameters); '{name}' uploads something else; attackable: {', '.join(ATTACKABLE_MECHANISMS)}",
        )
    for silo in attack.targets:
        if silo >= scenario.data.silos:
            raise ScenarioError("attack.target_silo", silo, f"no such silo: data.silos = {scenario.data.silos} (ids 0..{scenario.data.silos - 1})")
    if attack.round > scenario.federation.rounds:
        raise ScenarioError("attack.round", attack.round, f"the run has federation.rounds = {scenario.federation.rounds} (rounds are 1-based)")
    batch = scenario.federation.batch_size
    if attack.method == "idlg" and batch != 1:
        raise ScenarioError("attack.batch_size", batch, "idlg reads the label of a single record: set attack.batch_size to 1")
    cap = scenario.data.max_records_per_silo
    if cap is not None and batch > cap:
        raise ScenarioError("attack.batch_size", batch, f"larger than the silos' records (data.max_records_per_silo = {cap})")
    epochs = scenario.mechanism.params.local_epochs if name in EPOCH_MECHANISMS else None
    if epochs is not None and (cap is None or cap > batch):
        raise ScenarioError(
            "mechanism.local_epochs", epochs,
            f"each epoch reshuffles a silo's records into batches of {batch}, an order the attacker cannot replay unless "
            f"the silo holds one batch: set data.max_records_per_silo = {batch} (the batch size), or remove "
            "mechanism.local_epochs (federation.local_steps steps of independent batches)",
        )


def _to_scenario_error(exc: ValidationError, model: type[BaseModel], prefix: tuple[str, ...] = ()) -> ScenarioError:
    """Pydantic's first error in the scenario's words: the field as ``a.b[0].c``, never a class name."""
    err = exc.errors()[0]
    keys = tuple(str(part) for part in err["loc"] if not isinstance(part, int))  # the path of blocks, list items skipped
    field = _field_path(prefix + tuple(err["loc"]))
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(model, keys[:-1])
        return ScenarioError(field, err["input"], f"unknown key; allowed keys here: {', '.join(allowed) or 'none'}")
    if err["type"] == "value_error":
        return _validator_error(field, err["input"], str(err["ctx"]["error"]), keys=_allowed_keys(model, keys))
    if err["type"] == "missing":
        return ScenarioError(field, MISSING, "this key is required")
    if err["type"] in ("model_type", "model_attributes_type", "dict_type"):
        block = _allowed_keys(model, keys)
        allowed = f"must be a mapping of the keys {', '.join(block)}" if block else "must be a mapping"
        if isinstance(err["input"], bool):
            allowed += " (YAML reads yes, no, on and off as true and false)"
        return ScenarioError(field, err["input"], allowed)
    message = err["msg"]
    message = message[0].lower() + message[1:] if message else message
    return ScenarioError(field, err["input"], message + _number_read_as_text(err["type"], err["input"]))


def _number_read_as_text(error_type: str, value: Any) -> str:
    """A hint where YAML read a number as text: PyYAML (YAML 1.1) reads ``1e3`` and ``1.5e3`` (no dot, or no
    sign in the exponent) as strings."""
    if error_type not in ("int_type", "int_parsing", "float_type", "float_parsing") or not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    if not math.isfinite(number):
        return ""
    if error_type.startswith("int"):
        if not number.is_integer():
            return ""
        written = str(int(number))
    else:
        mantissa, e, exponent = repr(number).partition("e")
        written = repr(number) if not e else f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent if exponent[0] in '+-' else '+' + exponent}"
    return f" (YAML read {value} as text, not a number: write {written})"


def _field_path(loc: Sequence[str | int]) -> str:
    """``("faults", "crashes", 0, "round")`` -> ``faults.crashes[0].round``, the one syntax every message uses."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f"{'.' if path else ''}{part}"
    return path


def _validator_error(field: str, value: Any, message: str, *, keys: Sequence[str] = ()) -> ScenarioError:
    """A field validator's own words (without pydantic's "Value error, "); a message "key: problem" about a key
    of a mapping-valued field names that key and its value (None where the key, one of ``keys``, is absent)."""
    key, separator, problem = message.partition(": ")
    if separator and isinstance(value, dict) and (key in value or key in keys):
        return ScenarioError(f"{field}.{key}", value.get(key), problem)
    return ScenarioError(field, value, message)


def _allowed_keys(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The keys of the block at ``loc`` below ``model``; an optional block (``data.users``, ``attack``: the
    annotation ``Block | None``) counts as its block."""
    for part in loc:
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        blocks = [a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not blocks:
            return []
        model = blocks[0]
    return sorted(model.model_fields)
