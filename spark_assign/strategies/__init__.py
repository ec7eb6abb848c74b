"""One module per strategy. Each exposes ``assign_<name>(members, partitions, *, lags=None,
validate=True, topic_sizes=None, <its declared options>)`` over normalized, validated inputs
(see :mod:`spark_assign.inputs`); what each one is, its options included, is its record in :mod:`.registry`."""
