"""Client-level DP-FedAvg accountants fed the events of a run, for the dp_fedavg tests."""
from __future__ import annotations

from privsilo.mechanisms.dp_fedavg.accountant import ClientLevelAccountant
from privsilo.mechanisms.events import ClientLevelGaussianEvent

DELTA = 1e-5
"""The delta the dp_fedavg tests' accountants and runs report epsilon at."""


def client_level_accountant(q: float, z: float, rounds: int, *, accountant: str = "rdp", silos: int = 3) -> ClientLevelAccountant:
    """An accountant (``accountant``: rdp or pld) that ``silos`` silos told of ``rounds`` rounds at client sampling
    rate ``q`` and noise multiplier ``z``, as a run's silos tell it."""
    account = ClientLevelAccountant(delta=DELTA, noise_multiplier=z, accountant=accountant)
    for round_index in range(rounds):
        for silo in range(silos):  # every uploading silo reports the round; it counts once
            account.record(silo, ClientLevelGaussianEvent(round_index=round_index, sampling_rate=q, noise_multiplier=z))
    return account
