"""nn layers: the Layer base, Parameter, containers, initializers and the layer families; each
family module lists what it exports in EXPORTS = {namespace: [classes or (name, object) pairs]}."""

from oarlock_nn.layers import (activation, activation_more, attention, base, common, containers, conv, decode, init,
                                initializer, initializer_more, instance_norm, loss, loss_more, norm, param_dict,
                                param_utils, rnn, spatial, transformer)

CORE_EXPORTS = {
    "oarlock.nn": [base.Layer, base.Parameter, containers.Sequential, containers.LayerList, containers.LayerDict,
                   containers.ParameterList, initializer.ParamAttr,
                   ("Module", base.Layer), ("ModuleList", containers.LayerList), ("ModuleDict", containers.LayerDict)],
    "oarlock.nn.initializer": list(initializer.INITIALIZERS),
}
FAMILIES = (common, activation, activation_more, conv, norm, attention, loss, init, transformer, spatial, loss_more,
            param_utils, rnn, instance_norm, param_dict, initializer_more, decode)


def register_api(api):
    for exports in (CORE_EXPORTS, *(family.EXPORTS for family in FAMILIES)):
        for namespace, objects in exports.items():
            for obj in objects:
                name, value = obj if isinstance(obj, tuple) else (obj.__name__, obj)
                api.export(namespace, name, value)
