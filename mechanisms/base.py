"""The plug-in interface between the simulator's actors and a privacy mechanism.

The actors never look inside a mechanism. Per round they do exactly this:

1. the server broadcasts the global state (a tuple of flat float64 vectors: one per model hypothesis, so
   IFCA-style clustering fits) to the sampled silos;
2. every sampled silo calls ``SiloMechanism.contribute`` and gets a ``SiloContribution``: one flat float64
   vector that the server may only learn *summed over the participants* (so any protocol, e.g. secure
   aggregation, can carry it), plus privacy events and metrics;
3. the server feeds the sum to ``ServerMechanism.aggregate`` to get the next global state.

Mechanisms that need to see individual contributions (server-side clustering) say so with
``needs_individual_contributions`` and then cannot be combined with secure aggregation: the server runs plain
summation, whose messages carry every vector in the clear, and calls ``ServerMechanism.aggregate_individual``
with them instead of ``aggregate``. ``Mechanism.num_hypotheses`` sets how many vectors the global state holds.
Per-user training (ULDP), per-record sampling rates (rPDP) and extra protocol stages live inside the
mechanism's silo and server objects.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from privsilo.mechanisms.events import PrivacyEvent

# torch is imported where tensors are handled: validating a scenario must not load it (see privsilo.mechanisms.registry).
if TYPE_CHECKING:
    import torch

    from privsilo.mechanisms.canaries import SiloCanaries
    from privsilo.protocols.base import ServerProtocol, SiloProtocol

GlobalState = tuple[np.ndarray, ...]

# ``Mechanism.upload_form``: a silo uploads ``[weight x delta, weight]`` (``privsilo.mechanisms.fedavg.weighted_delta_vector``),
# the model change of its local SGD steps with its weight ...
WEIGHTED_DELTA = "weighted_delta"
# ... or the trained parameters of one of the broadcast hypotheses, ``theta_j + delta' + noise``.
TRAINED_PARAMETERS = "parameters"


@dataclass(frozen=True)
class FederationShape:
    """The public sizes a mechanism's parameters are checked against before a run: the number of silos
    (``data.silos``) and of model parameters d (the length of an upload), the client rate
    (``federation.client_rate``), and the largest |value| one upload may carry through secure aggregation's
    fixed-point codec and the codec's fractional bits f (values travel as multiples of 2^-f; both None without
    secure aggregation)."""

    num_silos: int
    num_parameters: int
    client_rate: float = 1.0
    upload_limit: float | None = None
    upload_fractional_bits: int | None = None


class MechanismParams(BaseModel):
    """YAML parameters of a mechanism (the keys of the ``mechanism`` block besides ``name``); the docstring under
    each field is its description in the scenario reference."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True,
                              allow_inf_nan=False)  # inf and nan are never a setting

    def clips_record_gradients(self) -> bool:
        """True where silos clip each record's gradient (DP-SGD): the model must allow per-record gradients."""
        return False

    def needs_independent_records(self) -> bool:
        """True where a record's or a user's clipped contribution must not depend on the other records of its
        batch: the model must not mix records (probed on users' models)."""
        return self.clips_record_gradients()

    def needs_secure_aggregation(self) -> bool:
        """True where the guarantee holds only for the sum of the silos' uploads (e.g. noise split across silos)."""
        return False

    def inert_settings(self) -> dict[str, str]:
        """``{field: why}``: the parameters that do nothing given the others' values (e.g. one variant's setting
        under another variant). A scenario that sets one explicitly (to anything but null) is refused; a default
        never is."""
        return {}

    @model_validator(mode="after")
    def _refuse_inert_settings(self) -> "MechanismParams":
        for name, why in self.inert_settings().items():
            if name in self.model_fields_set and getattr(self, name) is not None:
                raise ValueError(f"{name}: does nothing here ({why}); remove it")
        return self

    def check_federation(self, federation: FederationShape) -> None:
        """Raise ``ValueError("key: problem")`` where parameter ``key`` does not fit the federation (e.g. a list
        with one entry per silo of the wrong length); the scenario reports it as ``mechanism.key``, or, for a
        dotted key (``federation.client_rate``), as that key of the scenario."""

    def update_clip_norm(self) -> float | None:
        """The public norm each silo clips its whole model change to before privatising it (e.g. d-privacy's
        radius), or None: what an attack replays (``privsilo.simulator.attacks``)."""
        return None

    def audit_refusal(self, *, client_rate: float) -> tuple[str, Any, str] | None:
        """Why an audit cannot run with these parameters (at ``federation.client_rate``), as ``(scenario key,
        value, what is allowed)``, or None; checked once the mechanism hosts the audit's unit and kind."""
        return None

    def server_optimizer_refusal(self) -> str | None:
        """Why a server optimiser (``federation.server_optimizer``) is not meaningful with these parameters, or
        None: it needs an aggregate that is the old global state plus an update (see privsilo.mechanisms.server_optimizers)."""
        return None

    def proximal_term_refusal(self) -> str | None:
        """Why FedProx's proximal term (``federation.proximal_mu`` > 0) is not meaningful with these parameters, or
        None: it needs local training that takes steps from the global model (see privsilo.mechanisms.proximal)."""
        return None


