"""oarlock-resilience: fault tolerance for long training jobs, exported as oarlock.distributed.resilience.

- sdc_*: online silent-data-corruption detection (SDCMonitor): fingerprints of the parameters compared across
  data-parallel replicas, replayed micro-batches, numeric guards; SilentDataCorruptionError.
- recovery_*: in-memory checkpoint replicas on a buddy rank, checksum-verified reassembly after a lost rank or
  disk, and resume(state_dict, path) for jobs restarted by `oarlock launch --max-restarts`."""
