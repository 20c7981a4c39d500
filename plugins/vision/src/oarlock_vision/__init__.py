"""oarlock-vision: Paddle 3.2's paddle.vision on oarlock.

models/     the model zoo, written here with Paddle's constructors, attribute names and state-dict keys (so
            Paddle's .pdparams load), one module per family; pretrained.py finds published weights
ops.py      ConvNormActivation, nms
download.py oarlock.utils.download (the weights cache; offline use)
exports.py  what goes into which namespace
"""
