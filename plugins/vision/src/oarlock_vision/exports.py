"""What oarlock-vision exports, namespace by namespace (Paddle 3.2's __all__ of each module)."""

from __future__ import annotations

import importlib
import inspect

from oarlock_vision import datasets, download, image, models, ops, transforms

# Paddle's model modules, served as oarlock.vision.models.<module> (`from paddle.vision.models.resnet import
# BottleneckBlock`); alexnet and googlenet are left out: those names are the builder functions in
# oarlock.vision.models, and a namespace may not share a name with its parent's export
MODEL_MODULES = ("densenet", "inceptionv3", "lenet", "mobilenetv1", "mobilenetv2", "mobilenetv3", "resnet",
                 "shufflenetv2", "squeezenet", "vgg")

NAMESPACE_DOCS = {
    "oarlock.vision": "Paddle's paddle.vision: the model zoo, vision ops, transforms and datasets",
    "oarlock.vision.models": "Paddle 3.2's vision models (their constructors, parameter names and state-dict keys)",
    "oarlock.vision.ops": "Vision operators and blocks: ConvNormActivation, nms",
    "oarlock.vision.transforms": "Image transforms for PIL images, HWC arrays and CHW Tensors (Paddle's semantics)",
    "oarlock.vision.transforms.functional": "The functions behind oarlock.vision.transforms",
    "oarlock.vision.datasets": "MNIST, FashionMNIST, Cifar10/100, DatasetFolder, ImageFolder from local files",
    "oarlock.utils.download": "get_weights_path_from_url / get_path_from_url: files cached under a root directory",
}


def _exports():
    table = {
        "oarlock.vision.models": {name: getattr(models, name) for name in models.__all__},
        "oarlock.vision.ops": {"ConvNormActivation": ops.ConvNormActivation, "nms": ops.nms},
        "oarlock.vision.datasets": {name: getattr(datasets, name) for name in datasets.__all__},
        "oarlock.utils.download": {name: getattr(download, name)
                                   for name in ("get_weights_path_from_url", "get_path_from_url", "is_url")},
        **transforms.EXPORTS,
    }
    for name in MODEL_MODULES:
        module = importlib.import_module(f"oarlock_vision.models.{name}")
        table[f"oarlock.vision.models.{name}"] = {
            n: v for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v)) and (
                v.__module__ == module.__name__ or n in models.__all__)}
    # paddle.vision re-exports the models, the data sets and the image backend functions at its top level
    table["oarlock.vision"] = {**table["oarlock.vision.models"], **table["oarlock.vision.datasets"],
                               **{name: getattr(image, name)
                                  for name in ("set_image_backend", "get_image_backend", "image_load")}}
    return table


def register_api(api):
    for namespace, doc in NAMESPACE_DOCS.items():
        api.namespace(namespace, doc)
    for namespace, names in _exports().items():
        for name, obj in names.items():
            api.export(namespace, name, obj)
