"""From hybrid_configs to a topology: the degrees a program asks for, resolved through the strategy table.

Paddle's rules (fleet.py `_init_hybrid_parallel_env`): a degree below 0 other than dp's is an error,
degrees below 1 become 1, and dp_degree=-1 is the world size // (mp_degree * pp_degree). The axes come
in `order`; a strategy whose degree is above 1 but whose key the order leaves out is an error here
(Paddle silently drops it).
"""

from __future__ import annotations

from oarlock_parallel.strategies import registered


def resolve(hybrid_configs: dict, order, world_size: int, registry=None):
    """(axis names, dims, {strategy name: degree}) for `hybrid_configs` in `order` on `world_size` ranks."""
    strategies = registered(registry)
    by_order = {s.order_key: s for s in strategies.values()}
    degrees = {}
    for s in strategies.values():
        value = hybrid_configs.get(s.degree_key, s.default_degree)
        if value < 0 and s.default_degree >= 0:
            raise ValueError(f"fleet.init(): hybrid_configs[{s.degree_key!r}] must be >= 0, got {value}")
        degrees[s.name] = max(value, 1) if value >= 0 else value
    for s in strategies.values():   # dp_degree=-1: what mp and pp leave (Paddle ignores the others)
        if degrees[s.name] < 0:
            used = degrees.get("tensor", 1) * degrees.get("pipeline", 1)
            degrees[s.name] = max(world_size // used, 1)
    unknown = [key for key in order if key not in by_order]
    if unknown:
        raise ValueError(f"fleet.init(): hybrid_configs order {list(order)} names {unknown}, which no installed "
                         f"parallel strategy provides; known: {sorted(by_order)}")
    left_out = [f"{s.degree_key}={degrees[s.name]}" for s in strategies.values()
                if degrees[s.name] > 1 and s.order_key not in order]
    if left_out:
        raise ValueError(f"fleet.init(): {', '.join(left_out)} but hybrid_configs order {list(order)} leaves its "
                         f"axis out; add it to the order")
    names = [by_order[key].axis for key in order]
    dims = [degrees[by_order[key].name] for key in order]
    return names, dims, degrees
