"""oarlock-nn: the framework layer over the op families (Paddle's paddle.nn layers, paddle.optimizer,
paddle.amp).

layers/  nn.Layer, Parameter, the containers, the layer families and the initializers (nn.initializer, nn.init)
optim/   optimizers, gradient clipping, LR schedulers (oarlock.optimizer, oarlock.optimizer.lr)
amp/     auto_cast, decorate, GradScaler (oarlock.amp)

Everything here is Python over the public ops; this distribution defines no op and registers no kernel
(the optimizers' fused update ops are the "optimizer_update" family of oarlock-ops). Its plugin, "nn",
only exports classes and functions into the public namespaces.
"""
