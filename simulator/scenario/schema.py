"""The scenario's blocks: one pydantic model per block, the docstring under each field its description in the
scenario reference, and the keys added later that ``Scenario.to_dict`` leaves out at their defaults."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SerializeAsAny, field_validator, model_validator

from privsilo.mechanisms.base import Mechanism, MechanismParams, keyword_or_count
from privsilo.mechanisms.registry import mechanism_class
from privsilo.mechanisms.server_optimizers import DEFAULT_LR, DEFAULT_SETTINGS, SERVER_OPTIMIZERS, ServerOptimizer


class _Block(BaseModel):
    """A block of the scenario; the docstring under each field is its description in the scenario reference."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True,
                              allow_inf_nan=False)  # inf and nan are never a setting


def _name_alone(data: Any) -> Any:
    """A block chosen by its ``name`` may be written as the name alone: ``model: cnn`` is ``model: {name: cnn}``."""
    return {"name": data} if isinstance(data, str) else data


class UsersConfig(_Block):
    """``data.users``: record owners across silos (ULDP-FL; see privsilo.simulator.data.users)."""

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
        from privsilo.simulator.data import DATASETS

        return self._source is None and self.dataset in DATASETS

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str) -> str:
        from privsilo.simulator.data import DATASETS
        from privsilo.simulator.user_code import check_name

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
        from privsilo.simulator.models.builtin import MODELS

        return self._factory is None and self.name in MODELS

    @field_validator("name")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from privsilo.simulator.models.builtin import MODELS
        from privsilo.simulator.user_code import check_name

        check_name("model", value, MODELS)
        return value


class ServerOptimizerConfig(_Block):
    """``federation.server_optimizer``: an optimiser applied to the aggregate (FedOpt, Reddi et al. 2021, Algorithm 2;
    see privsilo.mechanisms.server_optimizers). Keys the named optimiser does not use must be absent (or null)."""

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
            return value  # a number outside [1, silos - 1] is refused by the cross-field checks, which name the range
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
        return keyword_or_count(value, ("auto",), allowed="'auto' or a whole number >= 1 of silos per worker actor")


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
    (``privsilo attack``, and sweeps whose scenarios carry the block); see ``privsilo.simulator.attacks``."""

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

    @property
    def plugin(self) -> type[Mechanism]:
        """The mechanism's class, registered under ``name`` (``privsilo.mechanisms.registry``): its traits."""
        return mechanism_class(self.name)

    def build(self) -> Mechanism:
        """The mechanism with this block's parameters."""
        return self.plugin(self.params)


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
