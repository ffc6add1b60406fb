"""Privacy events: what a mechanism did to a silo's records, described as data.

In the spirit of Google's dp_accounting (``PoissonSampledDpEvent(GaussianDpEvent)``), a mechanism reports
events and a separate accountant (``privsilo.mechanisms.accounting``) turns them into epsilon.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PoissonGaussianEvent:
    """``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

    Each step includes every record independently with probability ``sampling_rate``, clips per-record
    gradients to L2 norm C and adds N(0, (noise_multiplier * C)^2) noise (Abadi et al. 2016; neighbouring
    relation: add/remove one record; sensitivity C).
    """

    sampling_rate: float
    noise_multiplier: float
    steps: int


@dataclass(frozen=True)
class TrainingSchedule:
    """The public training parameters of rPDP-FL's accountant (Theorem 1): noise multiplier sigma, rounds T,
    local steps per round tau and client rate lambda (keyword names of ``privsilo.mechanisms.rpdp.epsilon``)."""

    noise_multiplier: float
    rounds: int
    local_steps: int
    client_rate: float

    def as_settings(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, eq=False)
class PersonalizedTrainingPlan:
    """A silo's rPDP-FL plan, fixed before training (Liu et al., CCS 2024, Algorithm 1 and Theorem 1).

    Record ``j`` has budget ``budgets[j]`` and sampling rate ``planned_rates[j]``; ``schedule`` holds sigma, T,
    tau and lambda. A silo announces its plan once at start-up, so an accountant knows every record, including
    those of silos that are never sampled.
    """

    budgets: np.ndarray
    planned_rates: np.ndarray
    schedule: TrainingSchedule


@dataclass(frozen=True, eq=False)
class PersonalizedPoissonGaussianEvent:
    """One round of rPDP-FL local training in one silo (Liu et al., CCS 2024, Algorithm 1).

    ``plan.schedule.local_steps`` compositions of the sampled Gaussian mechanism in which record ``j`` is included with its own
    probability ``rates[j]`` (0 = excluded this round).
    """

    plan: PersonalizedTrainingPlan
    rates: np.ndarray




@dataclass(frozen=True)
class UserLevelGaussianEvent:
    """One round of ULDP-NAIVE / AVG / AVG-w / SGD as one silo saw it (Kato et al., VLDB 2024, Thm. 1 and 3).

    Across all silos the round is *one* Gaussian mechanism with user-level sensitivity ``C`` and total noise
    ``noise_multiplier * C``, on the users the server Poisson-sampled with probability ``user_rate`` (Remark 1);
    every silo reports the same event, and a user-level accountant counts each ``round_index`` once.
    ``users_sampled`` is how many users the server sampled (public to the server).
    """

    round_index: int
    user_rate: float
    noise_multiplier: float
    users_sampled: int


@dataclass(frozen=True)
class GroupDpSgdEvent:
    """One round of ULDP-GROUP-k in one silo (Kato et al., Algorithm 2): record-level DP-SGD, ``steps``
    Poisson-subsampled Gaussian steps at record rate ``sampling_rate``, on a dataset in which no user has more
    than ``group_k`` records across silos; converted to user level by RDP group privacy."""

    round_index: int
    sampling_rate: float
    noise_multiplier: float
    steps: int
    group_k: int


@dataclass(frozen=True)
class LocalDpPlan:
    """What every upload of one client will be under a coordinate-wise pure local-DP mechanism (PLDP-FL's PDPM,
    Shen et al., Entropy 2023): ``coordinates`` of its scalars perturbed, each ``epsilon_per_coordinate``-LDP.
    Announced once at start-up, so clients that are never sampled are reported too."""

    epsilon_per_coordinate: float
    coordinates: int


@dataclass(frozen=True)
class LocalDpUpload:
    """One perturbed upload of one client: ``coordinates`` scalars, each ``epsilon_per_coordinate``-LDP, so the
    upload is ``coordinates * epsilon_per_coordinate``-LDP for the client's whole input (basic composition;
    neighbouring relation: any two inputs of the client in its safe range, i.e. any two local datasets)."""

    epsilon_per_coordinate: float
    coordinates: int


@dataclass(frozen=True)
class EuclideanLaplaceEvent:
    """One client's d-private upload in one round (Galli et al., ICISSP 2023, Algorithm 2 and Prop. 3.1).

    The client uploads ``theta_j + delta + rho`` with ``rho`` Euclidean-Laplace noise of parameter ``epsilon``
    per unit of Euclidean distance (``inf``: no noise, nu = 0). ``radius`` is the neighbourhood the calibration
    is set for: the public clip radius R (``calibration`` ``clipped``: delta clipped to R, eps = n / (nu R)) or the
    client's own update norm ||delta|| (``paper``: eps = n / (nu ||delta||)). ``hypothesis_spread`` is the largest
    distance between two broadcast hypotheses (public: the server sent them).
    """

    epsilon: float
    radius: float
    calibration: str
    hypothesis_spread: float


@dataclass(frozen=True)
class ClientLevelGaussianEvent:
    """One round of DP-FedAvg as one uploading silo saw it (McMahan et al., ICLR 2018; Andrew et al., NeurIPS 2021).

    Across silos the round is *one* Gaussian mechanism on the sum of the clipped updates, with sensitivity C (one
    silo's update zeroed out) and noise multiplier ``noise_multiplier`` (with adaptive clipping the multiplier of
    the update and the clipped count taken together), on silos Poisson-sampled at ``sampling_rate``. Every silo
    reports the same event; a client-level accountant counts each ``round_index`` once.
    """

    round_index: int
    sampling_rate: float
    noise_multiplier: float


@dataclass(frozen=True)
class DistributedDiscreteGaussianEvent:
    """One round of DP-FedAvg with the distributed discrete Gaussian (Kairouz, Liu, Steinke, ICML 2021) as one
    uploading silo saw it: it added ``N_Z(0, sigma^2)`` to each of ``dimension`` coordinates of its rounded update,
    whose norms are at most ``l2_bound`` and ``l1_bound`` (all in units of the granularity gamma). The round's noise
    is that of the silos that uploaded: a client-level accountant counts them per ``round_index``.
    """

    round_index: int
    sigma: float
    l2_bound: float
    l1_bound: float
    dimension: int


PrivacyEvent = (
    PoissonGaussianEvent
    | PersonalizedTrainingPlan
    | PersonalizedPoissonGaussianEvent
    | UserLevelGaussianEvent
    | GroupDpSgdEvent
    | LocalDpPlan
    | LocalDpUpload
    | EuclideanLaplaceEvent
    | ClientLevelGaussianEvent
    | DistributedDiscreteGaussianEvent
)
