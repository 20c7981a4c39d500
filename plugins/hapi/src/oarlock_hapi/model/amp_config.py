"""Model.prepare's amp_configs, checked and split as Paddle 3.2 does: a level ('O0' float32, 'O1' autocast,
'O2' pure low precision), auto_cast's custom lists, and GradScaler's arguments."""

from __future__ import annotations

LEVELS = ("O0", "O1", "O2")
CUSTOM_LISTS = ("custom_white_list", "custom_black_list")
SCALER_KEYS = ("init_loss_scaling", "incr_ratio", "decr_ratio", "incr_every_n_steps", "decr_every_n_nan_or_inf",
               "use_dynamic_loss_scaling")


def parse_amp_configs(amp_configs):
    """(level, auto_cast custom lists, GradScaler kwargs) from amp_configs (None, a level string or a dict)."""
    owner = "Model.prepare()"
    if not amp_configs:
        return "O0", {}, {}
    if isinstance(amp_configs, str):
        if amp_configs not in LEVELS:
            raise ValueError(f"{owner}: The level of amp_configs should be 'O0', 'O1' or 'O2', got {amp_configs!r}")
        return amp_configs, {}, {}
    if not isinstance(amp_configs, dict):
        raise TypeError(f"{owner}: argument 'amp_configs' must be None, a level string ('O0', 'O1', 'O2') or a "
                        f"dict, got {type(amp_configs).__name__}")
    level = amp_configs.get("level", "O1")
    if level not in LEVELS:
        raise ValueError(f"{owner}: amp_configs['level'] should be 'O0', 'O1' or 'O2', got {level!r}")
    keys = set(amp_configs) - {"level"}
    if not keys or level == "O0":
        return level, {}, {}
    if "use_pure_fp16" in keys:
        raise ValueError(f"{owner}: 'use_pure_fp16' is an invalid parameter, the level of mixed precision training "
                         f"only depends on 'O1' or 'O2'.")
    if "use_fp16_guard" in keys:
        raise ValueError(f"{owner}: 'use_fp16_guard' is supported in static graph mode only.")
    if "custom_black_varnames" in keys:
        raise ValueError(f"{owner}: 'custom_black_varnames' is supported in static graph mode only.")
    custom = {k: amp_configs[k] for k in CUSTOM_LISTS if k in keys}
    unknown = keys - set(CUSTOM_LISTS) - set(SCALER_KEYS)
    if unknown:
        raise ValueError(f"{owner}: Except for 'level', the keys of 'amp_configs' must be accepted by mixed precision "
                         f"APIs ({', '.join(CUSTOM_LISTS + SCALER_KEYS)}), but {tuple(sorted(unknown))} could not "
                         f"be recognized.")
    return level, custom, {k: amp_configs[k] for k in SCALER_KEYS if k in keys}
