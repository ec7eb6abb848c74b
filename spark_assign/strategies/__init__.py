"""One module per strategy. Each exposes ``assign_<name>(members, partitions, *, lags=None,
validate=True, topic_sizes=None, <its declared options>)`` over normalized, validated inputs
(see :mod:`spark_assign.inputs`); the options are declared in :mod:`spark_assign.options`."""
