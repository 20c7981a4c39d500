"""oarlock-ops: the standard operator families, each kernel written once against `xp`."""
