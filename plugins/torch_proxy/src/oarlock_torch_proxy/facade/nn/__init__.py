"""torch.nn: Module and containers (module), layers and losses (layers), functional, init, utils."""

from oarlock_torch_proxy.facade.nn import functional, init, utils
from oarlock_torch_proxy.facade.nn.layers import (  # noqa: F401
    ELU, GELU, GLU, SELU, BatchNorm1d, BatchNorm2d, ConvTranspose1d, ConvTranspose2d, MultiheadAttention, Upsample,
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d,
    BCELoss, BCEWithLogitsLoss, Bilinear, Conv1d,
    Conv2d, CrossEntropyLoss, Dropout, Embedding, Flatten, GroupNorm, Hardsigmoid, Hardswish, Hardtanh, HuberLoss,
    Identity, KLDivLoss, L1Loss, LayerNorm, LeakyReLU, Linear, LogSigmoid, LogSoftmax, Mish, MSELoss, NLLLoss,
    PixelShuffle, PReLU, ReLU, ReLU6, RMSNorm, Sigmoid, SiLU, SmoothL1Loss, Softmax, Softmin, Softplus, Softsign,
    Tanh, Threshold, Unflatten)
from oarlock_torch_proxy.facade.nn.rnn import GRU, LSTM, RNN  # noqa: F401
from oarlock_torch_proxy.facade.nn.module import (  # noqa: F401
    Module, ModuleDict, ModuleList, Parameter, ParameterDict, ParameterList, Sequential)
from oarlock_torch_proxy.missing import missing_class, missing_getattr

# importable (x-transformers and others import them at module level), reported when made
for _name in ("LSTMCell", "GRUCell", "Transformer", "TransformerEncoder",
              "TransformerDecoder", "TransformerEncoderLayer", "TransformerDecoderLayer", "Conv3d", "BatchNorm3d",
              "InstanceNorm1d", "InstanceNorm2d", "EmbeddingBag"):
    globals()[_name] = missing_class(f"torch.nn.{_name}")

__getattr__ = missing_getattr("torch.nn")
_ = (functional, init, utils)
