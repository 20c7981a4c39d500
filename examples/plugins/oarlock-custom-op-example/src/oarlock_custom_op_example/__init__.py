"""oarlock-custom-op-example: a plugin distribution whose op is compiled C++ (csrc/fused_bias_relu.cc)."""
