"""Entry point of oarlock-vision ("vision"): oarlock.vision (models, ops, transforms, datasets) and
oarlock.utils.download. The modules are imported when the api hook runs, after oarlock.nn exists."""

from oarlock import hookimpl


@hookimpl
def oarlock_register_api(api):
    from oarlock_vision import exports
    exports.register_api(api)