def pld_needs_its_smallest_delta(cls: type, accountant: str, info: ValidationInfo) -> str:
    """A field validator for ``accountant`` (declared after ``delta``): PLD's float64 composition is not trusted
    below ``privsilo.mechanisms.pld.SMALLEST_DELTA``, so ``accountant: pld`` with a smaller delta is refused with one line.
    Declared in a params class as ``field_validator("accountant")(pld_needs_its_smallest_delta)``."""
    if accountant == "pld" and "delta" in info.data:
        from privsilo.mechanisms.pld import check_pld_delta

        check_pld_delta(info.data["delta"])
    return accountant


def keyword_or_count(value: Any, keywords: tuple[str, ...], *, allowed: str) -> Any:
    """A "before" field validator's check for a setting that is one of ``keywords`` or a whole number >= 1 (not a
    bool); anything else is refused with "must be " + ``allowed`` (the scenario's and the mechanisms' settings)."""
    if value in keywords or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ValueError(f"must be {allowed}")


@dataclass(frozen=True)
class LocalTraining:
    """The scenario's ``federation`` block as every silo sees it (rounds T, client rate lambda, local steps tau,
    FedProx's mu: see ``privsilo.mechanisms.proximal``), and the number of silos N (``data.silos``, public; None where a
    silo is built outside a federation)."""

    local_steps: int
    batch_size: int
    lr: float
    rounds: int
    client_rate: float
    proximal_mu: float = 0.0
    num_silos: int | None = None


@dataclass(frozen=True)
class SiloContext:
    """Everything a silo-side mechanism may use. All randomness comes from ``generator``.

    Draws made while ``Mechanism.silo`` builds the silo object (e.g. rPDP's budgets) are public; with the
    scenario's ``secure_rng`` the generator is re-keyed from OS entropy right after, for sampling and noise.
    """

    silo_id: int
    record_ids: np.ndarray  # indices of this silo's records in the dataset's training set
    features: torch.Tensor
    labels: torch.Tensor
    model: torch.nn.Module
    training: LocalTraining
    generator: torch.Generator
    device: torch.device
    user_ids: np.ndarray | None = None  # owner (user id, shared across silos) of each record; None without users
    # (silos, users) records per silo and user, computed in the clear: the simulator's "trusted" mode
    user_histogram: np.ndarray | None = None
    # an audit's canaries this silo hosts (see privsilo.mechanisms.canaries and privsilo.simulator.audit); None outside audits
    canaries: SiloCanaries | None = None
    # local training draws on ``device`` (a CUDA silo outside secure mode): see ``training_generator``
    draws_on_device: bool = False

    def training_generator(self) -> torch.Generator:
        """The generator of one round's local training draws (sampling, noise, batches).

        ``generator`` itself, unless ``draws_on_device``: then a generator on ``device`` keyed by 63 bits drawn
        from ``generator``, so that the draws are made where the records are (no host-side noise, no copies) and
        still follow from the silo's stream. Call it once per round: each call takes one draw from ``generator``,
        which a snapshot keeps, so a resumed run makes the same draws. Secure mode keeps every draw on the
        re-keyed CPU generator (a device generator is keyed by 64 bits only).
        """
        import torch

        if not self.draws_on_device:
            return self.generator
        key = int(torch.randint(0, 2**63 - 1, (1,), generator=self.generator))
        return torch.Generator(device=self.device).manual_seed(key)


