"""Engine-free scale-out: split a matrix into hash shards and merge the shard runs into one."""
