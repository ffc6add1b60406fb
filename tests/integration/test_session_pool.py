"""The session's pool of warm actors (``privsilo.simulator.runtime.pool.lease.SessionPool``): idle actors of another
shape stay while a lease's new actors fit beside them, and are stopped when they do not."""
from __future__ import annotations

import pytest
import ray

from privsilo.simulator.runtime.pool.lease import SPARE_ACTORS, ActorShape, SessionPool, wait_until_scheduled
from tests.support.pool_drivers import Sleeper


def _ready(handles: list) -> list:
    ray.get([handle.__ray_ready__.remote() for handle in handles], timeout=120)
    return handles


def _ids(handles: list) -> set[str]:
    return {handle._actor_id.hex() for handle in handles}


def test_idle_actors_of_another_shape_stay_while_new_ones_fit_and_are_stopped_when_they_do_not(ray_local):
    pool = SessionPool()
    light, other = ActorShape(Sleeper, num_cpus=0.1, num_gpus=0), ActorShape(Sleeper, num_cpus=0.2, num_gpus=0)
    first = _ready(pool.lease({light: 2})[light])
    pool.give_back(light, first)
    second = _ready(pool.lease({other: 1})[other])  # 0.2 CPUs fit beside the idle ones: they stay
    assert _ids(_ready(pool.lease({light: 2})[light])) == _ids(first)  # and serve the next run of their shape
    pool.give_back(light, first)
    pool.give_back(other, second)

    gpus = ray.available_resources().get("GPU", 0.0)  # the session's one GPU, unless another test's actor holds a share
    assert gpus > 0
    holder, needs = ActorShape(Sleeper, num_cpus=0, num_gpus=gpus), ActorShape(Sleeper, num_cpus=0.3, num_gpus=gpus)
    held = _ready(pool.lease({holder: 1})[holder])
    pool.give_back(holder, held)
    new = pool.lease({needs: 1})[needs]  # does not fit beside the idle holder: every idle actor is stopped
    ready, pending, _ = wait_until_scheduled([handle.__ray_ready__.remote() for handle in new], pool=pool, timeout=120)
    assert not pending and len(ready) == 1
    for stopped in held + first + second:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(stopped.__ray_ready__.remote(), timeout=120)
    pool.give_back(needs, new)
    pool.stop_idle()


def test_a_sessions_pool_keeps_at_most_its_spare_actors_beside_a_lease(ray_local):
    pool = SessionPool()
    shapes = [ActorShape(Sleeper, num_cpus=0.01 * (i + 1), num_gpus=0) for i in range(SPARE_ACTORS + 2)]
    leased = [(shape, _ready(pool.lease({shape: 1})[shape])) for shape in shapes]
    for shape, handles in leased:
        pool.give_back(shape, handles)
    last = ActorShape(Sleeper, num_cpus=0.5, num_gpus=0)
    pool.give_back(last, _ready(pool.lease({last: 1})[last]))
    alive = []
    for _, (handle,) in leased:
        try:
            ray.get(handle.__ray_ready__.remote(), timeout=120)
            alive.append(handle)
        except ray.exceptions.RayActorError:
            pass
    assert alive == [handle for _, (handle,) in leased[-SPARE_ACTORS:]]  # the most recently given back stay
    pool.stop_idle()
