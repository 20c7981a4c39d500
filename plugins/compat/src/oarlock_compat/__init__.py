"""oarlock-compat: run code written for other frameworks on oarlock without editing it.

`enable_paddle_alias()` makes `import paddle` (and `import paddle.nn.functional as F`, `from paddle.distributed
import fleet`, ...) give the oarlock modules, so Paddle programs and libraries run unchanged."""

from oarlock_compat.alias import disable_paddle_alias, enable_paddle_alias, paddle_alias, paddle_alias_enabled

__all__ = ["enable_paddle_alias", "disable_paddle_alias", "paddle_alias", "paddle_alias_enabled"]
