"""oarlock.vision.datasets: Paddle 3.2's image data sets read from local files (MNIST, FashionMNIST, Cifar10,
Cifar100, DatasetFolder, ImageFolder)."""

from oarlock_vision.datasets.cifar import Cifar10, Cifar100
from oarlock_vision.datasets.folder import DatasetFolder, ImageFolder
from oarlock_vision.datasets.mnist import MNIST, FashionMNIST

__all__ = ["MNIST", "FashionMNIST", "Cifar10", "Cifar100", "DatasetFolder", "ImageFolder"]
