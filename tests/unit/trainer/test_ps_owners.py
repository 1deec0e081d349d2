"""ParameterServer Sync: deterministic, balanced ownership of parameters by servers."""

from __future__ import annotations

from dtjob_trainer.strategies.ps_sync import assign_owners


def test_largest_first_onto_the_least_loaded_server() -> None:
    sizes = [4096, 64, 4096, 64, 640, 10]
    owners = assign_owners(sizes, 2)
    # 4096->0, 4096->1, 640->0 (tie: lowest), then 64, 64, 10 onto the lighter server 1.
    assert owners == [0, 1, 1, 1, 0, 1]
    loads = [sum(s for s, o in zip(sizes, owners, strict=True) if o == b) for b in range(2)]
    assert max(loads) - min(loads) <= 640


def test_single_server_owns_everything_and_more_servers_than_params_is_fine() -> None:
    assert assign_owners([3, 2, 1], 1) == [0, 0, 0]
    assert sorted(assign_owners([3, 2], 4)) == [0, 1]
