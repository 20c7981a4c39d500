"""oarlock.vision.transforms: the common transforms of Paddle 3.2 (transforms.py) and their functions
(functional.py) for PIL images, HWC numpy arrays and CHW Tensors."""

from oarlock_vision.transforms import functional, transforms
from oarlock_vision.transforms.transforms import *  # noqa: F401,F403

# what goes into oarlock.vision.transforms (classes and functions) and oarlock.vision.transforms.functional
EXPORTS = {
    "oarlock.vision.transforms": {**{n: getattr(transforms, n) for n in transforms.__all__},
                                  **{n: getattr(functional, n) for n in functional.__all__}},
    "oarlock.vision.transforms.functional": {n: getattr(functional, n) for n in functional.__all__},
}
