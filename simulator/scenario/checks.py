"""The checks that span several fields of a validated scenario (data, model, mechanism, protocol, faults, attack,
audit), each problem one ``ScenarioError``; what a mechanism allows is read from its class's traits."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from privsilo.mechanisms.base import WEIGHTED_DELTA, FederationShape
from privsilo.mechanisms.registry import mechanism_class, mechanism_classes, mechanism_names
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario.schema import ProtocolConfig, Scenario

if TYPE_CHECKING:
    from privsilo.protocols.fixed_point import FixedPointCodec
    from privsilo.simulator.data import DatasetInfo


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
    mechanism = scenario.mechanism.plugin
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
        _check_audit(scenario, train_records=info.train_records)
    for role in ("server", "silo"):
        gpus = getattr(scenario.resources, role).num_gpus
        if gpus > 1 and gpus != int(gpus):
            raise ScenarioError(f"resources.{role}.num_gpus", gpus, "must be a fraction <= 1 or a whole number")


def _dataset_info(scenario: Scenario) -> DatasetInfo:
    """The dataset's registry entry, or a user's dataset loaded and checked (its problems name ``data.dataset``)."""
    from privsilo.simulator.data.sources import scenario_dataset_info
    from privsilo.simulator.user_code import UserCodeError

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
    from privsilo.simulator.models.builtin import model_supports, parameter_count

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

    from privsilo.simulator.models.checks import model_problem
    from privsilo.simulator.models.builtin import build_scenario_model
    from privsilo.simulator.user_code import UserCodeError

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
    from privsilo.protocols.fixed_point import FixedPointCodec

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
    mechanism = scenario.mechanism.plugin
    if kind == "regression" and not mechanism.supports_regression:
        fitting = [name for name in mechanism_names() if mechanism_class(name).supports_regression]
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
    from privsilo.simulator.data import DATASETS

    attack, name = scenario.attack, scenario.mechanism.name
    if info.pixel_scale is None:
        images = ", ".join(sorted(n for n, d in DATASETS.items() if d.pixel_scale is not None))
        raise ScenarioError("data.dataset", scenario.data.dataset, f"attacks reconstruct images; use one of {images}")
    if scenario.mechanism.plugin.upload_form is None:
        attackable = ", ".join(mechanism.name for mechanism in mechanism_classes() if mechanism.upload_form is not None)
        raise ScenarioError(
            "mechanism.name", name,
            f"the attack reads a silo's upload as the model change of its local SGD steps ([weight x delta, weight], or "
            f"the trained parameters); '{name}' uploads something else; attackable: {attackable}",
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
    epochs = attacked_epochs(scenario)
    if epochs is not None and (cap is None or cap > batch):
        raise ScenarioError(
            "mechanism.local_epochs", epochs,
            f"each epoch reshuffles a silo's records into batches of {batch}, an order the attacker cannot replay unless "
            f"the silo holds one batch: set data.max_records_per_silo = {batch} (the batch size), or remove "
            "mechanism.local_epochs (federation.local_steps steps of independent batches)",
        )


def attacked_epochs(scenario: Scenario) -> int | None:
    """``mechanism.local_epochs`` where the mechanism trains epochs (an attack replays them), else None."""
    return scenario.mechanism.params.local_epochs if scenario.mechanism.plugin.trains_local_epochs else None


MAX_CANARY_CLIENTS_PER_SILO = 1000


def audit_unit(scenario: Scenario) -> str:
    """The unit of a scenario's audit: ``audit.unit``, else the one its mechanism protects (clients for ``none``)."""
    audit = scenario.audit
    if audit is not None and audit.unit is not None:
        return audit.unit
    return scenario.mechanism.plugin.privacy_unit or "client"


