"""The three summaries of TensorBoard's hparams plugin, as PyTorch's add_hparams writes them: the
experiment (which hyperparameters and metrics exist), the session start (this run's values) and the
session end (status). Field numbers from tensorboard/plugins/hparams/{plugin_data,api}.proto and
google/protobuf/struct.proto:

    HParamsPluginData version=1, experiment=2, session_start_info=3, session_end_info=4
    Experiment        hparam_infos=4 HParamInfo{name=1, type=4, domain_discrete=5}, metric_infos=5
    MetricInfo        name=1 MetricName{tag=2}
    SessionStartInfo  hparams=1 map<string, Value> (entries key=1, value=2)
    SessionEndInfo    status=1 (STATUS_SUCCESS=1)
    Value             number_value=2 double, string_value=3, bool_value=4; ListValue values=1
"""

from __future__ import annotations

import numbers

from oarlock_tensorboard.messages import plugin_value
from oarlock_tensorboard.protobuf import bytes_field, double_field, int_field

PLUGIN_NAME = "hparams"
EXPERIMENT_TAG = "_hparams_/experiment"
SESSION_START_INFO_TAG = "_hparams_/session_start_info"
SESSION_END_INFO_TAG = "_hparams_/session_end_info"
_STRING, _BOOL, _FLOAT64 = 1, 2, 3   # DataType
_STATUS_SUCCESS = 1


def _value(v) -> tuple[int, bytes]:
    """(DataType, encoded google.protobuf.Value) of a bool, number or str (already checked)."""
    if isinstance(v, bool):
        return _BOOL, int_field(4, v)
    if isinstance(v, numbers.Real):
        return _FLOAT64, double_field(2, float(v))
    return _STRING, bytes_field(3, v)


def _plugin_data(field: int, message: bytes) -> bytes:
    return bytes_field(field, message)  # version 0 is the default: not written


def summaries(hparams: dict, metrics, domains: dict) -> tuple[bytes, bytes, bytes]:
    """Summary.Value messages (experiment, session start, session end) for hparams {name: bool, number or
    str} (numbers already plain Python), metric tags `metrics` and discrete domains {name: [values]}."""
    infos, start = [], []
    for name, v in hparams.items():
        kind, encoded = _value(v)
        info = bytes_field(1, name) + int_field(4, kind)
        if name in domains:
            info += bytes_field(5, b"".join(bytes_field(1, _value(d)[1]) for d in domains[name]))
        infos.append(bytes_field(4, info))
        start.append(bytes_field(1, bytes_field(1, name) + bytes_field(2, encoded)))
    infos += [bytes_field(5, bytes_field(1, bytes_field(2, tag))) for tag in metrics]
    return (plugin_value(EXPERIMENT_TAG, PLUGIN_NAME, _plugin_data(2, b"".join(infos))),
            plugin_value(SESSION_START_INFO_TAG, PLUGIN_NAME, _plugin_data(3, b"".join(start))),
            plugin_value(SESSION_END_INFO_TAG, PLUGIN_NAME, _plugin_data(4, int_field(1, _STATUS_SUCCESS))))
