"""Pretrained weights for the model zoo: Paddle's URLs and MD5 sums, found in (or downloaded to) the weights
cache by oarlock.utils.download. Downloading needs network access; without it, put the .pdparams file in
~/.cache/paddle/hapi/weights (the error says the exact path), or pass its path as `pretrained`."""

from __future__ import annotations

import os

import oarlock
from oarlock_vision.download import get_weights_path_from_url

HAPI = "https://paddle-hapi.bj.bcebos.com/models/"


def load_pretrained(build, arch, urls, pretrained):
    """build() with the weights of `arch` loaded when `pretrained` is True (from urls[arch]: (url, md5)) or a
    path to a weights file; False leaves the initialisation. The argument is checked before the model is built
    (VGG's classifier alone is 120M weights)."""
    if pretrained is False or pretrained is None:
        return build()
    if isinstance(pretrained, (str, os.PathLike)):
        path = os.fspath(pretrained)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{arch}: pretrained={path!r} is not a file (give True, False or the path of "
                                    f"a weights file)")
    elif pretrained is True:
        if arch not in urls:
            raise ValueError(f"{arch}: there are no pretrained weights for this model (Paddle publishes them for "
                             f"{', '.join(sorted(urls))}); use pretrained=False or the path of a weights file")
        path = get_weights_path_from_url(*urls[arch])
    else:
        raise TypeError(f"{arch}: pretrained must be True, False or the path of a weights file, got "
                        f"{type(pretrained).__name__}")
    model = build()
    model.set_state_dict(oarlock.load(path))
    return model
