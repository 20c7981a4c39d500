"""Entry point of oarlock-io ("io"): export the datasets, samplers and the DataLoader into oarlock.io."""

from oarlock import hookimpl

import oarlock_io


@hookimpl
def oarlock_register_api(api):
    oarlock_io.register_api(api)
