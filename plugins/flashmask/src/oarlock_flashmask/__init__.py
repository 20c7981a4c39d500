"""oarlock-flashmask: Paddle's flashmask_attention and flashmask_to_densemask (see oarlock_flashmask.kernel)."""