@dataclass(frozen=True)
class SiloContribution:
    """What one silo hands to the aggregation protocol in one round: ``vector``, or, for a mechanism that brings
    its own protocol (see ``Mechanism.silo_protocol``), ``protocol_input`` (then ``vector`` is None)."""

    vector: np.ndarray | None
    events: tuple[PrivacyEvent, ...] = ()
    metrics: Mapping[str, float] = field(default_factory=dict)
    protocol_input: Any = None

    def payload(self) -> Any:
        """What the silo's protocol protects: ``protocol_input`` if set, else ``vector``."""
        return self.vector if self.protocol_input is None else self.protocol_input


class SiloMechanism(ABC):
    """Silo side of a mechanism: local training and privatisation of the upload."""

    @abstractmethod
    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        """Train locally from ``state`` and return the vector to be summed across silos."""

    def contribute_with_plan(self, state: GlobalState, *, round_index: int, plan: Any) -> SiloContribution:
        """``contribute`` given the server's round plan (see ``ServerMechanism.round_plan``); mechanisms without
        a plan keep this default."""
        if plan is not None:
            raise TypeError(f"{type(self).__name__} takes no round plan, got {type(plan).__name__}")
        return self.contribute(state, round_index=round_index)

    def setup_events(self) -> tuple[PrivacyEvent, ...]:
        """Events announced once at start-up, before any round (e.g. a per-record budget plan)."""
        return ()


class ServerMechanism(ABC):
    """Server side of a mechanism: turns the sum of contributions into the next global state."""

    def round_plan(self, rng: np.random.Generator, *, round_index: int) -> Any:
        """A frozen, mechanism-specific payload the server decides before a round (e.g. ULDP's user sample),
        broadcast to the round's silos; drawn from the server's generator ``rng``. None: no plan."""
        return None

    @abstractmethod
    def aggregate(self, state: GlobalState, contribution_sum: np.ndarray, *, num_participants: int) -> GlobalState:
        """Return the next global state given the sum of this round's contribution vectors."""

    def aggregate_individual(self, state: GlobalState, contributions: Sequence[np.ndarray]) -> GlobalState:
        """Return the next global state given each participant's vector (participant order); called instead of
        ``aggregate`` for mechanisms with ``needs_individual_contributions``."""
        raise NotImplementedError(f"{type(self).__name__} aggregates the sum of the contributions only")


class PrivacyBudgetError(ValueError):
    """A mechanism refuses to start because the scenario's privacy budgets cannot be met as asked."""


class PrivacyAccountant(ABC):
    """Turns the privacy events silos report into the run's privacy guarantee."""

    def enrol(self, silo_ids: Iterable[int]) -> None:
        """Learn the federation's silo ids at start-up, so that silos never sampled are reported too."""

    @abstractmethod
    def record(self, silo_id: int, event: PrivacyEvent) -> None:
        """Add one event of one silo; reject an unsupported event before changing any state."""

    def round_held(self, round_index: int, *, client_rate: float) -> None:
        """The server held round ``round_index`` at client rate ``client_rate``, whether silos uploaded, the round
        was skipped or abandoned. Accountants whose guarantee is amplified by the server's client sampling count
        every held round (the sample's coins are spent even when nobody was drawn); the others ignore it."""

    @abstractmethod
    def report(self) -> dict[str, Any]:
        """JSON-ready report: at least ``epsilon`` (None when there is no guarantee) and ``delta``."""


class NoGuarantee(PrivacyAccountant):
    """Accountant of mechanisms that give no differential-privacy guarantee."""

    def __init__(self) -> None:
        self._silos: list[int] = []

    def enrol(self, silo_ids: Iterable[int]) -> None:
        self._silos = sorted(set(self._silos) | {int(silo) for silo in silo_ids})

    def record(self, silo_id: int, event: PrivacyEvent) -> None:
        raise TypeError(f"this mechanism gives no DP guarantee and cannot account {type(event).__name__}")

    def report(self) -> dict[str, Any]:
        return {"guarantee": "none", "epsilon": None, "delta": None, "epsilon_per_silo": {str(s): None for s in self._silos}}