def _check_audit(scenario: Scenario, *, train_records: int | None) -> None:
    """Refuse an audit the mechanism cannot host (its traits) or the federation cannot hold."""
    audit, name, mechanism = scenario.audit, scenario.mechanism.name, scenario.mechanism.plugin
    unit = audit_unit(scenario)
    units = mechanism.audit_units
    if not units:
        auditable = ", ".join(other.name for other in mechanism_classes() if other.audit_units)
        raise ScenarioError("mechanism.name", name, f"audits run with {auditable}")
    if unit not in units:
        protected = mechanism.privacy_unit or "nothing"
        raise ScenarioError("audit.unit", unit, f"'{name}' protects {protected}; audit unit allowed: {', '.join(units)}")
    if audit.kind == "input" and (not mechanism.input_canaries or unit != "record"):
        hosts = ", ".join(other.name for other in mechanism_classes() if other.input_canaries)
        raise ScenarioError("audit.kind", "input", f"input canaries are records of {hosts}; use gradient")
    if audit.kind == "input" and scenario.mechanism.params.sampling_rate is None:
        raise ScenarioError("mechanism.sampling_rate", None, "input canaries join the silos' records: set a fixed rate, "
                            "else q = batch_size / records would change with the canaries included")
    if audit.kind == "input" and audit.canary_direction != "gaussian":
        raise ScenarioError("audit.canary_direction", audit.canary_direction, "input canaries are records, not directions: "
                            "use gaussian, or kind gradient")
    if audit.view == "uploads" and (reason := uploads_view_refusal(scenario)):
        raise ScenarioError("audit.view", "uploads", reason)
    if audit.score == "likelihood" and (reason := likelihood_score_refusal(scenario)):
        raise ScenarioError("audit.score", "likelihood", reason)
    if refusal := scenario.mechanism.params.audit_refusal(client_rate=scenario.federation.client_rate):
        raise ScenarioError(*refusal)
    capacity = _canary_capacity(scenario, unit, train_records=train_records)
    if capacity is not None and audit.canaries > capacity:
        raise ScenarioError("audit.canaries", audit.canaries, f"at most {capacity} ({_canary_capacity_reason(unit)})")


def uploads_view_refusal(scenario: Scenario) -> str | None:
    """Why the server cannot score the canaries against their host silos' uploads (None where it can): it reads
    FedAvg uploads ``[weight x delta, weight]`` with the canaries inside."""
    if scenario.protocol.secure_aggregation:
        return "under protocol.secure_aggregation the server sees only the sum of the uploads: use final_model or auto"
    if scenario.mechanism.plugin.upload_form != WEIGHTED_DELTA:
        readable = ", ".join(mechanism.name for mechanism in mechanism_classes() if mechanism.upload_form == WEIGHTED_DELTA)
        return f"the uploads view reads FedAvg uploads of {readable}: use final_model or auto"
    if scenario.audit.kind != "gradient":
        return "input canaries are scored by the final model's loss: use final_model or auto"
    return None


def likelihood_score_refusal(scenario: Scenario) -> str | None:
    """Why a scenario's canaries cannot be scored with the subsampled Gaussian's per-round likelihood ratio
    (``privsilo.simulator.audit.scores``; None where they can)."""
    if audit_view(scenario) != "uploads":
        return "the likelihood score reads each round's uploads: use audit.view uploads (or auto without secure aggregation), or score sum"
    if not scenario.mechanism.plugin.likelihood_scores:
        models = ", ".join(mechanism.name for mechanism in mechanism_classes() if mechanism.likelihood_scores)
        return f"the likelihood score models {models}'s canary records: use score sum"
    if scenario.mechanism.params.noise_multiplier == 0.0:
        return "the likelihood score weighs rounds by the mechanism's noise, and noise_multiplier is 0: use score sum"
    return None


def audit_view(scenario: Scenario) -> str:
    """The view an audit scores: ``audit.view``, with ``auto`` the uploads where the threat model lets the server
    see them, else the final model."""
    view = scenario.audit.view
    if view == "auto":
        return "final_model" if uploads_view_refusal(scenario) else "uploads"
    return view


def _canary_capacity(scenario: Scenario, unit: str, *, train_records: int | None) -> int | None:
    if unit == "client":
        return MAX_CANARY_CLIENTS_PER_SILO * scenario.data.silos
    if unit == "user":
        return None if scenario.data.users is None else scenario.data.users.count
    if scenario.audit.kind == "gradient":  # a gradient canary is a direction inside the mechanism, not a record
        return None
    limits = [train_records]
    if scenario.data.max_records_per_silo is not None:
        limits.append(scenario.data.max_records_per_silo * scenario.data.silos)
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def _canary_capacity_reason(unit: str) -> str:
    return {
        "client": f"{MAX_CANARY_CLIENTS_PER_SILO} canary clients per silo",
        "user": "one canary per user of data.users.count",
        "record": "one input canary per training record the silos hold",
    }[unit]
