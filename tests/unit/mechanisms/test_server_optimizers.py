"""Server optimisers (Reddi et al. 2021, Algorithm 2; FedAvgM) against hand-written references, and their scenario
block: defaults, refused keys and combinations (exit 2 naming the field)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from privsilo.mechanisms.server_optimizers import Adagrad, Adam, Momentum, Sgd, Yogi
from privsilo.simulator.cli import main
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario

X0 = np.array([0.5, -1.0, 2.0])
AGGREGATES = [np.array([0.7, -1.2, 2.0]), np.array([0.2, -1.0, 2.5]), np.array([1.0, 0.0, -1.0])]  # relative to x


def _run(optimizer, steps=AGGREGATES):
    """Feed the optimiser x + a_t for each a_t (so Delta_t = a_t up to rounding); return the iterates."""
    x, iterates = X0.copy(), []
    for a in steps:
        (x,) = optimizer.step((x,), (x + a,))
        iterates.append(x)
    return iterates


def _reference(rule):
    """Scalar loops over the coordinates: ``rule(delta, state) -> (step, state)`` per coordinate and step."""
    x, states, iterates = X0.tolist(), [None] * len(X0), []
    for a in (a.tolist() for a in AGGREGATES):
        for i in range(len(x)):
            delta = (x[i] + a[i]) - x[i]
            step, states[i] = rule(delta, states[i])
            x[i] = x[i] + step
        iterates.append(np.array(x))
    return iterates


def _assert_close(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15)


def test_sgd_moves_by_lr_times_the_pseudo_gradient():
    _assert_close(_run(Sgd(lr=0.5)), _reference(lambda d, s: (0.5 * d, s)))


def test_sgd_with_lr_one_returns_the_aggregate_itself():
    current, aggregate = (np.array([1e-20, 3.0]),), (np.array([1.0, 3.1]),)
    assert Sgd(lr=1.0).step(current, aggregate)[0] is aggregate[0]


def test_momentum_is_fedavgm():
    def rule(d, m):
        m = 0.9 * (m or 0.0) + d
        return 0.3 * m, m

    _assert_close(_run(Momentum(lr=0.3, beta1=0.9)), _reference(rule))


def _adaptive_rule(second_moment, *, lr, beta1, tau):
    def rule(d, state):
        m, v = state or (0.0, tau**2)
        m = beta1 * m + (1 - beta1) * d
        v = second_moment(v, d * d)
        return lr * m / (math.sqrt(v) + tau), (m, v)

    return rule


def test_adagrad_accumulates_squares():
    rule = _adaptive_rule(lambda v, g2: v + g2, lr=0.1, beta1=0.9, tau=1e-3)
    _assert_close(_run(Adagrad(lr=0.1, beta1=0.9, tau=1e-3)), _reference(rule))


def test_adam_averages_squares():
    rule = _adaptive_rule(lambda v, g2: 0.99 * v + 0.01 * g2, lr=0.1, beta1=0.9, tau=1e-3)
    _assert_close(_run(Adam(lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)), _reference(rule))


def test_yogi_moves_v_by_the_sign_of_v_minus_the_square():
    def second_moment(v, g2):
        sign = (v - g2 > 0) - (v - g2 < 0)
        return v - 0.05 * g2 * sign

    rule = _adaptive_rule(second_moment, lr=0.2, beta1=0.5, tau=1e-2)
    _assert_close(_run(Yogi(lr=0.2, beta1=0.5, beta2=0.95, tau=1e-2)), _reference(rule))


def test_adam_first_step_by_hand():
    """One coordinate, Delta = 0.2: m = 0.02, v = 0.99 tau^2 + 0.01 * 0.04, x + lr m / (sqrt(v) + tau)."""
    (x,) = Adam(lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3).step((np.array([1.0]),), (np.array([1.2]),))
    delta = 1.2 - 1.0
    v = 0.99 * 1e-6 + 0.01 * delta**2
    assert x[0] == pytest.approx(1.0 + 0.1 * 0.1 * delta / (math.sqrt(v) + 1e-3), rel=1e-14)


def test_each_hypothesis_has_its_own_state_and_an_unchanged_one_takes_no_step():
    optimizer = Momentum(lr=1.0, beta1=0.5)
    state = (np.array([0.0]), np.array([10.0]))
    state = optimizer.step(state, (np.array([1.0]), np.array([12.0])))  # m = 1 and 2
    assert [s[0] for s in state] == [1.0, 12.0]
    state = optimizer.step(state, (np.array([1.0]), np.array([13.0])))  # hypothesis 0 unchanged: no step, m kept
    assert [s[0] for s in state] == [1.0, 12.0 + 0.5 * 2.0 + 1.0]
    state = optimizer.step(state, (np.array([2.0]), state[1]))  # hypothesis 0: m = 0.5 * 1 + 1
    assert [s[0] for s in state] == [1.0 + 1.5, 14.0]


def test_an_absent_block_and_zero_mu_keep_the_scenario_form():
    plain = validate_scenario(small_scenario())
    explicit = validate_scenario(small_scenario(federation={**small_scenario()["federation"], "proximal_mu": 0.0}))
    assert plain.to_dict() == explicit.to_dict()
    assert "server_optimizer" not in plain.to_dict()["federation"] and "proximal_mu" not in plain.to_dict()["federation"]


def test_defaults_are_filled_per_optimizer_and_round_trip():
    fed = small_scenario()["federation"]
    adam = validate_scenario(small_scenario(federation={**fed, "server_optimizer": {"name": "adam"}}))
    assert adam.to_dict()["federation"]["server_optimizer"] == {"name": "adam", "lr": 0.1, "beta1": 0.9, "beta2": 0.99, "tau": 0.001}
    sgd = validate_scenario(small_scenario(federation={**fed, "server_optimizer": {"name": "sgd"}}))
    assert sgd.federation.server_optimizer.lr == 1.0 and sgd.federation.server_optimizer.beta1 is None
    for scenario in (adam, sgd):
        assert validate_scenario(scenario.to_dict()) == scenario


@pytest.mark.parametrize(
    "setting, field",
    [
        ("federation.server_optimizer={name: rmsprop}", "federation.server_optimizer.name"),
        ("federation.server_optimizer={name: adam, lr: 0}", "federation.server_optimizer.lr"),
        ("federation.server_optimizer={name: momentum, lr: -1}", "federation.server_optimizer.lr"),
        ("federation.server_optimizer={name: adam, beta1: 1.0}", "federation.server_optimizer.beta1"),
        ("federation.server_optimizer={name: yogi, beta2: -0.1}", "federation.server_optimizer.beta2"),
        ("federation.server_optimizer={name: adagrad, tau: 0}", "federation.server_optimizer.tau"),
        ("federation.server_optimizer={name: adagrad, beta2: 0.9}", "federation.server_optimizer.beta2"),
        ("federation.server_optimizer={name: sgd, beta1: 0.9}", "federation.server_optimizer.beta1"),
        ("federation.server_optimizer={name: adam, gamma: 1}", "federation.server_optimizer.gamma"),
        ("federation.proximal_mu=-0.1", "federation.proximal_mu"),
    ],
)
def test_bad_settings_exit_2_naming_the_field(setting, field, capsys):
    assert main(["validate", str(REPO / "scenarios" / "quickstart.yaml"), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field + ":" in err, err


@pytest.mark.parametrize(
    "blocks, field, needle",
    [
        ({"mechanism": {"name": "pldp"}, "federation": {"server_optimizer": {"name": "adam"}}},
         "federation.server_optimizer.name", "perturb 'weights'"),
        ({"mechanism": {"name": "uldp", "variant": "sgd"}, "federation": {"proximal_mu": 0.1},
          "data": {"users": {"count": 10}}, "protocol": {"secure_aggregation": True}},
         "federation.proximal_mu", "variant 'sgd'"),
    ],
)
def test_meaningless_combinations_are_refused(blocks, field, needle):
    with pytest.raises(ScenarioError) as error:
        validate_scenario(blocks)
    assert error.value.field == field and needle in str(error.value)


def test_meaningful_combinations_are_accepted():
    adam = {"server_optimizer": {"name": "adam"}, "proximal_mu": 0.1}
    validate_scenario({"mechanism": {"name": "pldp", "perturb": "update"}, "federation": adam})
    validate_scenario({"mechanism": {"name": "dprivacy", "radius": 1.0, "hypotheses": 2}, "federation": adam})
    for variant in ("avg", "avg_w", "naive"):
        validate_scenario({"mechanism": {"name": "uldp", "variant": variant}, "federation": adam,
                           "data": {"users": {"count": 10}}, "protocol": {"secure_aggregation": True}})
    validate_scenario({"mechanism": {"name": "uldp", "variant": "group", "group_k": 2}, "federation": adam, "data": {"users": {"count": 10}}})
    validate_scenario({"mechanism": {"name": "rpdp"}, "federation": adam})


def test_the_scenario_reference_lists_the_new_keys():
    from privsilo.simulator.scenario.reference import scenario_reference_markdown

    reference = scenario_reference_markdown()
    for key in ("proximal_mu", "server_optimizer.name", "server_optimizer.lr", "server_optimizer.beta1",
                "server_optimizer.beta2", "server_optimizer.tau"):
        assert f"| `federation.{key}` |" in reference, key