class Mechanism(ABC):
    """A privacy mechanism plug-in. Register it in ``privsilo.mechanisms.registry``."""

    name: ClassVar[str]
    Params: ClassVar[type[MechanismParams]] = MechanismParams
    needs_individual_contributions: ClassVar[bool] = False
    needs_users: ClassVar[bool] = False  # the scenario must give records owners (data.users)
    needs_every_silo: ClassVar[bool] = False  # refuses client sampling (federation.client_rate < 1)
    supports_regression: ClassVar[bool] = False  # trains with prediction_loss, so real-valued targets work too
    # the state holds hypotheses each client picks from (IFCA): runs evaluate every client on the one it picks
    personalised: ClassVar[bool] = False
    # what the guarantee protects: "record", "user" or "client" (an audit's default canaries); None: nothing
    privacy_unit: ClassVar[str | None] = None
    # What a silo's upload reveals to the gradient-inversion attacks (privsilo.simulator.attacks): WEIGHTED_DELTA or
    # TRAINED_PARAMETERS (see there); None: something else, and the mechanism cannot be attacked.
    upload_form: ClassVar[str | None] = None
    # mechanism.local_epochs, when set, makes a silo pass over its records that many times instead of taking
    # federation.local_steps independent batches (an attack replays the epochs)
    trains_local_epochs: ClassVar[bool] = False
    # The audit units whose canaries the mechanism can host ("record", "user", "client"); (): no audits.
    audit_units: ClassVar[tuple[str, ...]] = ()
    # audit.kind input: canary records join the silos' records (DP-SGD's, sampled at mechanism.sampling_rate)
    input_canaries: ClassVar[bool] = False
    # audit.score likelihood: each round's upload scored by the subsampled Gaussian's likelihood ratio (DP-SGD)
    likelihood_scores: ClassVar[bool] = False
    # canaries draw personal budgets (params.record_budgets) and each budget level is audited apart (rPDP)
    personal_budgets: ClassVar[bool] = False

    def __init__(self, params: MechanismParams) -> None:
        self.params = params

    @abstractmethod
    def silo(self, context: SiloContext) -> SiloMechanism:
        """Build the silo-side object for one silo."""

    @abstractmethod
    def server(self) -> ServerMechanism:
        """Build the server-side object."""

    def server_for(self, *, num_silos: int, num_users: int | None) -> ServerMechanism:
        """The server-side object given the federation's public sizes (``num_users``: ``data.users.count`` or
        None); mechanisms that need neither keep this default."""
        return self.server()

    def brings_protocol(self) -> bool:
        """Whether this mechanism, with its parameters, brings its own aggregation protocol (``silo_protocol`` /
        ``server_protocol``) in place of the scenario's plain sum or secure aggregation."""
        return False

    def silo_protocol(self, context: SiloContext, *, fractional_bits: int, min_participants: int) -> SiloProtocol | None:
        """The silo side of an aggregation protocol this mechanism brings itself (e.g. ULDP's private weighting),
        or None for the scenario's (plain sum or secure aggregation)."""
        return None

    def server_protocol(
        self, *, num_silos: int, num_users: int | None, length: int, fractional_bits: int, min_participants: int
    ) -> ServerProtocol | None:
        """The server side of the protocol ``silo_protocol`` brings (``length``: the model's size), or None."""
        return None

    def num_hypotheses(self) -> int:
        """How many model vectors the global state holds (each from its own initialisation)."""
        return 1

    def accountant(self) -> PrivacyAccountant:
        """A fresh accountant for one run (mechanisms with a DP guarantee override this)."""
        return NoGuarantee()

    def assumed_public(self) -> tuple[str, ...]:
        """Data-dependent quantities the guarantee treats as public, i.e. does not protect (``summary.json``
        ``privacy.assumed_public``). Mechanisms whose parameters make such a quantity public override this."""
        return ()

    @classmethod
    def audit_claims(cls, privacy: Mapping[str, Any], hosts: Sequence[str]) -> dict[str, Any]:
        """What a client-level audit checks beside ``epsilon``, for a mechanism whose report has per-client figures:
        the claims (``claimed_*`` keys of ``audit.json``) for canary clients hosted by silos ``hosts`` (ids as
        strings), read from the run's privacy report; none by default."""
        return {}

    @classmethod
    def gdp_mu_star(cls, events: Mapping[int, Sequence[Any]], *, rounds: int, claims: Mapping[str, Any],
                    budget: float | None = None) -> float | None:
        """The mechanism's own Gaussian-DP parameter mu* ([`privsilo.mechanisms.gdp`][privsilo.mechanisms.gdp]) that
        an audit's bound on mu is set against: from each silo's privacy events of the run (those announced at
        start-up, then round by round), the number of ``rounds`` the server held and the audit's ``claims``; for
        personal budgets, of the canaries of level ``budget``. None where there is none to compute (the default)."""
        return None

    @classmethod
    def gdp_mu_star_basis(cls) -> str:
        """What `gdp_mu_star` computes mu* from, in words (``gdp_mu_star_basis`` in ``audit.json``)."""
        return "none: not computed for this mechanism"

    @classmethod
    def sweep_plotter(cls) -> Callable[..., None] | None:
        """The mechanism's own plots of a sweep whose base scenario uses it, or None: a function ``(runs, *, axes,
        title, out_dir, base)`` that writes PNG files into ``out_dir``; each run has ``labels`` ({axis key: label}),
        ``seed``, ``accuracy_per_round`` and ``epsilon_per_round`` (None where a round has no epsilon); ``base`` is
        the grid's base scenario. Import plotting code inside the override, so that validating a scenario does not
        load it."""
        return None

    def sweep_records(self) -> Callable[[PrivacyAccountant], Mapping[str, np.ndarray]] | None:
        """What a sweep keeps of the first of its runs with this mechanism and these parameters, for
        `plot_sweep_records`: a function from that run's accountant to per-record arrays (rPDP: each record's budget
        and spent epsilon); None (the default): nothing."""
        return None

    @classmethod
    def plot_sweep_records(cls, records: Mapping[str, np.ndarray], *, run: str, out_dir: Path) -> None:
        """Plot into ``out_dir`` what `sweep_records` kept of the sweep's run labelled ``run``; nothing by default."""

    @classmethod
    def privacy_line(cls, privacy: Mapping[str, Any]) -> str | None:
        """The privacy part of ``privsilo run``'s result line for a mechanism whose report is not an (epsilon,
        delta) guarantee, or None for the common line (``privsilo.simulator.run_dir.writers.privacy_line``)."""
        return None

    def write_plots(self, privacy: Mapping[str, Any], directory: Path) -> None:
        """Write the mechanism's own plots of a finished run (drawn from its privacy report) into ``directory``,
        beside the run's other files; none by default."""


