"""rPDP's sweep plots (``privsilo.mechanisms.rpdp.plots``): budget vs spent epsilon per record of one run."""
from __future__ import annotations

import numpy as np

from privsilo.mechanisms.rpdp.plots import budget_vs_spent_figure


def test_budget_vs_spent_shows_every_budget_level_of_the_named_run():
    """486 records at three budget levels: one column per level with its record count and how many never
    trained (not three overlapping dots), and the title says which run it shows."""
    budget = np.repeat([0.1, 1.0, 5.0], [340, 97, 49])
    rounds = np.concatenate([np.zeros(340, int), np.full(92, 15), np.zeros(5, int), np.full(49, 15)])
    spent = np.where(rounds > 0, 0.97 * budget, 0.0)
    figure = budget_vs_spent_figure({"budget": budget, "spent": spent, "rounds": rounds}, run="ThreeLevels / rPDP, seed 0")
    ax = figure.axes[0]
    assert "ThreeLevels / rPDP, seed 0" in ax.get_title()
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["0.1\n340 records\n340 never trained", "1\n97 records\n5 never trained", "5\n49 records\n0 never trained"]
    points = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections])
    assert points.size == 486  # every record drawn
    continuous = budget_vs_spent_figure({"budget": np.linspace(0.1, 10, 50), "spent": np.linspace(0.09, 9, 50)}, run="x")
    assert [t.get_text() for t in continuous.axes[0].get_legend().get_texts()] == ["50 records", "spent = budget"]
