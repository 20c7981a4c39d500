"""nn layers: the Layer base, Parameter, containers, initializers; exported into oarlock.nn."""

from oarlock_ops.layers import base, containers, initializer

EXPORTS = {
    "oarlock.nn": [base.Layer, base.Parameter, containers.Sequential, containers.LayerList, containers.LayerDict,
                   containers.ParameterList, initializer.ParamAttr],
    "oarlock.nn.initializer": list(initializer.INITIALIZERS),
}
ALIASES = {"oarlock.nn": {"Module": base.Layer, "ModuleList": containers.LayerList,
                          "ModuleDict": containers.LayerDict}}


def register_api(api):
    for namespace, objects in EXPORTS.items():
        for obj in objects:
            api.export(namespace, obj.__name__, obj)
    for namespace, names in ALIASES.items():
        for name, obj in names.items():
            api.export(namespace, name, obj)