def model_to_vector(model: torch.nn.Module) -> np.ndarray:
    """Flatten a model's parameters (in ``named_parameters`` order) into one float64 vector (one copy to the host)."""
    import torch

    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()]).cpu().numpy()


def prediction_loss(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean loss of a batch: cross-entropy for class labels, mean squared error for real-valued targets
    (regression, one output per record)."""
    import torch

    if labels.is_floating_point():
        return torch.nn.functional.mse_loss(outputs.squeeze(-1), labels)
    return torch.nn.functional.cross_entropy(outputs, labels)


def load_vector_into_model(model: torch.nn.Module, vector: np.ndarray) -> None:
    """Copy a flat vector produced by ``model_to_vector`` back into ``model``'s parameters."""
    import torch

    first = next(model.parameters(), None)
    # one copy to the parameters' device, then copies there
    values, offset = torch.tensor(np.asarray(vector), device=None if first is None else first.device), 0
    # Copied into each parameter in place: the parameters never alias the caller's (e.g. the broadcast) array, and
    # never become views of one flat tensor (which pickling, e.g. a silo's snapshot, would write once per view).
    with torch.no_grad():
        for parameter in model.parameters():
            size = parameter.numel()
            parameter.copy_(values[offset:offset + size].view_as(parameter))
            offset += size
    if offset != values.numel():
        raise ValueError(f"a vector of {values.numel()} values for a model of {offset} parameters")


def numpy_generator(generator: torch.Generator, *, words: int) -> np.random.Generator:
    """A numpy generator keyed by ``words`` x 62 bits drawn from a silo's torch generator, so that every numpy draw
    a mechanism makes comes from the seed (and ``secure_rng``'s re-keying of that generator reaches it too)."""
    import torch

    drawn = torch.randint(0, 2**62, (words,), generator=generator, dtype=torch.int64).tolist()
    return np.random.default_rng(np.random.SeedSequence(drawn))

